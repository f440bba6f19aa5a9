// Waking a view when a directory's files change. See dir_watch.hpp.
#include "posix/dir_watch.hpp"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>

namespace offload_lock::cli::os {

dir_watch::dir_watch() : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {}

dir_watch::~dir_watch() {
  if (fd_ >= 0) ::close(fd_);
}

bool dir_watch::watch(const std::string& path) {
  if (fd_ < 0) return false;
  if (wd_ >= 0) ::inotify_rm_watch(fd_, wd_);
  wd_ = ::inotify_add_watch(fd_, path.c_str(),
                            IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW);
  return wd_ >= 0;
}

dir_watch::events dir_watch::drain() {
  events out;
  if (fd_ < 0) return out;
  alignas(struct inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    out.any = true;
    for (ssize_t at = 0; at < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + at);
      if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_Q_OVERFLOW)) out.gone = true;
      at += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
    }
  }
  if (out.gone && wd_ >= 0) {
    ::inotify_rm_watch(fd_, wd_);
    wd_ = -1;
  }
  return out;
}

}  // namespace offload_lock::cli::os
