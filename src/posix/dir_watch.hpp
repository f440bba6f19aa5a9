// Waking a view when a directory's files change: entries made, removed or
// renamed, and files written in place (appends, which the library's own
// watcher does not report). For `top` and `serve`, on the lock's history.
#ifndef OFFLOAD_LOCK_SRC_POSIX_DIR_WATCH_HPP
#define OFFLOAD_LOCK_SRC_POSIX_DIR_WATCH_HPP

#include <string>

namespace offload_lock::cli::os {

class dir_watch {
 public:
  dir_watch();
  ~dir_watch();
  dir_watch(const dir_watch&) = delete;
  dir_watch& operator=(const dir_watch&) = delete;
  // Watches the directory at `path` (not following a symlink), in place of
  // any earlier one; false when it cannot be watched (missing, no inotify).
  bool watch(const std::string& path);
  bool watching() const { return wd_ >= 0; }
  // Readable when something happened; -1 without inotify.
  int fd() const { return fd_; }
  // Takes the events that are there: whether there were any, and whether
  // one said the directory itself went away (watch it again once it is
  // back). Never blocks.
  struct events {
    bool any = false, gone = false;
  };
  events drain();

 private:
  int fd_ = -1, wd_ = -1;
};

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_DIR_WATCH_HPP
