// The waiter registry (waiters.hpp). Every file operation is relative to
// descriptors opened without following symlinks; only names of the
// registry's own form are ever removed.
#include "waiters.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "judge.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

// An entry is "<pid>-<12 hex>.json"; while it is being written,
// ".<pid>-<12 hex>.tmp", so a reader never sees half of one.
constexpr std::size_t kEntryCap = waiter_entry_cap;
constexpr std::size_t kMaxEntries = 4096;

bool entry_name(const std::string& n, bool& temporary) {
  std::string s = n;
  temporary = !s.empty() && s[0] == '.';
  if (temporary) s.erase(0, 1);
  const std::string ext = temporary ? ".tmp" : ".json";
  if (s.size() <= ext.size() || s.compare(s.size() - ext.size(), ext.size(), ext) != 0) return false;
  s.resize(s.size() - ext.size());
  auto dash = s.find('-');
  if (dash == 0 || dash == std::string::npos || s.size() - dash - 1 != 12) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = i < dash ? (c >= '0' && c <= '9')
                       : i == dash || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!ok) return false;
  }
  return true;
}

// Whether the process that wrote the entry still waits (B6, as judge.hpp
// applies it to a recorded process).
bool alive(const waiter_record& r) {
  return recorded_process_alive({r.pid, r.host, r.boot_id, r.proc_ticks}, process_view::real());
}

// Removes the entries of this host's waiters that died without leaving
// (killed, say), all but `keep`. Only names of the registry's own form.
void sweep_dead(int dir, const std::string& keep, const std::string& shown) {
  auto names = sys::list_dir(dir, shown);
  if (!names) return;
  std::size_t seen = 0;
  for (const auto& n : *names) {
    bool temporary = false;
    if (n == keep || !entry_name(n, temporary) || ++seen > kMaxEntries) continue;
    waiter_record other;
    // A waiter alive by the pid in its name is not swept: one kill(0) rather
    // than a read, for every entry a flood may have planted.
    std::int64_t name_pid = 0;
    try {
      name_pid = std::stoll(n.substr(temporary ? 1 : 0, n.find('-')));
    } catch (...) {
      continue;
    }
    if (sys::probe(name_pid) == sys::liveness::alive) continue;
    // Another user's file is not ours to remove (and, in a sticky /tmp, not
    // removable): a stat rather than a read for each of a flood.
    auto st = sys::stat_at(dir, n, shown);
    if (!st || st->uid != sys::effective_uid()) continue;
    if (temporary) {
      // Being written: judged by the pid in its name.
      try {
        other.pid = std::stoll(n.substr(1, n.find('-') - 1));
      } catch (...) {
        continue;
      }
      other.host = sys::host_name();
    } else {
      // Write-locked: its waiter lives, in a pid namespace where the pid
      // in its name means another process (or none).
      auto mb = sys::read_file_at(dir, n, kEntryCap, shown, true);
      if (!mb || mb->truncated || mb->write_locked || !parse_waiter(mb->bytes, other)) continue;
    }
    if (other.host == sys::host_name() && !alive(other)) (void)sys::unlink_at(dir, n, false, shown);
  }
}

result<sys::fd> open_parent(const std::string& lock_path, std::string& name) {
  std::string parent;
  sys::split_path(lock_path, parent, name);
  if (name.empty()) return error(errc::bad_input, "lock path '" + lock_path + "' names no directory");
  return sys::open_dir(sys::cwd, parent, false, parent);
}

}  // namespace

std::string waiters_dir_name(const std::string& lock_name) { return "." + lock_name + ".waiters"; }

