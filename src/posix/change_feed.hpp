// What `status --watch` waits on: directory entries and process exits.
// Entries created, removed or renamed in watched directories (inotify), and
// the exit of watched processes (pidfd).
#ifndef OFFLOAD_LOCK_SRC_POSIX_CHANGE_FEED_HPP
#define OFFLOAD_LOCK_SRC_POSIX_CHANGE_FEED_HPP

#include <cstdint>
#include <string>
#include <vector>

namespace offload_lock::cli::os {

// What `status --watch` waits on: entries created, removed or renamed in
// the watched directories, and the exit of the watched processes. Cheap to
// re-arm: directories and processes are replaced at every arm().
class change_feed {
 public:
  change_feed();
  ~change_feed();
  change_feed(const change_feed&) = delete;
  change_feed& operator=(const change_feed&) = delete;
  // Watches these directories too (missing ones are skipped). False
  // without inotify: the caller re-checks on a timer. Arm before looking,
  // so a change made after the look is never missed.
  bool arm_dirs(const std::vector<std::string>& dirs);
  // Watches exactly these processes. `gone` when one has already exited
  // (look again), `unwatched` without pidfd.
  enum class pids_armed { ok, gone, unwatched };
  pids_armed arm_pids(const std::vector<std::int64_t>& pids);
  // Waits for a change, the timeout (negative: none) or a readable extra
  // descriptor. False when an extra descriptor woke it.
  bool wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds);

 private:
  int ino_ = -1;
  std::vector<int> pidfds_;
};

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_CHANGE_FEED_HPP
