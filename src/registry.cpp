// The queue's registry (registry.hpp). Every file operation is relative to
// descriptors opened without following symlinks; only names of the
// registry's own form are ever removed, and only this user's.
#include "registry.hpp"

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>

#include "etcd/address.hpp"
#include "etcd/look.hpp"
#include "meta.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "registry_files.hpp"

namespace offload_lock::detail {

namespace registry_files {

kind name_kind(const std::string& n, std::int64_t* pid) {
  std::string s = n;
  kind k = kind::none;
  auto ends = [&](const char* ext) {
    const std::size_t e = std::char_traits<char>::length(ext);
    return s.size() > e && s.compare(s.size() - e, e, ext) == 0;
  };
  if (!s.empty() && s[0] == '.' && ends(".tmp")) {
    k = kind::temporary;
    s = s.substr(1, s.size() - 5);
  } else if (ends(".json")) {
    k = kind::entry;
    s.resize(s.size() - 5);
  } else if (ends(".wake")) {
    k = kind::wake;
    s.resize(s.size() - 5);
  } else {
    return kind::none;
  }
  const auto dash = s.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 10 || s.size() - dash - 1 != 12) return kind::none;
  std::int64_t p = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i < dash) {
      if (c < '0' || c > '9') return kind::none;
      p = p * 10 + (c - '0');
    } else if (i > dash && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return kind::none;
    }
  }
  if (pid) *pid = p;
  return k;
}

result<sys::fd> open_parent(const std::string& base, std::string& name) {
  std::string parent;
  sys::split_path(base, parent, name);
  if (name.empty()) return error(errc::bad_input, "lock path '" + base + "' names no directory");
  return sys::open_dir(sys::cwd, parent, false, parent);
}

}  // namespace registry_files

using namespace registry_files;

namespace {

std::string stem_of(const std::string& entry_name) { return entry_name.substr(0, entry_name.size() - 5); }

// This user's directory in the registry `top`: the one it owns (by owner,
// not by name), made as "u<uid>" (or, if another user took that name,
// "u<uid>-<hex>") when there is none. Empty when none can be had.
std::string own_dir(int top, const std::string& shown, bool make) {
  const std::uint32_t me = sys::effective_uid();
  std::string preferred = "u" + std::to_string(me);
  if (auto st = sys::stat_at(top, preferred, shown); st && st->is_dir && st->uid == me) return preferred;
  if (auto names = sys::list_dir(top, shown, kTopNames))
    for (const auto& n : *names)
      if (n.rfind(preferred + "-", 0) == 0)
        if (auto st = sys::stat_at(top, n, shown); st && st->is_dir && st->uid == me) return n;
  if (!make) return {};
  for (const std::string& n : {preferred, preferred + "-" + sys::random_hex(4)}) {
    if (auto e = sys::mkdir_at(top, n, 0755, shown)) {
      if (e.code() == std::errc::file_exists) continue;
      return {};
    }
    // Exactly 0755 whatever the umask: readable by everyone who shares the
    // lock, writable by its owner alone.
    if (auto d = sys::open_dir(top, n, true, shown)) (void)sys::chmod_fd(d->get(), 0755, shown);
    return n;
  }
  return {};
}

}  // namespace

std::string queue_dir_name(const std::string& lock_name) { return "." + lock_name + ".queue"; }

