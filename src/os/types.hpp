// The value types the core and the seam exchange: file identity and status,
// a process's liveness and start. Plain data; no operating-system header.
#ifndef OFFLOAD_LOCK_SRC_OS_TYPES_HPP
#define OFFLOAD_LOCK_SRC_OS_TYPES_HPP

#include <cstdint>

namespace offload_lock::detail::sys {

struct file_id {
  std::uint64_t dev = 0, ino = 0;
  bool operator==(const file_id& o) const { return dev == o.dev && ino == o.ino; }
  bool operator!=(const file_id& o) const { return !(*this == o); }
};

struct stat_info {
  file_id id;
  bool is_dir = false;
  bool is_regular = false;
  bool is_symlink = false;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::uint32_t mode = 0;  // permission bits with setuid, setgid and sticky (07777)
  std::int64_t mtime_ms = 0;
  // The inode's last status change, set by the kernel alone (no call lets a
  // user choose it): the queue's arrival order (registry.hpp).
  std::int64_t ctime_ns = 0;
  std::int64_t size = 0;
  std::uint64_t nlink = 0;
};

// What the kernel says of a pid. `unknown`: the question could not be asked
// (kill failed with neither ESRCH nor EPERM), which is never evidence of death.
enum class liveness { alive, dead, zombie, invalid, unknown };

// A process's start: clock ticks since boot (field 22 of /proc/<pid>/stat)
// and the same moment as epoch milliseconds by today's wall clock.
struct proc_start {
  std::uint64_t ticks = 0;
  std::int64_t epoch_ms = 0;
};

// The kernel's pid_t is 32 bits: a pid outside 1..2^31-1 names no process.
inline constexpr std::int64_t max_pid = 2147483647;
inline bool valid_pid(std::int64_t pid) { return pid > 0 && pid <= max_pid; }

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_TYPES_HPP
