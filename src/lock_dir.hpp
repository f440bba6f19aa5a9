// The lock directory as every step sees it (doc/protocol.md B1, B4): the lock path
// opened through its parent, the private names beside it (staging and
// moved-aside directories), what a lock directory may contain, and one look
// at what is at the path now.
#ifndef OFFLOAD_LOCK_SRC_LOCK_DIR_HPP
#define OFFLOAD_LOCK_SRC_LOCK_DIR_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "judge.hpp"
#include "offload_lock/error.hpp"
#include "os/files.hpp"

namespace offload_lock::detail {

// The lock path, split, with its parent directory open.
struct target {
  std::string path, name;
  sys::fd parent;
  // The parent's identity, once parent_identity() has asked.
  mutable std::optional<sys::file_id> parent_id;
};

// The identity of t's parent directory (one fstat, then remembered): what
// tells the same lock apart from one whose directory was made again.
// Nothing when it cannot be looked at.
std::optional<sys::file_id> parent_identity(const target& t);

// Opens the parent of `path`. bad_input for a path that names no directory;
// ENAMETOOLONG when the staging names beside it would not fit; the parent's
// open error (ENOENT, EACCES, ...) naming it.
result<target> open_target(const std::string& path);

// ".<name>.stage-", ".<name>.aside-" and ".<name>.next-": the prefixes of
// the private names beside the lock, each followed by "<pid>-<12 hex
// digits>" (unique_suffix): a claim being built, a directory being removed,
// and a waiter's staged lock for the handoff (handoff.hpp), whose suffix is
// its queue entry's.
std::string stage_prefix(const target& t);
std::string aside_prefix(const target& t);
std::string next_prefix(const target& t);
std::string unique_suffix();
// The pid in a private name of `t`, 0 when `n` is not one.
std::int64_t private_name_pid(const target& t, const std::string& n);

// Whether a directory holds only what a lock directory holds: regular files
// named meta.json or .meta.json.* (the temporary of the mkdir fallback).
// Anything else is ENOTEMPTY naming the first such entry: a directory holding
// other files is not a lock, and offload-lock never deletes it.
error check_lock_contents(int dir, const std::string& shown);
// Removes the lock directory dirfd/name: checks its contents as above before
// removing anything, then unlinks those files and the directory. Never
// follows a symlink and never descends. Missing is not an error. With
// crash_op, crash_point(crash_op, "meta-removed") runs between the files and
// the directory. With `own`, the directory is this holder's own, open as
// `own`, and its meta.json is the file the holder has just seen to be its
// own: that goes first, then the directory, and only one that is not empty
// then is listed (through `own`, from its start) as above.
error remove_lock_dir_at(int dirfd, const std::string& name, const std::string& shown,
                         const char* crash_op = nullptr, int own = -1);

// Reads meta.json and the holder's OFD lock through an open lock directory;
// without meta.json, lists what the directory holds. A failure of this
// reader (EACCES, EMFILE, EIO ...) is snapshot::look_errno: unknown.
void read_state(int dir, const std::string& path, snapshot& s);

struct observed {
  snapshot snap;
  sys::fd dir;  // the directory judged, when it could be opened
};
// What is at the path now. Only a failure to stat the path at all is an
// error; any later failure is snapshot::look_errno.
result<observed> observe(const target& t);

// How long one waiter has seen the lock unchanged, by its own monotonic
// clock (snapshot::unchanged_for_ms): same directory, same mtimes.
// It also remembers how old the directory was when first seen
// (snapshot::first_seen_age_ms).
struct watch_clock {
  bool have = false;
  sys::file_id id;
  bool meta_exists = false;
  std::int64_t dir_mtime = 0, meta_mtime = 0, since = 0;
  std::int64_t first_age = -1;
  void update(snapshot& s);
};

// A file, a symlink (to anything, or dangling) or any other non-directory
// at the lock path: never followed, never removed. ENOTDIR naming the path.
error not_a_lock_directory(const std::string& path, const snapshot& s);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_LOCK_DIR_HPP