std::string queue_base(const std::string& slot_path, int slot) {
  if (slot <= 0) return slot_path;
  const std::string suffix = gpu_slot_path("", slot);
  if (slot_path.size() > suffix.size() && slot_path.compare(slot_path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return slot_path.substr(0, slot_path.size() - suffix.size());
  return slot_path;
}

std::string queue_entry::stem() const { return stem_of(name); }

std::string serialize_waiter(const waiter_record& r) {
  nlohmann::ordered_json j;
  j["pid"] = r.pid;
  j["label"] = r.label;
  j["host"] = r.host;
  j["since"] = r.since;
  j["gpu"] = r.gpu >= 0 ? nlohmann::ordered_json(r.gpu) : nlohmann::ordered_json();
  j["gpus"] = r.gpus;
  j["priority"] = r.priority;
  j["expectMs"] = r.expect_ms > 0 ? nlohmann::ordered_json(r.expect_ms) : nlohmann::ordered_json();
  if (!r.slots.empty() && r.slots.size() <= max_listed_slots) j["slots"] = r.slots;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

bool parse_waiter(const std::string& bytes, waiter_record& out) {
  auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || !sys::valid_pid(pid->get<std::int64_t>())) return false;
  out = waiter_record{};
  out.pid = pid->get<std::int64_t>();
  auto str = [&](const char* key, std::string& into) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) into = it->get<std::string>();
  };
  str("label", out.label);
  str("host", out.host);
  auto integer = [&](const char* key) -> std::optional<std::int64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<std::int64_t>();
  };
  out.since = integer("since").value_or(0);
  if (auto g = integer("gpu"); g && *g >= 0 && *g < max_gpus) out.gpu = static_cast<int>(*g);
  if (auto g = integer("gpus"); g && *g >= 1 && *g <= max_gpus) out.gpus = static_cast<int>(*g);
  if (auto p = integer("priority")) out.priority = static_cast<int>(std::clamp<std::int64_t>(*p, -100, 100));
  if (auto e = integer("expectMs"); e && *e > 0) out.expect_ms = *e;
  if (auto it = j.find("slots"); it != j.end() && it->is_array() && it->size() <= max_listed_slots)
    for (const auto& k : *it)
      if (k.is_number_integer() && k.get<std::int64_t>() >= 0 && k.get<std::int64_t>() < max_gpus)
        out.slots.push_back(static_cast<int>(k.get<std::int64_t>()));
  return true;
}

bool served_before_keys(int priority, std::int64_t arrival_ns, std::uint32_t uid, const std::string& dir,
                        const std::string& name, const queue_entry& b) {
  if (priority != b.rec.priority) return priority > b.rec.priority;
  if (arrival_ns != b.arrival_ns) return arrival_ns < b.arrival_ns;
  if (uid != b.uid) return uid < b.uid;
  if (dir != b.dir) return dir < b.dir;
  return name < b.name;
}

bool served_before(const queue_entry& a, const queue_entry& b) {
  return served_before_keys(a.rec.priority, a.arrival_ns, a.uid, a.dir, a.name, b);
}

int queue_slot(const waiter_record& r) { return r.gpu >= 0 ? r.gpu : r.gpus == 1 ? 0 : -1; }

bool accepts(const waiter_record& r, int slot) {
  if (r.gpu >= 0 || r.gpus <= 1) return queue_slot(r) == slot;
  return slot >= 0 && slot < r.gpus &&
         (r.slots.empty() || std::find(r.slots.begin(), r.slots.end(), slot) != r.slots.end());
}

// ---- registration ----

