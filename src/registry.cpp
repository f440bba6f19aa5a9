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

namespace offload_lock::detail {

namespace {

// At most this many names are read from another user's directory and from
// the registry itself: a flood costs one bounded listing. This user's own
// directory is read in full (a queue of thousands of one user's waiters).
constexpr std::size_t kForeignNames = 256;
constexpr std::size_t kOwnNames = 16384;
constexpr std::size_t kTopNames = 256;
constexpr std::size_t kUserDirs = 64;
// Directory timestamps are coarser than a millisecond (a kernel tick): a
// listing is reused only when the directory was last changed longer ago.
constexpr std::int64_t kSettledMs = 50;

enum class kind { none, entry, temporary, wake };

// "<pid>-<12 hex>" followed by ".json" (an entry) or ".wake" (its wake
// channel); ".<pid>-<12 hex>.tmp" while it is being written.
kind name_kind(const std::string& n, std::int64_t* pid = nullptr) {
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

std::string stem_of(const std::string& entry_name) { return entry_name.substr(0, entry_name.size() - 5); }

result<sys::fd> open_parent(const std::string& base, std::string& name) {
  std::string parent;
  sys::split_path(base, parent, name);
  if (name.empty()) return error(errc::bad_input, "lock path '" + base + "' names no directory");
  return sys::open_dir(sys::cwd, parent, false, parent);
}

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

// ---- reading ----

registry_reader::registry_reader(const std::string& base) : base_(base) {
  std::string parent, name;
  sys::split_path(base, parent, name);
  top_name_ = queue_dir_name(name);
  top_path_ = parent + "/" + top_name_;
}

std::vector<std::string> registry_reader::dir_paths() const {
  std::vector<std::string> out;
  for (const auto& [n, uid] : top_dirs_) out.push_back(top_path_ + "/" + n);
  return out;
}

bool registry_reader::open_top() {
  // Directories held open are listed through their own descriptors (their
  // offsets rewound): a forked child shares those offsets with its parent,
  // so it opens its own.
  if (fork_generation_ != sys::fork_generation()) {
    fork_generation_ = sys::fork_generation();
    parent_.reset();
    borrowed_parent_ = -1;
    top_.reset();
    for (auto& [name, ud] : dirs_) ud.open.reset();
  }
  if (!parent_.valid() && borrowed_parent_ < 0) {
    std::string name;
    auto p = open_parent(base_, name);
    if (!p) return false;
    parent_ = std::move(*p);
  }
  const int parent = parent_.valid() ? parent_.get() : borrowed_parent_;
  // Looked up by name each time (the last waiter out removes the directory
  // and the next one in makes a new one), opened again only when the name
  // holds another directory than the one held open.
  auto named = sys::stat_at(parent, top_name_, top_path_);
  if (!named || !named->is_dir) {
    top_.reset();
    return false;
  }
  result<sys::stat_info> st = *named;
  if (!top_.valid() || named->id != top_open_id_) {
    auto d = sys::open_dir(parent, top_name_, true, top_path_);
    if (!d) {
      top_.reset();
      return false;
    }
    top_ = std::move(*d);
    st = sys::stat_fd(top_.get(), top_path_);
    if (!st) {
      top_.reset();
      return false;
    }
    top_open_id_ = st->id;
  }
  if (!(top_settled_ && st->id == top_id_ && st->mtime_ms == top_mtime_)) {
    auto names = sys::list_dir_again(top_.get(), top_path_, kTopNames);
    if (!names) return false;
    if (st->id != top_id_) {
      top_dirs_.clear();
      top_junk_.clear();
      dirs_.clear();
    }
    std::map<std::string, std::uint32_t> now;
    for (const auto& n : *names) {
      if (top_junk_.count(n)) continue;
      if (auto it = top_dirs_.find(n); it != top_dirs_.end()) {
        now.insert(*it);
        continue;
      }
      auto s = sys::stat_at(top_.get(), n, top_path_);
      if (s && s->is_dir) now[n] = s->uid;
      else if (s) top_junk_.insert(n);
    }
    top_dirs_ = std::move(now);
    top_id_ = st->id;
    top_mtime_ = st->mtime_ms;
    top_settled_ = sys::now_ms() - st->mtime_ms > kSettledMs;
  }
  return true;
}

std::map<std::string, registry_reader::entry_info>& registry_reader::known() {
  thread_local std::map<std::string, entry_info> k;
  return k;
}

std::vector<registry_reader::candidate> registry_reader::candidates(const queue_entry* before) {
  saw_dead_own_ = false;
  std::vector<candidate> out;
  if (!open_top()) return out;
  const std::uint32_t me = sys::effective_uid();
  std::size_t foreign = 0;
  for (const auto& [dir_name, uid] : top_dirs_) {
    if (uid != me && ++foreign > kUserDirs) continue;
    read_dir(dir_name, uid, before, out);
  }
  std::sort(out.begin(), out.end(), [](const candidate& a, const candidate& b) { return served_before(a.e, b.e); });
  return out;
}

std::vector<queue_entry> registry_reader::live(const queue_entry* before) {
  std::vector<queue_entry> out;
  for (auto& c : candidates(before)) {
    if (c.rest) c.e.rec = c.rest->rec;
    // Known to come after `before`: not probed at all.
    if (before && !served_before(c.e, *before)) continue;
    if (!c.proven && !prove(c)) continue;
    if (before && !served_before(c.e, *before)) continue;  // its file changed
    out.push_back(std::move(c.e));
  }
  std::sort(out.begin(), out.end(), served_before);
  return out;
}

std::optional<queue_entry> registry_reader::first(const std::function<bool(const queue_entry&)>& want) {
  // Entries not read before are read for their order, and probed (as the
  // known ones are) only as far as the search goes: a releaser reading the
  // entries that joined behind it since it last read probes one of them,
  // not all.
  defer_probes_ = true;
  auto found = candidates();
  defer_probes_ = false;
  for (auto& c : found) {
    if (c.rest) c.e.rec = c.rest->rec;
    // One placed by its mode alone is read before it is judged: what it
    // would take is in its record.
    if (!c.unread && !want(c.e)) continue;
    if (!c.proven && (!prove(c) || !want(c.e))) continue;
    return std::move(c.e);
  }
  return std::nullopt;
}

void registry_reader::read_dir(const std::string& dir_name, std::uint32_t uid, const queue_entry* before,
                               std::vector<candidate>& out) {
  user_dir& ud = dirs_[dir_name];
  if (ud.uid != uid) ud = user_dir{};
  ud.uid = uid;
  const std::string shown = top_path_ + "/" + dir_name;
  // Opened again only when the name holds another directory than the one
  // held open (as for the registry itself, open_top()).
  auto st = sys::stat_at(top_.get(), dir_name, shown);
  if (!ud.open.valid() || !st || st->id != ud.open_id) {
    ud.open.reset();
    auto d = sys::open_dir(top_.get(), dir_name, true, shown);
    if (!d) return;
    st = sys::stat_fd(d->get(), shown);
    if (!st) return;
    ud.open = std::move(*d);
    ud.open_id = st->id;
  }
  // A directory speaks for its owner alone; one whose owner changed is not read.
  if (!st->is_dir || st->uid != uid) {
    ud.open.reset();
    return;
  }
  const bool mine = uid == sys::effective_uid();
  if (!(ud.settled && st->id == ud.id && st->mtime_ms == ud.mtime)) {
    auto names = sys::list_dir_again(ud.open.get(), shown, mine ? kOwnNames : kForeignNames);
    if (!names) return;
    if (st->id != ud.id) {
      ud.parsed.clear();
      ud.dead.clear();
    }
    ud.names.clear();
    for (auto& n : *names) {
      if (name_kind(n) != kind::entry || ud.dead.count(n)) continue;
      ud.names.push_back(std::move(n));
    }
    // What was read of the entries no longer listed goes (both sorted: one
    // pass, and nothing copied).
    std::sort(ud.names.begin(), ud.names.end());
    auto listed = ud.names.cbegin();
    for (auto it = ud.parsed.begin(); it != ud.parsed.end();) {
      while (listed != ud.names.cend() && *listed < it->first) ++listed;
      if (listed == ud.names.cend() || *listed != it->first) it = ud.parsed.erase(it);
      else ++it;
    }
    ud.id = st->id;
    ud.mtime = st->mtime_ms;
    ud.settled = sys::now_ms() - st->mtime_ms > kSettledMs;
  }
  std::vector<std::string> names = std::move(ud.names);
  ud.names.clear();
  for (auto& n : names) {
    auto cached = ud.parsed.find(n);
    if (cached == ud.parsed.end())
      if (auto k = known().find(top_path_ + "/" + dir_name + "/" + n); k != known().end())
        cached = ud.parsed.emplace(n, k->second).first;
    // Not read before, when only its place is asked for (those before
    // `before`, or the first in line): placed by its mode and ctime if it
    // was written at priority 0, and read only once a caller needs it.
    if (cached == ud.parsed.end() && (before || defer_probes_) && order_by_mode(ud, dir_name, n))
      cached = ud.parsed.find(n);
    if (cached != ud.parsed.end()) {
      // Its order is known: probed only if a caller needs it (prove()), and
      // left out when it comes after `before` (compared on the keys alone).
      const entry_info& i = cached->second;
      if (before) {
        if (served_before_keys(i.rec.priority, i.ctime_ns, uid, dir_name, n, *before))
          out.push_back(candidate{queue_entry{dir_name, n, uid, i.ctime_ns, i.rec}, false, i.partial});
      } else {
        // The whole queue, of which first() usually looks at the front only:
        // the record is copied once it does.
        waiter_record keys;
        keys.pid = i.rec.pid;
        keys.priority = i.rec.priority;
        out.push_back(candidate{queue_entry{dir_name, n, uid, i.ctime_ns, std::move(keys)}, false, i.partial, &i});
      }
      ud.names.push_back(std::move(n));
      continue;
    }
    queue_entry e;
    const bool read = look(ud, dir_name, n, e, !defer_probes_);
    if (!ud.dead.count(n)) ud.names.push_back(std::move(n));
    if (read) out.push_back(candidate{std::move(e), !defer_probes_});
  }
}

bool registry_reader::order_by_mode(user_dir& ud, const std::string& dir_name, const std::string& n) {
  auto st = sys::stat_at(ud.open.get(), n, top_path_ + "/" + dir_name);
  if (!st || !st->is_regular || st->uid != ud.uid || !(st->mode & kPriorityZeroBit) ||
      st->size > static_cast<std::int64_t>(waiter_entry_cap))
    return false;
  std::int64_t name_pid = 0;
  (void)name_kind(n, &name_pid);
  entry_info info;
  info.id = st->id;
  // Arrived as its ctime says (a later change of its metadata only moves
  // that later, never earlier), at priority 0.
  info.ctime_ns = st->ctime_ns;
  info.rec.pid = name_pid;
  info.rec.priority = 0;
  info.partial = true;
  ud.parsed[n] = info;
  // Shared with this thread's other readers (a releaser's), as a read is.
  auto& k = known();
  if (k.size() >= 4096) k.clear();
  k[top_path_ + "/" + dir_name + "/" + n] = info;
  return true;
}

bool registry_reader::prove(candidate& c) {
  auto it = dirs_.find(c.e.dir);
  if (it == dirs_.end() || !it->second.open.valid()) return false;
  if (!look(it->second, c.e.dir, c.e.name, c.e, true)) return false;
  c.proven = true;
  return true;
}

bool registry_reader::look(user_dir& ud, const std::string& dir_name, const std::string& n, queue_entry& out,
                           bool probe) {
  const std::string shown = top_path_ + "/" + dir_name;
  const std::string key = top_path_ + "/" + dir_name + "/" + n;
  auto dead = [&] {
    ud.dead.insert(n);
    ud.parsed.erase(n);
    known().erase(key);
  };
  auto f = sys::open_read(ud.open.get(), n, shown);
  if (!f) {
    if (f.error().code() == std::errc::no_such_file_or_directory) dead();
    return false;  // unreadable for now: looked at again next time
  }
  auto fst = sys::stat_fd(f->get(), shown);
  if (!fst) return false;
  // Only a small regular file of the directory's owner is an entry: one
  // stat, not a read, for each of a flood of oversized or foreign junk.
  if (!fst->is_regular || fst->uid != ud.uid || fst->size > static_cast<std::int64_t>(waiter_entry_cap)) {
    dead();
    return false;
  }
  if (probe) {
    const sys::lock_probe proof = sys::write_locked_elsewhere(f->get());
    if (proof == sys::lock_probe::unlocked) {
      // Unlocked under its final name: its waiter has left or died, for good.
      if (ud.uid == sys::effective_uid()) saw_dead_own_ = true;
      dead();
      return false;
    }
  }
  entry_info info;
  auto cached = ud.parsed.find(n);
  if (cached != ud.parsed.end() && cached->second.id == fst->id && !cached->second.partial) {
    info = cached->second;
  } else {
    auto mb = sys::read_fd(f->get(), *fst, waiter_entry_cap, shown);
    std::int64_t name_pid = 0;
    (void)name_kind(n, &name_pid);
    // One whose mode says priority 0 and whose record says otherwise is
    // not an entry: readers that placed it by its mode alone would disagree
    // with those that read it.
    if (!mb || mb->truncated || !parse_waiter(mb->bytes, info.rec) || info.rec.pid != name_pid ||
        ((fst->mode & kPriorityZeroBit) && info.rec.priority != 0)) {
      dead();
      return false;
    }
    // A file naming a process of another user (visible in this pid
    // namespace) is a forgery: only root speaks for others. (In this
    // user's own directory nothing is gained by one: not looked for.)
    if (ud.uid != 0 && ud.uid != sys::effective_uid())
      if (auto owner = sys::process_uid(info.rec.pid); owner && *owner != ud.uid) {
        dead();
        return false;
      }
    info.id = fst->id;
    info.ctime_ns = fst->ctime_ns;
    ud.parsed[n] = info;
    auto& k = known();
    if (k.size() >= 4096) k.clear();  // bounded: a long queue is read again
    k[key] = info;
  }
  out = queue_entry{dir_name, n, ud.uid, info.ctime_ns, info.rec};
  return true;
}

bool registry_reader::send_to(const queue_entry& e, const std::string& line) {
  auto it = dirs_.find(e.dir);
  if (it == dirs_.end() || !it->second.open.valid() || it->second.uid != sys::effective_uid()) return false;
  auto w = sys::open_fifo_writer(it->second.open.get(), e.stem() + ".wake", top_path_);
  if (!w) return false;
  const std::string bytes = line + "\n";
  return sys::write_some(w->get(), bytes.data(), bytes.size()) == static_cast<long>(bytes.size());
}

bool registry_reader::present(const queue_entry& e) {
  return top_.valid() && sys::stat_at(top_.get(), e.dir + "/" + e.name, top_path_).has_value();
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
