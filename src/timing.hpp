// The protocol's timings in one place, each with why it has its value, and
// the deadline of a wait.
#ifndef OFFLOAD_LOCK_SRC_TIMING_HPP
#define OFFLOAD_LOCK_SRC_TIMING_HPP

#include <algorithm>
#include <cstdint>

#include "os/clock.hpp"

namespace offload_lock::detail {

// With working notifications a waiter still re-checks this rarely, in case
// the lock lives on a file system whose remote changes send no events.
inline constexpr std::int64_t safety_recheck_ms = 60'000;
// Without notifications (or without pidfd for a live holder) it re-checks
// this often, like the Node runners.
inline constexpr std::int64_t fallback_poll_ms = 1'000;
// How often a waiter that must watch the lock (the first ones in line)
// re-checks it when it cannot watch it (no inotify instance left: 128 per
// user by default), well within the pass-over grace, so that the queue does
// not wait a fallback second per handoff.
inline constexpr std::int64_t queue_poll_ms = 25;
// How long to wait for another process that is reclaiming the same stale lock.
inline constexpr std::int64_t contended_recheck_ms = 50;
// How long a reclaimer waits for another's flock on the same stale
// directory before it goes ahead without it. A reclaim holds it for a few
// system calls; a flock held longer is not a reclaimer's (another user's
// descriptor, say) and must not keep a dead lock alive.
inline constexpr std::int64_t contended_giveup_ms = 1'000;
// How long a waiter ahead may leave a free lock unclaimed before those
// behind it pass it over (a stopped or hung process). For the waiters of
// other users ahead, this is the whole budget of one free period, however
// their entries churn (queue.hpp).
inline constexpr std::int64_t pass_over_grace_ms = 200;
// A look that failed (unknown) is repeated after this long, doubling up to
// the fallback period: the failure (out of descriptors, say) may pass.
inline constexpr std::int64_t unknown_retry_ms = 20;

// The monotonic deadline of one wait. `forever` never expires; a wait of 0
// or less is a single try.
class deadline {
 public:
  static deadline forever() { return deadline(-1, false); }
  static deadline in_ms(std::int64_t ms) {
    return ms <= 0 ? deadline(sys::monotonic_ms(), true) : deadline(sys::monotonic_ms() + ms, false);
  }
  // A single try: never waits.
  bool trying() const { return trying_; }
  bool is_forever() const { return at_ < 0; }
  bool expired() const { return at_ >= 0 && sys::monotonic_ms() >= at_; }
  // Milliseconds left; -1 for forever.
  std::int64_t left() const { return at_ < 0 ? -1 : std::max<std::int64_t>(0, at_ - sys::monotonic_ms()); }
  // A timeout of `ms` (-1: none) no longer than what is left.
  std::int64_t clamp(std::int64_t ms) const {
    const std::int64_t l = left();
    if (l < 0) return ms;
    return ms < 0 ? l : std::min(ms, l);
  }

 private:
  deadline(std::int64_t at, bool trying) : at_(at), trying_(trying) {}
  std::int64_t at_;
  bool trying_;
};

// The shorter of two timeouts, -1 meaning none.
inline std::int64_t sooner(std::int64_t a, std::int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return std::min(a, b);
}

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_TIMING_HPP
