// The lock directory (lock_dir.hpp): its path and private names, its allowed
// contents, and observing it (PROTOCOL B1, B4).
#include "lock_dir.hpp"

#include "meta.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"

namespace offload_lock::detail {

namespace {

bool lock_file_name(const std::string& n) { return n == meta_file_name || n.rfind(".meta.json.", 0) == 0; }

// The names in a lock directory, or ENOTEMPTY naming the first that is not
// part of a lock.
result<std::vector<std::string>> lock_contents(int dir, const std::string& shown) {
  auto names = sys::list_dir(dir, shown);
  if (!names) return names.error();
  for (const auto& n : *names) {
    auto st = sys::stat_at(dir, n, shown + "/" + n);
    if (!st && st.error().code() == std::errc::no_such_file_or_directory) continue;
    if (!st || !lock_file_name(n) || !st->is_regular)
      return error(sys::errno_code(std::errc::directory_not_empty),
                   "refusing to remove " + shown + ": it holds '" + n + "', which is not part of a lock");
  }
  return names;
}

}  // namespace

result<target> open_target(const std::string& path) {
  if (path.empty()) return error(errc::bad_input, "lock path is empty");
  target t;
  t.path = path;
  std::string parent;
  sys::split_path(path, parent, t.name);
  if (t.name.empty() || t.name == "." || t.name == "..")
    return error(errc::bad_input, "lock path '" + path + "' names no directory");
  // The staging and moved-aside names beside the lock add this much to its
  // name ("." + name + ".stage-" + pid + "-" + 12 hex digits), and a name
  // is at most 255 bytes.
  constexpr std::size_t kMaxName = 255 - 28;
  if (t.name.size() > kMaxName)
    return error(sys::errno_code(std::errc::filename_too_long),
                 "lock path " + path + ": its last component is " + std::to_string(t.name.size()) +
                     " bytes; at most " + std::to_string(kMaxName) + " leave room for the staging names beside it");
  auto p = sys::open_dir(sys::cwd, parent, false, "parent directory " + parent + " of lock " + path);
  if (!p) return p.error();
  t.parent = std::move(*p);
  return t;
}

std::string stage_prefix(const target& t) { return "." + t.name + ".stage-"; }
std::string aside_prefix(const target& t) { return "." + t.name + ".aside-"; }
std::string unique_suffix() { return std::to_string(sys::self_pid()) + "-" + sys::random_hex(6); }

std::int64_t private_name_pid(const target& t, const std::string& n) {
  std::string rest;
  for (const auto& prefix : {stage_prefix(t), aside_prefix(t)})
    if (n.compare(0, prefix.size(), prefix) == 0) rest = n.substr(prefix.size());
  if (rest.empty()) return 0;
  try {
    return std::max<std::int64_t>(0, std::stoll(rest.substr(0, rest.find('-'))));
  } catch (...) {
    return 0;
  }
}

error check_lock_contents(int dir, const std::string& shown) {
  auto names = lock_contents(dir, shown);
  return names ? error{} : names.error();
}

error remove_lock_dir_at(int dirfd, const std::string& name, const std::string& shown, const char* crash_op) {
  auto d = sys::open_dir(dirfd, name, true, shown);
  if (!d) return d.error().code() == std::errc::no_such_file_or_directory ? error{} : d.error();
  auto names = lock_contents(d->get(), shown);
  if (!names) return names.error();
  for (const auto& n : *names)
    if (auto e = sys::unlink_at(d->get(), n, false, shown + "/" + n)) return e;
  if (crash_op) sys::crash_point(crash_op, "meta-removed");
  return sys::unlink_at(dirfd, name, true, shown);
}

void read_state(int dir, const std::string& path, snapshot& s) {
  auto mb = sys::read_file_at(dir, meta_file_name, meta_cap, path + "/" + meta_file_name, true);
  s.meta_exists = static_cast<bool>(mb);
  s.meta = parsed_meta{};
  s.proof_of_life = false;
  if (mb) {
    s.meta_mtime_ms = mb->st.mtime_ms;
    s.proof_of_life = mb->write_locked;
    // An oversized meta.json is read as unparseable, as a bound on work.
    if (!mb->truncated) s.meta = parse_meta(mb->bytes);
  }
}

result<observed> observe(const target& t) {
  observed o;
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st) {
    if (st.error().code() == std::errc::no_such_file_or_directory) return o;
    return st.error();
  }
  o.snap.present = true;
  o.snap.is_dir = st->is_dir;
  o.snap.is_symlink = st->is_symlink;
  o.snap.id = st->id;
  o.snap.dir_mtime_ms = st->mtime_ms;
  o.snap.owner_uid = st->uid;
  o.snap.dir_mode = st->mode;
  if (auto pst = sys::stat_fd(t.parent.get(), "parent of " + t.path)) o.snap.parent_mode = pst->mode;
  if (!st->is_dir) return o;
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    // Gone since the stat: report it absent so the caller tries again. Any
    // other failure leaves the meta unreadable, as it is for every reader.
    if (d.error().code() == std::errc::no_such_file_or_directory) o.snap.present = false;
    return o;
  }
  if (auto fst = sys::stat_fd(d->get(), t.path)) {
    o.snap.id = fst->id;
    o.snap.dir_mtime_ms = fst->mtime_ms;
    o.snap.owner_uid = fst->uid;
    o.snap.dir_mode = fst->mode;
  }
  read_state(d->get(), t.path, o.snap);
  o.dir = std::move(*d);
  return o;
}

void watch_clock::update(snapshot& s) {
  const std::int64_t now = sys::monotonic_ms();
  const bool same = have && s.present && s.id == id && s.meta_exists == meta_exists && s.dir_mtime_ms == dir_mtime &&
                    s.meta_mtime_ms == meta_mtime;
  if (!same) {
    have = s.present;
    id = s.id;
    meta_exists = s.meta_exists;
    dir_mtime = s.dir_mtime_ms;
    meta_mtime = s.meta_mtime_ms;
    since = now;
  }
  s.unchanged_for_ms = now - since;
}

error not_a_lock_directory(const std::string& path, const snapshot& s) {
  return error(sys::errno_code(std::errc::not_a_directory),
               "lock path " + path + (s.is_symlink ? " is a symbolic link" : " exists and is not a directory") +
                   "; refusing to follow or remove it");
}

}  // namespace offload_lock::detail