std::unique_ptr<registration> registration::add(const std::string& base, const waiter_record& rec_in) {
  std::string name;
  auto parent = open_parent(base, name);
  if (!parent) return nullptr;
  waiter_record rec = rec_in;
  // Within the entry's cap whatever the label holds (a control character
  // takes six bytes once escaped).
  if (rec.label.size() > max_entry_label) rec.label = repair_utf8(std::string_view(rec.label).substr(0, max_entry_label));
  const std::string bytes = serialize_waiter(rec);
  std::unique_ptr<registration> reg(new registration());
  reg->top_name_ = queue_dir_name(name);
  reg->shown_ = base + " queue";
  const std::string stem = std::to_string(rec.pid) + "-" + sys::random_hex(6);
  // The last waiter to leave removes the directories; one that opened them
  // just before then finds them deleted (ENOENT) and makes them again.
  // Failing (short of descriptors, say), this one removes them as it would
  // on leaving: each by name, and only when empty.
  auto give_up = [&](const sys::fd* top, const std::string& dir) -> std::unique_ptr<registration> {
    if (top && !dir.empty()) (void)sys::unlink_at(top->get(), dir, true, reg->shown_);
    (void)sys::unlink_at(parent->get(), reg->top_name_, true, reg->shown_);
    return nullptr;
  };
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (!sys::mkdir_at(parent->get(), reg->top_name_, 0777, reg->shown_)) {
      // New: as open as the lock's parent (world-writable in /tmp,
      // group-writable in a group's directory), and sticky.
      auto d = sys::open_dir(parent->get(), reg->top_name_, true, reg->shown_);
      auto pst = sys::stat_fd(parent->get(), reg->shown_);
      if (d && pst) (void)sys::chmod_fd(d->get(), (pst->mode & 0777) | 01000, reg->shown_);
    }
    auto top = sys::open_dir(parent->get(), reg->top_name_, true, reg->shown_);
    if (!top) {
      if (top.error().code() == std::errc::no_such_file_or_directory) continue;
      return give_up(nullptr, {});  // not a directory, or not ours to read
    }
    const std::string dir = own_dir(top->get(), reg->shown_, true);
    if (dir.empty()) continue;
    auto d = sys::open_dir(top->get(), dir, true, reg->shown_);
    if (!d) {
      if (d.error().code() == std::errc::no_such_file_or_directory) continue;
      return give_up(&*top, dir);
    }
    const std::string tmp = "." + stem + ".tmp", final_name = stem + ".json", wake = stem + ".wake";
    auto w = sys::make_fifo_at(d->get(), wake, 0600, reg->shown_);
    if (!w) {
      if (w.error().code() == std::errc::no_such_file_or_directory) continue;
      d->reset();
      return give_up(&*top, dir);
    }
    auto undo = [&] {
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      (void)sys::unlink_at(d->get(), wake, false, reg->shown_);
    };
    const unsigned mode = entry_mode(rec.priority);
    auto f = sys::create_file_at(d->get(), tmp, bytes, mode, reg->shown_);
    // 0644 (0744) whatever the umask: readable by all, and only its owner
    // can open it for writing, so only its owner can hold the lock that
    // proves it.
    if (!f || sys::chmod_fd(f->get(), mode, reg->shown_) || sys::ofd_lock(f->get(), true) ||
        sys::rename_at(d->get(), tmp, final_name, reg->shown_)) {
      undo();
      if (!f && f.error().code() == std::errc::no_such_file_or_directory) continue;
      d->reset();
      return give_up(&*top, dir);
    }
    auto st = sys::stat_fd(f->get(), reg->shown_);
    if (!st) {
      (void)sys::unlink_at(d->get(), final_name, false, reg->shown_);
      undo();
      d->reset();
      return give_up(&*top, dir);
    }
    sys::guard_from_fork(f->get());
    reg->me_.dir = dir;
    reg->me_.name = final_name;
    reg->me_.uid = st->uid;
    reg->me_.arrival_ns = st->ctime_ns;
    reg->me_.rec = rec;
    reg->entry_ = std::move(*f);
    reg->wake_ = std::move(*w);
    reg->dir_ = std::move(*d);
    reg->top_ = std::move(*top);
    reg->parent_ = std::move(*parent);
    return reg;
  }
  return give_up(nullptr, {});
}

std::vector<std::string> registration::messages() {
  std::vector<std::string> out;
  std::string buf;
  char chunk[512];
  for (;;) {
    auto n = sys::read_some(wake_.get(), chunk, sizeof chunk);
    if (n <= 0) break;
    buf.append(chunk, static_cast<std::size_t>(n));
    if (buf.size() > 65536) break;  // a flood: the rest waits for the next look
  }
  std::size_t from = 0;
  for (std::size_t nl; (nl = buf.find('\n', from)) != std::string::npos; from = nl + 1)
    out.push_back(buf.substr(from, nl - from));
  return out;
}

