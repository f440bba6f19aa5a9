// What the seam's files share: the EINTR retry, struct stat turned into
// stat_info, and the one poll toward a deadline that every wait uses.
#ifndef OFFLOAD_LOCK_SRC_POSIX_COMMON_HPP
#define OFFLOAD_LOCK_SRC_POSIX_COMMON_HPP

#include <poll.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <vector>

#include "os/types.hpp"

namespace offload_lock::detail::sys {

// Calls f() again while it fails with EINTR.
template <class F>
auto retry(F f) {
  for (;;) {
    auto r = f();
    if (r != -1 || errno != EINTR) return r;
  }
}

inline std::int64_t ts_ms(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

inline stat_info from_stat(const struct stat& s) {
  stat_info i;
  i.id = {static_cast<std::uint64_t>(s.st_dev), static_cast<std::uint64_t>(s.st_ino)};
  i.is_dir = S_ISDIR(s.st_mode);
  i.is_regular = S_ISREG(s.st_mode);
  i.is_symlink = S_ISLNK(s.st_mode);
  i.uid = s.st_uid;
  i.gid = s.st_gid;
  i.mode = s.st_mode & 07777;
  i.mtime_ms = ts_ms(s.st_mtim);
  i.ctime_ns = static_cast<std::int64_t>(s.st_ctim.tv_sec) * 1'000'000'000 + s.st_ctim.tv_nsec;
  i.size = s.st_size;
  i.nlink = static_cast<std::uint64_t>(s.st_nlink);
  return i;
}

// The monotonic deadline `timeout_ms` from now.
std::int64_t deadline_in(std::int64_t timeout_ms);

// One poll() toward a deadline (monotonic ms, -1 for none). Returns the
// number of ready descriptors; 0 once the deadline has passed (the first
// call polls even then, so a timeout of 0 looks once); -1 to poll again
// (EINTR, woken before the deadline with nothing ready, or poll itself
// failing, after a 10 ms pause so that no caller spins).
int poll_toward(std::vector<struct pollfd>& fds, std::int64_t deadline, bool first);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_POSIX_COMMON_HPP
