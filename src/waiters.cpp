// The waiter registry (waiters.hpp). Every file operation is relative to
// descriptors opened without following symlinks; only names of the
// registry's own form are ever removed.
#include "waiters.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "judge.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

// An entry is "<pid>-<12 hex>.json"; while it is being written,
// ".<pid>-<12 hex>.tmp", so a reader never sees half of one.
constexpr std::size_t kEntryCap = std::size_t{64} * 1024;
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
    if (temporary) {
      // Being written: judged by the pid in its name.
      try {
        other.pid = std::stoll(n.substr(1, n.find('-') - 1));
      } catch (...) {
        continue;
      }
      other.host = sys::host_name();
    } else {
      auto mb = sys::read_file_at(dir, n, kEntryCap, shown);
      if (!mb || mb->truncated || !parse_waiter(mb->bytes, other)) continue;
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
    if (auto e = sys::write_new_file_at(d->get(), tmp, bytes, reg->shown_)) {
      if (e.code() == std::errc::no_such_file_or_directory) continue;
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      return nullptr;
    }
    if (sys::rename_at(d->get(), tmp, final_name, reg->shown_)) {
      (void)sys::unlink_at(d->get(), tmp, false, reg->shown_);
      continue;
    }
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

std::vector<waiter> read_waiters(const std::string& lock_path, std::int64_t now_ms) {
  std::vector<waiter> out;
  std::string name;
  auto parent = open_parent(lock_path, name);
  if (!parent) return out;
  auto d = sys::open_dir(parent->get(), waiters_dir_name(name), true, lock_path);
  if (!d) return out;
  auto names = sys::list_dir(d->get(), lock_path);
  if (!names) return out;
  std::size_t seen = 0;
  for (const auto& n : *names) {
    bool temporary = false;
    if (!entry_name(n, temporary) || temporary) continue;
    if (++seen > kMaxEntries) break;
    auto mb = sys::read_file_at(d->get(), n, kEntryCap, lock_path);
    waiter_record r;
    if (!mb || mb->truncated || !parse_waiter(mb->bytes, r) || !alive(r)) continue;
    waiter w;
    w.pid = r.pid;
    w.label = r.label;
    w.host = r.host;
    w.since = r.since;
    // A missing or nonsensical start (0, negative, in the future) reads as
    // no time waited rather than decades.
    w.waited = milliseconds(r.since > 0 && r.since <= now_ms ? now_ms - r.since : 0);
    w.gpu = r.gpu;
    w.gpus = r.gpus;
    out.push_back(std::move(w));
  }
  std::stable_sort(out.begin(), out.end(), [](const waiter& a, const waiter& b) {
    return a.since != b.since ? a.since < b.since : a.pid < b.pid;
  });
  return out;
}

}  // namespace offload_lock::detail

namespace offload_lock {

std::vector<waiter> waiters(const std::string& path) { return detail::read_waiters(path, detail::sys::now_ms()); }

}  // namespace offload_lock
