// The one watcher: sleeps until something that may change a lock's state
// happens — a lock directory removed or moved, a file written inside it, an
// entry made or removed in a directory, a process's exit — or a timeout.
// inotify and pidfd where the kernel offers them; where it does not (or the
// test switches of test_hooks.hpp say so) the item is not watched and the
// caller's own timer does the work. Used by waiting (acquire, wait_free),
// loss detection (the heartbeat thread, hold) and `status --watch`.
// Not thread-safe: one owner thread per watcher.
#ifndef OFFLOAD_LOCK_SRC_OS_WATCH_HPP
#define OFFLOAD_LOCK_SRC_OS_WATCH_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "os/files.hpp"

namespace offload_lock::detail::sys {

class watcher {
 public:
  // Takes an inotify instance from a process-wide pool at its first inotify
  // watch (none before): closing one that had watches makes the kernel wait
  // for a grace period (about 12 ms measured here), which every acquisition
  // would otherwise pay.
  watcher();
  ~watcher();  // removes its watches and gives the instance back
  watcher(const watcher&) = delete;
  watcher& operator=(const watcher&) = delete;

  bool has_pidfd() const { return pidfd_ok_; }

  // Each watch_* returns an id for unwatch() and for the ids wait() reports,
  // or -1 when the item cannot be watched.
  //
  // A lock directory: its removal or move, seen both on the directory and as
  // its name leaving the parent (the kernel holds back IN_DELETE_SELF while
  // any process keeps the directory open); with `contents`, every file
  // written, made or removed inside it too. Events for other names in the
  // parent are read and ignored.
  int watch_lock(const std::string& path, bool contents);
  // Any entry made, removed, renamed or written in the directory `path`, and
  // the directory's own removal.
  int watch_entries(const std::string& path);
  // One file: its removal, move, or a close after writing (its owner left or
  // died), never following a symlink. Readers' closes do not count.
  int watch_file(const std::string& path);
  // The exit of process `pid`. -1 without pidfd, or when the process is gone
  // already (ESRCH): has_pidfd() tells the two apart.
  int watch_pid(std::int64_t pid);
  // A descriptor of the caller's (a wake channel) becoming readable; the
  // caller keeps it open while it is watched, and drains it.
  int watch_readable(int f);
  void unwatch(int id);  // -1 is ignored
  void unwatch_all();

  enum class wake { timeout, event, extra_fd };
  // Waits at most timeout_ms (negative: no limit; 0: looks once) for an
  // event on a watched item, or for one of `extra_fds` to become readable or
  // hang up. With `fired`, the ids of the items that had events.
  wake wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds = {}, std::vector<int>* fired = nullptr);
  // After a wait: whether the watch_lock() item `id` fired because the
  // directory it watches may have left its path (removed, moved, renamed
  // over, or events lost): its watch then no longer follows the lock path.
  // An item that fired for its contents alone still does.
  bool left_path(int id) const;

 private:
  struct item {
    int id = -1;
    enum kind_t { lock_dir, entries, file, pid, readable } kind = lock_dir;
    int wd = -1, parent_wd = -1;  // inotify watches (parent_wd: lock_dir only)
    std::string name;             // the lock's name in its parent
    int pidfd = -1;               // pid: the pidfd (owned); readable: the caller's descriptor
    bool owned = true;
  };
  bool ensure_inotify();
  int add_inotify(const std::string& path, std::uint32_t mask);
  void drop_wd(int wd);
  bool read_events(std::vector<int>& fired);
  std::vector<int> left_;  // left_path() as of the last wait
  int ino_ = -1;
  bool ino_tried_ = false;
  // The fork generation (os/process.hpp) in which ino_ was taken: a watcher
  // dropped in a forked child of that process shares the instance with it.
  std::int64_t ino_generation_ = 0;
  int next_id_ = 0;
  bool pidfd_ok_ = true;
  std::vector<item> items_;
};

// A pidfd of process `pid` (close-on-exec), readable once it exits; an
// invalid fd without pidfd or when the process is gone already. For a wait
// that also waits on something else (an etcd watch's cancel descriptors).
fd open_pid(std::int64_t pid);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_WATCH_HPP
