// What a live view (`top`, `serve`) shows, kept up to date by events: the
// board (holders and queue, and the gpulease lease where a root exists)
// and the recent entries of the history. It sleeps in the kernel on the
// lock's parent and registry (change_watch), on pidfds of the holders,
// waiters and the lease's holder, on the lease directory and on the history
// directory (appends included); timers only where the board can change by
// time alone (a TTL or grace running out, a lease whose heartbeat and
// window run out) or a watch is missing.
#ifndef OFFLOAD_LOCK_SRC_CLI_FEED_HPP
#define OFFLOAD_LOCK_SRC_CLI_FEED_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/board.hpp"
#include "cli/history_summary.hpp"
#include "cli/lease_watch.hpp"
#include "offload_lock/watch.hpp"
#include "posix/dir_watch.hpp"

namespace offload_lock::cli {

class live_feed {
 public:
  // `recent`: how many of the history's last entries to keep.
  live_feed(const args& a, const gpu_plan& gpus, std::string path, std::size_t recent);

  // Looks at the lock again (and at the history when it changed or may
  // have), then arms the watches for what it saw. Never blocks, except
  // that every 5 s it asks nvidia-smi (bounded by its 5 s limit) for the
  // GPUs' usage.
  void refresh();
  const board& now() const { return board_; }
  // When the board was looked at (steady clock), to move its times on.
  std::chrono::steady_clock::time_point looked_at() const { return looked_at_; }
  const std::vector<history_entry>& recent() const { return recent_; }
  // What nvidia-smi said of the GPUs at the last look that asked it.
  const std::optional<std::vector<gpu_device>>& usage() const { return usage_; }
  bool history_kept() const { return history_kept_; }
  // Bumped each time the history's files changed (a view that sums the
  // whole history reads it again then).
  std::uint64_t history_generation() const { return history_generation_; }
  // The shape of what is shown (holders, queue, recent entries) without
  // the times: a view redraws or sends only when it differs.
  std::string shape() const;

  // Blocks until what is shown may have changed (true: call refresh()) or
  // one of `extra_fds` became readable (false). A change of the history
  // alone is taken here and needs no refresh of the board.
  bool wait(const std::vector<int>& extra_fds);

 private:
  void read_history();
  const args& a_;
  const gpu_plan& gpus_;
  std::string path_;
  std::size_t recent_n_;
  change_watch watch_;
  os::dir_watch history_watch_;
  lease_watch lease_watch_;
  board board_;
  std::chrono::steady_clock::time_point looked_at_{};
  std::optional<std::vector<gpu_device>> usage_;
  std::optional<std::chrono::steady_clock::time_point> asked_;
  std::vector<history_entry> recent_;
  bool history_kept_ = false, history_dirty_ = true, dirs_watched_ = false, pids_watched_ = false, again_ = false;
  std::uint64_t history_generation_ = 0;
};

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_FEED_HPP