void tidy_registry(const std::string& base, const std::string& user_dir) {
  std::string name;
  auto parent = open_parent(base, name);
  if (!parent) return;
  const std::string top = queue_dir_name(name), shown = base + " queue";
  // By name, each only when empty (ENOTEMPTY otherwise). In a sticky
  // registry another user's directory of that name is not ours to remove
  // (EPERM), and neither is another user's registry in a sticky parent.
  (void)sys::unlink_at(parent->get(), top + "/" + user_dir, true, shown);
  (void)sys::unlink_at(parent->get(), top, true, shown);
}

bool registration::send_beside(const std::string& to_stem, const std::string& line, bool confirm) {
  auto w = sys::open_fifo_writer(dir_.get(), to_stem + ".wake", shown_);
  if (!w) return false;
  const std::string bytes = line + "\n";
  if (sys::write_some(w->get(), bytes.data(), bytes.size()) != static_cast<long>(bytes.size())) return false;
  return !confirm || static_cast<bool>(sys::stat_at(dir_.get(), to_stem + ".json", shown_));
}

bool registration::withdraw() {
  if (withdrawn_) return removed_;
  withdrawn_ = true;
  auto gone = [](const error& e) { return !e || e.code() == std::errc::no_such_file_or_directory; };
  const bool entry = gone(sys::unlink_at(dir_.get(), me_.name, false, shown_));
  const bool channel = gone(sys::unlink_at(dir_.get(), me_.stem() + ".wake", false, shown_));
  removed_ = entry && channel;
  return removed_;
}

void registration::close_dirs() {
  if (!withdrawn_ || !keep_dirs_) return;
  dir_.reset();
  top_.reset();
  parent_.reset();
}

registration::~registration() {
  try {
    sys::unguard_from_fork(entry_.get());
    (void)withdraw();
    entry_.reset();
    wake_.reset();
    dir_.reset();
    // Each succeeds only when nothing else is left in it (ENOTEMPTY).
    if (!keep_dirs_) {
      (void)sys::unlink_at(top_.get(), me_.dir, true, shown_);
      top_.reset();
      (void)sys::unlink_at(parent_.get(), top_name_, true, shown_);
    }
  } catch (...) {
    // Out of memory building a message: the entry stays, unlocked, and is
    // swept by this user's next waiter.
  }
}

bool send(const std::string& base, const std::string& to_dir, const std::string& to_stem, const std::string& line,
          bool confirm) {
  std::string name;
  auto parent = open_parent(base, name);
  if (!parent) return false;
  auto top = sys::open_dir(parent->get(), queue_dir_name(name), true, base);
  if (!top) return false;
  auto d = sys::open_dir(top->get(), to_dir, true, base);
  if (!d) return false;
  // Only into a channel of this user's own (the FIFO is 0600 anyway).
  auto st = sys::stat_fd(d->get(), base);
  if (!st || st->uid != sys::effective_uid()) return false;
  auto w = sys::open_fifo_writer(d->get(), to_stem + ".wake", base);
  if (!w) return false;
  const std::string bytes = line + "\n";
  if (sys::write_some(w->get(), bytes.data(), bytes.size()) != static_cast<long>(bytes.size())) return false;
  // The entry is withdrawn before its channel is read a last time
  // (registration::withdraw): still there now, the line will be read.
  return !confirm || static_cast<bool>(sys::stat_at(d->get(), to_stem + ".json", base));
}

namespace {
// A waiter that can never write again: exited, or killed and not yet
// reaped by its parent (a zombie).
bool gone(std::int64_t pid) {
  const auto l = sys::probe(pid);
  return l == sys::liveness::dead || l == sys::liveness::zombie;
}
}  // namespace

