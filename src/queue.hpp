// The ordered queue of one lock: a waiter's place in it, and waiting for its
// turn (served by priority, then arrival) without waking on every release.
#ifndef OFFLOAD_LOCK_SRC_QUEUE_HPP
#define OFFLOAD_LOCK_SRC_QUEUE_HPP

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "judge.hpp"
#include "lock_dir.hpp"
#include "os/watch.hpp"
#include "offload_lock/lock.hpp"
#include "waiters.hpp"

namespace offload_lock::detail {

class wait_report;

// How long a waiter ahead may leave a free lock unclaimed before those
// behind it pass it over (a stopped or hung process).
inline constexpr std::int64_t pass_over_grace_ms = 200;
// How often the head and the next in line re-check a lock they cannot
// watch (no inotify instance left: 128 per user by default), well within
// the grace, so that the queue does not wait a fallback second per handoff.
inline constexpr std::int64_t queue_poll_ms = 25;

// One waiter's place in the queue of the lock at `registry_path` (slot 0's
// path), for slot `slot` (0 for a plain lock). Made when an acquisition
// starts; the entry is written by join() and removed by the destructor.
class queue_place {
 public:
  queue_place(const lock_options& opt, std::string registry_path, int gpu, int gpus, std::int64_t arrived_us,
              std::int64_t arrived_ms);
  bool joined() const { return reg_ != nullptr; }
  // Writes the entry (once). Best effort: a registry that cannot be written
  // leaves this waiter out of the queue, claiming whenever it finds the lock
  // free, as before there was one.
  void join();
  // The live waiters for the same slot that are served before this one
  // (every live one while not joined), nearest last; those passed over left
  // out.
  std::vector<queue_entry> ahead() { return ahead_for(queue_slot(me_.rec)); }
  // The same for slot `slot`, for a wait among several slots: the live
  // waiters served before this one that would take that slot.
  std::vector<queue_entry> ahead_for(int slot);
  // From now on the entries of `pid` are not waited for.
  void pass_over(std::int64_t pid) { passed_.insert(pid); }
  // The passed-over pids that still have a live entry in the queue: what a
  // holder records (meta.json passedOver) so that those behind it do not
  // give them their grace again.
  std::vector<std::int64_t> passed_still_queued();
  registry_reader& reader() { return reader_; }

 private:
  const lock_options& opt_;
  std::string registry_path_;
  int gpu_, gpus_;
  queue_entry me_;
  registry_reader reader_;
  std::unique_ptr<waiter_registration> reg_;
  std::set<std::int64_t> passed_;
};

// The first live waiter, in serving order, that would take slot `slot` and
// has a priority above `priority`: whom a holder that can yield makes way for.
std::optional<yield_request> first_above(registry_reader& r, int slot, int priority);

enum class turn { mine, busy, timed_out, cancelled };

// Waits until no live waiter is ahead of `place` (joining the queue first
// when someone is), or the deadline (monotonic, -1: none), or a cancel
// descriptor. With wait 0 it does not queue: busy while the lock is held;
// a free lock with live waiters ahead is theirs for pass_over_grace_ms, then
// it is this try's turn.
// The next in line watches the lock and passes over a waiter ahead that
// leaves it free for pass_over_grace_ms (and those the holder's meta.json
// says it passed over, at once); everyone else sleeps on the
// entries of the two waiters ahead of it, so a release wakes two processes,
// not the queue. Only a failure to look at the lock is an error.
// `w`: the acquisition's watcher; only this call's own items are added and
// removed.
result<turn> wait_turn(queue_place& place, const target& t, const lock_options& opt, std::int64_t deadline,
                       wait_report* rep, watch_clock& seen, sys::watcher& w);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_QUEUE_HPP