std::string serialize_waiter(const waiter_record& r) {
  nlohmann::ordered_json j;
  j["pid"] = r.pid;
  j["label"] = r.label;
  j["host"] = r.host;
  j["since"] = r.since;
  j["gpu"] = r.gpu >= 0 ? nlohmann::ordered_json(r.gpu) : nlohmann::ordered_json();
  j["gpus"] = r.gpus;
  j["bootId"] = r.boot_id;
  j["procTicks"] = r.proc_ticks;
  j["priority"] = r.priority;
  j["expectMs"] = r.expect_ms > 0 ? nlohmann::ordered_json(r.expect_ms) : nlohmann::ordered_json();
  j["queuedUs"] = r.queued_us;
  if (r.pid_ns) j["pidNs"] = r.pid_ns;
  if (!r.slots.empty() && r.slots.size() <= max_listed_slots) j["slots"] = r.slots;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

bool parse_waiter(const std::string& bytes, waiter_record& out) {
  auto j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto pid = j.find("pid");
  if (pid == j.end() || !pid->is_number_integer() || pid->get<std::int64_t>() <= 0 ||
      !sys::valid_pid(pid->get<std::int64_t>()))
    return false;
  out = waiter_record{};
  out.pid = pid->get<std::int64_t>();
  auto str = [&](const char* key, std::string& into) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) into = it->get<std::string>();
  };
  str("label", out.label);
  str("host", out.host);
  str("bootId", out.boot_id);
  if (auto it = j.find("since"); it != j.end() && it->is_number_integer()) out.since = it->get<std::int64_t>();
  if (auto it = j.find("procTicks"); it != j.end() && it->is_number_unsigned())
    out.proc_ticks = it->get<std::uint64_t>();
  if (auto it = j.find("gpu"); it != j.end() && it->is_number_integer()) {
    auto g = it->get<std::int64_t>();
    if (g >= 0 && g < 1024) out.gpu = static_cast<int>(g);
  }
  if (auto it = j.find("gpus"); it != j.end() && it->is_number_integer()) {
    auto g = it->get<std::int64_t>();
    if (g >= 1 && g <= 1024) out.gpus = static_cast<int>(g);
  }
  if (auto it = j.find("priority"); it != j.end() && it->is_number_integer()) {
    auto p = it->get<std::int64_t>();
    out.priority = static_cast<int>(std::clamp<std::int64_t>(p, -100, 100));
  }
  if (auto it = j.find("expectMs"); it != j.end() && it->is_number_integer() && it->get<std::int64_t>() > 0)
    out.expect_ms = it->get<std::int64_t>();
  if (auto it = j.find("queuedUs"); it != j.end() && it->is_number_integer()) out.queued_us = it->get<std::int64_t>();
  if (auto it = j.find("pidNs"); it != j.end() && it->is_number_unsigned()) out.pid_ns = it->get<std::uint64_t>();
  if (auto it = j.find("slots"); it != j.end() && it->is_array() && it->size() <= max_listed_slots)
    for (const auto& k : *it)
      if (k.is_number_integer() && k.get<std::int64_t>() >= 0 && k.get<std::int64_t>() < 1024)
        out.slots.push_back(static_cast<int>(k.get<std::int64_t>()));
  return true;
}

std::unique_ptr<waiter_registration> waiter_registration::add(const std::string& lock_path,
                                                              const waiter_record& rec) {
  std::string name;
  auto parent = open_parent(lock_path, name);
  if (!parent) return nullptr;
  std::unique_ptr<waiter_registration> reg(new waiter_registration());
  reg->dir_name_ = waiters_dir_name(name);
  reg->shown_ = lock_path + " waiter registry";
  const std::string id = std::to_string(rec.pid) + "-" + sys::random_hex(6);
  const std::string bytes = serialize_waiter(rec);
  // The last waiter to leave removes the directory; one that opened it just
  // before then finds it deleted (ENOENT) and makes it again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (!sys::mkdir_at(parent->get(), reg->dir_name_, 0700, reg->shown_)) {
      // New: as open as the lock's parent (sticky and world-writable in
      // /tmp, group-writable in a directory of a group's own).
      auto d = sys::open_dir(parent->get(), reg->dir_name_, true, reg->shown_);
      auto pst = sys::stat_fd(parent->get(), reg->shown_);
      if (d && pst) (void)sys::chmod_fd(d->get(), pst->mode & 07777, reg->shown_);
    }
    auto d = sys::open_dir(parent->get(), reg->dir_name_, true, reg->shown_);
    if (!d) return nullptr;  // not a directory, or not ours to read
    const std::string tmp = "." + id + ".tmp", final_name = id + ".json";
    // 0644: only its owner can open it for writing, so only its owner can
    // hold the write lock that proves the waiter alive.
    auto f = sys::create_file_at(d->get(), tmp, bytes, 0644, reg->shown_);
    if (!f) {
      if (f.error().code() == std::errc::no_such_file_or_directory) continue;
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      return nullptr;
    }
    if (sys::ofd_lock(f->get(), true)) {
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      return nullptr;
    }
    if (sys::rename_at(d->get(), tmp, final_name, reg->shown_)) {
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      continue;
    }
    reg->entry_ = std::move(*f);
    reg->file_ = final_name;
    reg->dir_ = std::move(*d);
    reg->parent_ = std::move(*parent);
    sweep_dead(reg->dir_.get(), reg->file_, reg->shown_);
    return reg;
  }
  return nullptr;
}

waiter_registration::~waiter_registration() {
  try {
    (void)sys::unlink_at(dir_.get(), file_, false, shown_);
    entry_.reset();
    sweep_dead(dir_.get(), file_, shown_);
    dir_.reset();
    // Succeeds only when no other entry is left (ENOTEMPTY otherwise).
    (void)sys::unlink_at(parent_.get(), dir_name_, true, shown_);
  } catch (...) {
    // Out of memory building a message: the entry stays, and is swept once
    // this process is gone.
  }
}

void sweep_waiters(int parent, const std::string& dir_name, const std::string& lock_path) {
  const std::string shown = lock_path + " waiter registry";
  auto d = sys::open_dir(parent, dir_name, true, shown);
  if (!d) return;
  sweep_dead(d->get(), std::string(), shown);
  d->reset();
  (void)sys::unlink_at(parent, dir_name, true, shown);
}

