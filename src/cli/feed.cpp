// What a live view shows, kept up to date by events. See feed.hpp.
#include "cli/feed.hpp"

#include <algorithm>

#include "cli/history.hpp"

namespace offload_lock::cli {

namespace {

constexpr auto kGpuUsageEvery = std::chrono::seconds(5);
// The recent entries are in the last part of each author's file.
constexpr std::size_t kTailBytes = std::size_t{256} * 1024;
// Where nothing can be watched, or only time changes a lock.
constexpr std::int64_t kFallbackMs = 1000;
constexpr std::int64_t kSafetyMs = 60'000;

}  // namespace

live_feed::live_feed(const args& a, const gpu_plan& gpus, std::string path, std::size_t recent)
    : a_(a), gpus_(gpus), path_(std::move(path)), recent_n_(recent), watch_(path_) {}

void live_feed::read_history() {
  const summary s = summarize(path_, 0, grouping::none, recent_n_, {}, now_epoch_ms(), kTailBytes);
  recent_ = s.recent;
  history_kept_ = s.read.kept;
  history_dirty_ = false;
}

void live_feed::refresh() {
  // Armed before the look, so that a change made after it is not missed.
  dirs_watched_ = watch_.arm_directories();
  // The history directory appears in the lock's parent (watched above).
  if (!history_watch_.watching() && history_watch_.watch(history_dir(path_))) history_dirty_ = true;
  const auto now = std::chrono::steady_clock::now();
  if (!asked_ || now - *asked_ >= kGpuUsageEvery) {
    usage_ = gpu_usage();
    asked_ = now;
  }
  lease_watch_.arm(find_lease());  // the gpulease lease's directory, where a root exists
  board_ = look(a_, gpus_, path_, usage_);
  looked_at_ = std::chrono::steady_clock::now();
  if (history_dirty_ || (!history_kept_ && history_watch_.watching())) {
    read_history();
    ++history_generation_;
  }
  std::vector<std::int64_t> pids;
  for (const auto& i : board_.slots)
    if (i.held && i.pid) pids.push_back(*i.pid);
  for (const auto& w : board_.waiters) pids.push_back(w.pid);
  if (const auto p = lease_watch::holder_pid(board_.gpulease)) pids.push_back(p);
  const auto armed = watch_.arm_processes(pids);
  pids_watched_ = armed == change_watch::processes::watched;
  // One of them exited between the look and the watch: look again at once.
  again_ = armed == change_watch::processes::gone;
}

std::string live_feed::shape() const {
  std::string s = shape_of(board_) + board_.problem + "|";
  for (const auto& e : recent_) s += std::to_string(e.at) + e.event + e.outcome + std::to_string(e.pid) + ";";
  return s + (history_kept_ ? "k" : "-");
}

bool live_feed::wait(const std::vector<int>& extra_fds) {
  if (again_) {
    again_ = false;
    return true;
  }
  std::int64_t timeout = kSafetyMs;
  if (!dirs_watched_ || !pids_watched_) timeout = kFallbackMs;
  for (const auto& i : board_.slots) {
    // A held lock turns stale at the TTL; a present, not-held one may be
    // an incomplete lock inside its grace.
    if (i.held) timeout = std::min<std::int64_t>(timeout, std::max<std::int64_t>(1, a_.ttl.count() - i.age.count()));
    else if (i.present) timeout = std::min<std::int64_t>(timeout, kFallbackMs);
  }
  if (const auto l = lease_watch_.timeout_ms(board_.gpulease); l >= 0) timeout = std::min(timeout, l);
  std::vector<int> fds = extra_fds;
  if (history_watch_.fd() >= 0) fds.push_back(history_watch_.fd());
  if (lease_watch_.fd() >= 0) fds.push_back(lease_watch_.fd());
  bool changed = watch_.wait(milliseconds(timeout), fds);
  if (lease_watch_.drain()) changed = true;
  const auto ev = history_watch_.drain();
  if (ev.any || ev.gone) {
    read_history();
    ++history_generation_;
  }
  return changed;
}

}  // namespace offload_lock::cli
