// Waking a program that shows the lock (`offload-lock status --watch`, a
// dashboard) when what it shows may have changed, instead of polling.
#ifndef OFFLOAD_LOCK_WATCH_HPP
#define OFFLOAD_LOCK_WATCH_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"

namespace offload_lock {

namespace detail::sys {
class watcher;
}  // namespace detail::sys

// Watches the lock at `path`: the lock and its GPU slots appearing, going or
// being replaced (entries of its parent directory), waiters registering or
// leaving (its waiter registry), and the exit of the processes it is told
// of. inotify and pidfd, the same watcher the library's own waits use; where
// they are missing, arm_* say so and the caller re-checks on a timer.
// Not thread-safe: one owner thread. Move-only.
class OFFLOAD_LOCK_API change_watch {
 public:
  explicit change_watch(std::string path);
  ~change_watch();
  change_watch(change_watch&&) noexcept;
  change_watch& operator=(change_watch&&) noexcept;
  change_watch(const change_watch&) = delete;
  change_watch& operator=(const change_watch&) = delete;

  // Watches the lock's parent directory and its waiter registry (when it
  // exists). Call before each look, so that a change made after the look is
  // never missed. False without notifications. Never blocks; cheap to call
  // every round (a directory already watched keeps its watch).
  bool arm_directories();
  // Watches the exit of exactly these processes (the holders and waiters
  // just seen). `gone`: one has exited already (look again); `unwatched`:
  // no pidfd here, re-check on a timer. Never blocks.
  enum class processes { watched, gone, unwatched };
  processes arm_processes(const std::vector<std::int64_t>& pids);
  // Blocks until something watched changes, `timeout` passes (negative:
  // none; 0: looks once) or one of `extra_fds` becomes readable or hangs up.
  // False when an extra descriptor ended it.
  bool wait(milliseconds timeout, const std::vector<int>& extra_fds = {});

 private:
  std::string path_;
  std::unique_ptr<detail::sys::watcher> w_;
  std::vector<int> pid_ids_;
};

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_WATCH_HPP
