// Waiting for a held lock (doc/protocol.md B9): arming the watcher on a
// lock and its holder, sleeping until the judged state may change, the churn
// guard, and what a waiting acquisition reports (on_wait, on_progress).
#ifndef OFFLOAD_LOCK_SRC_WAIT_HPP
#define OFFLOAD_LOCK_SRC_WAIT_HPP

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "judge.hpp"
#include "lock_dir.hpp"
#include "offload_lock/lock.hpp"
#include "os/clock.hpp"
#include "os/watch.hpp"
#include "plan.hpp"
#include "timing.hpp"

namespace offload_lock::detail {

// The deadline of a wait of `wait` (wait_forever: none; 0 or less: a try).
deadline deadline_for(milliseconds wait);

// Rounds of try/reclaim that end without a wait mean another participant
// changed the lock meanwhile. Should that go on and on, pause between rounds
// rather than spin.
class churn_guard {
 public:
  void round_without_wait();  // pauses 10 ms after every 100 in a row
  void waited() { rounds_ = 0; }

 private:
  int rounds_ = 0;
};

// One lock as a waiter watches it on a (possibly shared) watcher: its
// directory and its holder's exit.
struct armed_lock {
  int dir_id = -1, pid_id = -1;
  std::int64_t pid = 0;
  // The directory dir_id watches, and whether its contents too: watched
  // again only when the look finds another directory or the watch fired
  // (its events since the watch was made are queued, so nothing is missed
  // by keeping a watch that has not fired).
  sys::file_id dir_watched;
  bool contents_watched = false;
  // Holders seen to exit that still looked like the holder: re-checked at
  // the fallback period rather than watched again.
  std::set<std::int64_t> dead_seen;

  // Arms `w` to wake when the judged state may change: the directory removed
  // or moved, a file written or closed inside it (verdict::watch_contents),
  // the holder's death.
  // Returns how long a wait may last before a re-check is due (the verdict's
  // own expiry, or `poll_ms` where something cannot be watched), or nullopt
  // when the state has changed already.
  std::optional<std::int64_t> arm(sys::watcher& w, const target& t, const snapshot& s, const verdict& v,
                                  std::int64_t poll_ms);
  // After a wait on `w`: notes a holder seen to exit, and a directory
  // watched that may have left the lock path.
  void woken(const std::vector<int>& fired, const sys::watcher& w);
  // Drops this lock's watches from `w`.
  void disarm(sys::watcher& w);
};

class wait_report;

// One lock and the watcher for it, made at the first wait.
class lock_watch {
 public:
  // Sleeps until the judged state of the lock may have changed (see
  // armed_lock::arm) or the deadline (monotonic, -1: none). Never a busy
  // loop: every way out is an event or a timer of at least the fallback
  // period, except expiries the verdict itself named. False when one of
  // cancel_fds woke it.
  bool wait_for_change(const target& t, const snapshot& s, const verdict& v, const deadline& until,
                       std::int64_t poll_ms);
 private:
  std::unique_ptr<sys::watcher> w_;
  armed_lock armed_;
};

// What one acquisition reports while it waits for another process: the
// holders it waits for and its place in the queue, through on_wait and
// on_progress. (Its entry in the registry is its queue_place's.)
class wait_report {
 public:
  explicit wait_report(const reporting& r);
  // Before each wait, with the holders as just judged, and this waiter's
  // place in the queue (1: next; 0: unknown).
  void waiting(std::vector<info> now, int position = 0);
  // Waits with `wait_fn(timeout)` for at most `timeout` (negative: no limit),
  // reporting progress at each tick on the way.
  template <typename F>
  sys::watcher::wake wait_ticking(std::int64_t timeout, F wait_fn);

 private:
  void report(bool changed);
  std::int64_t tick_in() const;
  void tick();

  const reporting& opt_;
  std::int64_t began_mono_;
  std::vector<info> holders_;
  std::vector<std::string> keys_;
  int position_ = 0;
  std::int64_t seen_mono_ = 0, next_tick_ = -1;
};

template <typename F>
sys::watcher::wake wait_report::wait_ticking(std::int64_t timeout, F wait_fn) {
  const std::int64_t end = timeout < 0 ? -1 : sys::monotonic_ms() + timeout;
  for (;;) {
    std::int64_t t = end < 0 ? -1 : std::max<std::int64_t>(0, end - sys::monotonic_ms());
    const std::int64_t due = tick_in();
    const bool ticking = due >= 0 && (t < 0 || due < t);
    if (ticking) t = due;
    auto why = wait_fn(t);
    if (why != sys::watcher::wake::timeout || !ticking) return why;
    tick();
  }
}

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_WAIT_HPP