bool served_before(const queue_entry& a, const queue_entry& b) {
  if (a.rec.priority != b.rec.priority) return a.rec.priority > b.rec.priority;
  if (a.rec.queued_us != b.rec.queued_us) return a.rec.queued_us < b.rec.queued_us;
  if (a.rec.pid != b.rec.pid) return a.rec.pid < b.rec.pid;
  return a.name < b.name;
}

int queue_slot(const waiter_record& r) { return r.gpu >= 0 ? r.gpu : r.gpus == 1 ? 0 : -1; }

bool accepts(const waiter_record& r, int slot) {
  if (r.gpu >= 0 || r.gpus <= 1) return queue_slot(r) == slot;
  return slot >= 0 && slot < r.gpus && (r.slots.empty() || std::find(r.slots.begin(), r.slots.end(), slot) != r.slots.end());
}

registry_reader::registry_reader(const std::string& lock_path) : lock_path_(lock_path) {
  std::string parent, name;
  sys::split_path(lock_path, parent, name);
  dir_name_ = waiters_dir_name(name);
  dir_path_ = parent + "/" + dir_name_;
}

bool registry_reader::open_dir() {
  if (!parent_.valid()) {
    std::string name;
    auto p = open_parent(lock_path_, name);
    if (!p) return false;
    parent_ = std::move(*p);
  }
  // Opened afresh each time: the last waiter out removes the directory and
  // the next one in makes a new one.
  auto d = sys::open_dir(parent_.get(), dir_name_, true, lock_path_);
  if (!d) return false;
  dir_ = std::move(*d);
  return true;
}

std::vector<queue_entry> registry_reader::live(const queue_entry* before) {
  std::vector<queue_entry> out;
  if (!open_dir()) return out;
  auto names = sys::list_dir(dir_.get(), lock_path_);
  if (!names) return out;
  const process_view pv = process_view::real();
  const std::uint64_t my_ns = sys::pid_namespace().value_or(0);
  std::size_t seen = 0;
  std::map<std::string, std::pair<sys::file_id, waiter_record>> kept;
  for (const auto& n : *names) {
    bool temporary = false;
    if (!entry_name(n, temporary) || temporary || dead_.count(n)) continue;
    if (++seen > kMaxEntries) break;
    auto cached = parsed_.find(n);
    const bool have = cached != parsed_.end();
    // Known to come after `before`: kept, not probed.
    if (have && before && !served_before({n, cached->second.second}, *before)) {
      kept[n] = cached->second;
      continue;
    }
    // A known entry is only probed (one byte read); a new one read whole.
    auto mb = sys::read_file_at(dir_.get(), n, have ? 0 : kEntryCap, lock_path_, true);
    if (!mb) continue;  // gone meanwhile, or not a file
    waiter_record r;
    if (have && cached->second.first == mb->st.id) {
      r = cached->second.second;
    } else {
      auto again = have ? sys::read_file_at(dir_.get(), n, kEntryCap, lock_path_, true) : std::move(mb);
      if (!again) continue;
      mb = std::move(again);
      if (mb->truncated || !parse_waiter(mb->bytes, r) || n.compare(0, n.find('-'), std::to_string(r.pid)) != 0) {
        dead_.insert(n);
        continue;
      }
    }
    // Another pid namespace's pid cannot be probed from here: its write
    // lock is the proof.
    const bool other_ns = r.pid_ns && my_ns && r.pid_ns != my_ns;
    // And only a file of the process's own user (or root's) speaks for it:
    // another user's file naming this process is a forgery.
    bool forged = false;
    if (!other_ns && mb->st.uid != 0)
      if (auto owner = sys::process_uid(r.pid)) forged = *owner != mb->st.uid;
    if (!mb->write_locked || forged ||
        (!other_ns && !recorded_process_alive({r.pid, r.host, r.boot_id, r.proc_ticks}, pv))) {
      dead_.insert(n);
      continue;
    }
    kept[n] = {mb->st.id, r};
    queue_entry e{n, std::move(r)};
    if (!before || served_before(e, *before)) out.push_back(std::move(e));
  }
  parsed_ = std::move(kept);
  std::sort(out.begin(), out.end(), served_before);
  return out;
}

bool registry_reader::present(const std::string& name) {
  return dir_.valid() && sys::stat_at(dir_.get(), name, lock_path_).has_value();
}

std::vector<waiter> read_waiters(const std::string& lock_path, std::int64_t now_ms) {
  std::vector<waiter> out;
  registry_reader reader(lock_path);
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
        const info i = inspect(gpu_slot_path(lock_path, slot));
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

std::vector<waiter> waiters(const std::string& path) { return detail::read_waiters(path, detail::sys::now_ms()); }

}  // namespace offload_lock