void sweep_registry(const std::string& base) {
  std::string name;
  auto parent = open_parent(base, name);
  if (!parent) return;
  const std::string top_name = queue_dir_name(name), shown = base + " queue";
  auto top = sys::open_dir(parent->get(), top_name, true, shown);
  if (!top) return;
  const std::string dir = own_dir(top->get(), shown, false);
  if (dir.empty()) return;
  auto d = sys::open_dir(top->get(), dir, true, shown);
  if (!d) return;
  auto names = sys::list_dir(d->get(), shown, kOwnNames);
  if (!names) return;
  std::set<std::string> live_stems;
  std::vector<std::string> wakes;
  for (const auto& n : *names) {
    std::int64_t pid = 0;
    switch (name_kind(n, &pid)) {
      case kind::entry: {
        auto f = sys::open_read(d->get(), n, shown);
        if (!f) break;
        if (sys::write_locked_elsewhere(f->get()) == sys::lock_probe::unlocked)
          (void)sys::unlink_at(d->get(), n, false, shown);
        else live_stems.insert(stem_of(n));
        break;
      }
      case kind::temporary:
        // Being written by a live waiter; a dead one's is left over.
        if (gone(pid)) (void)sys::unlink_at(d->get(), n, false, shown);
        break;
      case kind::wake: wakes.push_back(n); break;
      case kind::none: break;
    }
  }
  for (const auto& w : wakes) {
    std::int64_t pid = 0;
    (void)name_kind(w, &pid);
    if (!live_stems.count(w.substr(0, w.size() - 5)) && gone(pid))
      (void)sys::unlink_at(d->get(), w, false, shown);
  }
  d->reset();
  (void)sys::unlink_at(top->get(), dir, true, shown);
  top->reset();
  (void)sys::unlink_at(parent->get(), top_name, true, shown);
}

std::vector<waiter> read_waiters(const std::string& base, std::int64_t now_ms) {
  std::vector<waiter> out;
  registry_reader reader(base);
  const auto live = reader.live();
  // Each slot's holder, looked at once: where its queue starts.
  std::map<int, std::optional<milliseconds>> free_in;
  for (std::size_t k = 0; k < live.size(); ++k) {
    const waiter_record& r = live[k].rec;
    waiter w;
    // 1 + those ahead that would take a slot this one would.
    w.position = 1;
    for (std::size_t j = 0; j < k; ++j)
      for (int s = 0; s < std::max(r.gpus, r.gpu + 1); ++s)
        if (accepts(r, s) && accepts(live[j].rec, s)) {
          ++w.position;
          break;
        }
    w.pid = r.pid;
    w.label = r.label;
    w.host = r.host;
    w.since = r.since;
    // A missing or nonsensical start (0, negative, in the future) reads as
    // no time waited rather than decades.
    w.waited = milliseconds(r.since > 0 && r.since <= now_ms ? now_ms - r.since : 0);
    w.gpu = r.gpu;
    w.gpus = r.gpus;
    w.priority = r.priority;
    w.expected = milliseconds(r.expect_ms);
    if (r.gpu >= 0 || r.gpus <= 1) {
      const int slot = std::max(0, r.gpu);
      auto it = free_in.find(slot);
      if (it == free_in.end()) {
        const info i = inspect(gpu_slot_path(base, slot));
        it = free_in.emplace(slot, i.held ? i.expected_free_in : std::optional<milliseconds>(0)).first;
      }
      w.eta = it->second;
      for (std::size_t j = 0; j < k && w.eta; ++j)
        if (accepts(live[j].rec, slot)) {
          if (live[j].rec.expect_ms > 0) *w.eta += milliseconds(live[j].rec.expect_ms);
          else w.eta.reset();
        }
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace offload_lock::detail

namespace offload_lock {

std::vector<waiter> waiters(const std::string& path) {
  if (detail::etcd::is_etcd(path)) return detail::etcd::waiters(path);
  return detail::read_waiters(path, detail::sys::now_ms());
}

}  // namespace offload_lock
