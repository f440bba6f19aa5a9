// What `offload-lock doctor` asks of the system: a directory's owner and
// mode, and whether the kernel features the lock relies on work there.
#ifndef OFFLOAD_LOCK_SRC_POSIX_PROBE_HPP
#define OFFLOAD_LOCK_SRC_POSIX_PROBE_HPP

#include <cstdint>
#include <optional>
#include <string>

namespace offload_lock::cli::os {

struct dir_facts {
  std::uint32_t uid = 0, gid = 0;
  unsigned mode = 0;  // permission bits with setuid, setgid, sticky
  bool is_dir = false;
};
// lstat of `path`; nullopt with `error` set when it fails.
std::optional<dir_facts> facts_of(const std::string& path, std::string& error);
// The name of group `gid`; nullopt when unknown.
std::optional<std::string> group_name(std::uint32_t gid);
// Whether this process belongs to group `gid` (primary or supplementary).
bool in_group(std::uint32_t gid);

// Each feature tried for real in directory `dir`, with scratch names of
// its own that it removes again: an empty string when it works, else why.
struct feature_probe {
  bool writable = false;  // the scratch names could be made at all
  std::string inotify, pidfd, rename_noreplace, ofd_locks;
};
feature_probe probe_features(const std::string& dir);

// Whether /proc describes this process's pid namespace.
bool proc_is_own();

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_PROBE_HPP
