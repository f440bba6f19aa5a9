// What `status --watch` waits on. See change_feed.hpp.
#include "posix/change_feed.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

namespace offload_lock::cli::os {

namespace {

// pidfd_open(2); -1 with errno set (ENOSYS where the kernel or libc lacks it,
// or when OFFLOAD_LOCK_NO_PIDFD is set).
long open_pidfd(std::int64_t pid) {
  errno = ENOSYS;
  if (std::getenv("OFFLOAD_LOCK_NO_PIDFD")) return -1;
#ifdef SYS_pidfd_open
  return ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

change_feed::change_feed() {
  if (!std::getenv("OFFLOAD_LOCK_NO_INOTIFY")) ino_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
}

change_feed::~change_feed() {
  for (int f : pidfds_) ::close(f);
  if (ino_ >= 0) ::close(ino_);
}

bool change_feed::arm_dirs(const std::vector<std::string>& dirs) {
  if (ino_ < 0) return false;
  // Adding a watch that exists only refreshes it: no event, same
  // descriptor. Removing one would queue IN_IGNORED and wake the next wait,
  // so watches are never removed here; the kernel drops those of deleted
  // directories by itself.
  for (const auto& d : dirs)
    (void)::inotify_add_watch(ino_, d.c_str(),
                              IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                                  IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW);
  return true;
}

change_feed::pids_armed change_feed::arm_pids(const std::vector<std::int64_t>& pids) {
  for (int f : pidfds_) ::close(f);
  pidfds_.clear();
  pids_armed result = pids_armed::ok;
  for (std::int64_t pid : pids) {
    const long f = open_pidfd(pid);
    if (f >= 0) {
      ::fcntl(static_cast<int>(f), F_SETFD, FD_CLOEXEC);
      pidfds_.push_back(static_cast<int>(f));
    } else if (errno == ESRCH) {
      return pids_armed::gone;
    } else {
      result = pids_armed::unwatched;
    }
  }
  return result;
}

bool change_feed::wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds) {
  std::vector<struct pollfd> fds;
  fds.reserve(extra_fds.size() + 1 + pidfds_.size());
  for (int f : extra_fds) fds.push_back({f, POLLIN, 0});
  if (ino_ >= 0) fds.push_back({ino_, POLLIN, 0});
  for (int f : pidfds_) fds.push_back({f, POLLIN, 0});
  int t = timeout_ms < 0 ? -1 : timeout_ms > 3'600'000 ? 3'600'000 : static_cast<int>(timeout_ms);
  int r;
  do r = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), t);
  while (r < 0 && errno == EINTR);
  for (std::size_t i = 0; i < extra_fds.size(); ++i)
    if (fds[i].revents) return false;
  if (ino_ >= 0) {
    char buf[4096];
    while (::read(ino_, buf, sizeof buf) > 0) {
    }
  }
  return true;
}

}  // namespace offload_lock::cli::os
