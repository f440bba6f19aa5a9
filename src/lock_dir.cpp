// The lock directory (lock_dir.hpp): its path and private names, its allowed
// contents, and observing it (doc/protocol.md B1, B4).
#include "lock_dir.hpp"

#include "meta.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"

#include <algorithm>

namespace offload_lock::detail {

namespace {

bool lock_file_name(const std::string& n) { return n == meta_file_name || n.rfind(".meta.json.", 0) == 0; }

// The names in a lock directory; with `foreign`, the first name that is not
// part of a lock goes there (and nothing else is returned), otherwise such a
// name is ENOTEMPTY naming it. A failure to look (EMFILE on a stat, say) is
// that failure, never taken for a foreign file. With `own`, `dir` is the
// caller's own descriptor, listed through itself from its start.
result<std::vector<std::string>> lock_contents(int dir, const std::string& shown, std::string* foreign = nullptr,
                                               bool own = false) {
  auto names = own ? sys::list_dir_again(dir, shown) : sys::list_dir(dir, shown);
  if (!names) return names.error();
  for (const auto& n : *names) {
    auto st = sys::stat_at(dir, n, shown + "/" + n);
    if (!st && st.error().code() == std::errc::no_such_file_or_directory) continue;
    if (!st) return st.error();
    if (!lock_file_name(n) || !st->is_regular) {
      if (foreign) {
        *foreign = n;
        return std::vector<std::string>{};
      }
      return error(sys::errno_code(std::errc::directory_not_empty),
                   "refusing to remove " + shown + ": it holds '" + n + "', which is not part of a lock");
    }
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

std::optional<sys::file_id> parent_identity(const target& t) {
  if (!t.parent_id)
    if (auto st = sys::stat_fd(t.parent.get(), t.path)) t.parent_id = st->id;
  return t.parent_id;
}

std::string stage_prefix(const target& t) { return "." + t.name + ".stage-"; }
std::string aside_prefix(const target& t) { return "." + t.name + ".aside-"; }
std::string next_prefix(const target& t) { return "." + t.name + ".next-"; }
std::string unique_suffix() { return std::to_string(sys::self_pid()) + "-" + sys::random_hex(6); }

std::int64_t private_name_pid(const target& t, const std::string& n) {
  std::string rest;
  for (const auto& prefix : {stage_prefix(t), aside_prefix(t), next_prefix(t)})
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

error remove_lock_dir_at(int dirfd, const std::string& name, const std::string& shown, const char* crash_op,
                         int own) {
  // Out of descriptors or memory (opening the directory, or listing it,
  // which needs one more): what a lock holds, by path through the parent,
  // then an rmdir, which only ever removes an empty directory (anything else
  // in it stays, and so does the directory).
  auto short_of_resources = [](const error& e) {
    const auto c = e.code();
    return c == std::errc::too_many_files_open || c == std::errc::too_many_files_open_in_system ||
           c == std::errc::not_enough_memory;
  };
  auto by_path = [&]() -> error {
    const std::string meta = name + "/" + meta_file_name;
    if (auto e = sys::unlink_at(dirfd, meta, false, shown + "/" + meta_file_name);
        e && e.code() != std::errc::no_such_file_or_directory)
      return e;
    return sys::unlink_at(dirfd, name, true, shown);
  };
  if (own >= 0) {
    // A holder's own lock holds its meta.json and nothing else, unless a
    // hand put something there meanwhile: the file goes, then the
    // directory, and only one that is then not empty is listed (below:
    // what a lock may hold is removed; anything else stays, ENOTEMPTY).
    if (auto e = sys::unlink_at(own, meta_file_name, false, shown + "/" + meta_file_name);
        e && e.code() != std::errc::no_such_file_or_directory)
      return e;
    if (crash_op) sys::crash_point(crash_op, "meta-removed");
    crash_op = nullptr;
    auto e = sys::unlink_at(dirfd, name, true, shown);
    if (!e || e.code() != std::errc::directory_not_empty) return e;
  }
  sys::fd opened;
  if (own < 0) {
    auto d = sys::open_dir(dirfd, name, true, shown);
    if (!d) {
      if (d.error().code() == std::errc::no_such_file_or_directory) return {};
      return short_of_resources(d.error()) ? by_path() : d.error();
    }
    opened = std::move(*d);
  }
  const int dir = own < 0 ? opened.get() : own;
  auto names = lock_contents(dir, shown, nullptr, own >= 0);
  if (!names) {
    if (!short_of_resources(names.error())) return names.error();
    opened.reset();
    return by_path();
  }
  for (const auto& n : *names)
    if (auto e = sys::unlink_at(dir, n, false, shown + "/" + n)) return e;
  if (crash_op) sys::crash_point(crash_op, "meta-removed");
  return sys::unlink_at(dirfd, name, true, shown);
}

namespace {

// A failure to read meta.json that is a fact about the file (absent, a
// symlink or something else planted there: never followed) rather than a
// failure of this reader (EACCES, out of descriptors, EIO): only the latter
// makes the judgment unknown.
bool about_the_file(const error& e) {
  const auto c = e.code();
  return c == std::errc::no_such_file_or_directory || c == std::errc::too_many_symbolic_link_levels ||
         c == std::errc::invalid_argument || c == std::errc::is_a_directory;
}

}  // namespace

void read_state(int dir, const std::string& path, snapshot& s) {
  auto mb = sys::read_file_at(dir, meta_file_name, meta_cap, path + "/" + meta_file_name, true);
  s.meta_exists = static_cast<bool>(mb);
  s.meta = parsed_meta{};
  s.proof_of_life = false;
  s.proof_unknown = false;
  s.listed_empty = false;
  s.foreign_entry.clear();
  if (mb) {
    s.meta_mtime_ms = mb->st.mtime_ms;
    s.proof_of_life = mb->write_lock == sys::lock_probe::locked;
    s.proof_unknown = mb->write_lock == sys::lock_probe::unknown;
    // An oversized meta.json is read as unparseable, as a bound on work.
    if (!mb->truncated) s.meta = parse_meta(mb->bytes);
    return;
  }
  if (!about_the_file(mb.error())) {
    s.look_errno = mb.error().code().value();
    s.look_failed = "reading " + path + "/" + meta_file_name;
    return;
  }
  // No meta.json: what is in the directory tells a claim from anything else.
  sys::crash_point("look.listing");
  auto names = lock_contents(dir, path, &s.foreign_entry);
  if (!names) {
    // Removed since it was opened (a removed directory lists as ENOENT):
    // absent, as when the open finds nothing, and looked at again.
    if (names.error().code() == std::errc::no_such_file_or_directory) {
      s.present = false;
      return;
    }
    s.look_errno = names.error().code().value();
    s.look_failed = "listing " + path;
    return;
  }
  s.listed_empty = s.foreign_entry.empty() && names->empty();
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
  o.snap.first_seen_age_ms = std::max<std::int64_t>(0, sat_sub(sys::now_ms(), st->mtime_ms));
  if (!st->is_dir) return o;
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    // Gone since the stat: report it absent so the caller tries again. Any
    // other failure (EACCES, out of descriptors) leaves the holder unknown.
    if (d.error().code() == std::errc::no_such_file_or_directory) o.snap.present = false;
    else {
      o.snap.look_errno = d.error().code().value();
      o.snap.look_failed = "opening " + t.path;
    }
    return o;
  }
  if (auto fst = sys::stat_fd(d->get(), t.path)) {
    o.snap.id = fst->id;
    o.snap.dir_mtime_ms = fst->mtime_ms;
    o.snap.owner_uid = fst->uid;
    o.snap.dir_mode = fst->mode;
  }
  // The parent's mode matters only to a setgid directory (judge.cpp,
  // not_made_by_mkdir): looked at for those alone.
  if (o.snap.dir_mode & 02000)
    if (auto pst = sys::stat_fd(t.parent.get(), "parent of " + t.path)) o.snap.parent_mode = pst->mode;
  read_state(d->get(), t.path, o.snap);
  o.dir = std::move(*d);
  return o;
}

void watch_clock::update(snapshot& s) {
  const std::int64_t now = sys::monotonic_ms();
  const bool same_dir = have && s.present && s.id == id;
  const bool same = same_dir && s.meta_exists == meta_exists && s.dir_mtime_ms == dir_mtime &&
                    s.meta_mtime_ms == meta_mtime;
  if (!same_dir) first_age = s.first_seen_age_ms;
  if (!same) {
    have = s.present;
    id = s.id;
    meta_exists = s.meta_exists;
    dir_mtime = s.dir_mtime_ms;
    meta_mtime = s.meta_mtime_ms;
    since = now;
  }
  s.unchanged_for_ms = now - since;
  s.first_seen_age_ms = first_age;
}

error not_a_lock_directory(const std::string& path, const snapshot& s) {
  return error(sys::errno_code(std::errc::not_a_directory),
               "lock path " + path + (s.is_symlink ? " is a symbolic link" : " exists and is not a directory") +
                   "; refusing to follow or remove it");
}

}  // namespace offload_lock::detail
