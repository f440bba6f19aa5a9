// One held lock and its heartbeat (doc/protocol.md B7): checking that the lock is
// still ours, refreshing meta.json's mtime well inside the TTL, noticing at
// once when someone else removes or replaces it, and the one process-wide
// thread that does this for every lock the process holds.
#ifndef OFFLOAD_LOCK_SRC_HEARTBEAT_HPP
#define OFFLOAD_LOCK_SRC_HEARTBEAT_HPP

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpulease/hold.hpp"
#include "lock_dir.hpp"
#include "offload_lock/error.hpp"
#include "offload_lock/inspect.hpp"
#include "registry.hpp"

namespace offload_lock::detail {

// The state of one held acquisition of the lock directory.
struct held_state {
  target t;
  sys::fd dir;   // the lock directory
  // Its meta.json, holding the OFD write lock: proof of life. Under
  // meta_mu: the heartbeat thread may be looking at it (check_ours) while
  // the owner's release closes it.
  sys::fd meta_fd;
  mutable std::optional<sys::file_id> meta_id;  // meta_fd's file, once known (under meta_mu)
  mutable std::mutex meta_mu;
  sys::file_id id;
  std::int64_t owner_pid = 0;  // the process that took it: a forked child's copy does nothing
  std::string token, meta;
  std::int64_t pid = 0;
  std::int64_t ttl = 0;
  std::function<void(const error&)> on_lost;
  bool released = false;
  // The queue this lock is handed on through at release (handoff.hpp): slot
  // `slot` of the lock whose registry is beside `base`, skipping those
  // this holder passed over.
  std::string base;
  std::set<std::string> passed;
  // This user's directory in that registry, when this holder waited in it:
  // tidied (removed if empty, with the registry) once the lock is released.
  std::string queue_dir;
  // What the acquisition left to close once the lock is handed on (its
  // queue entry's descriptors, the names removed): release() drops it last.
  std::shared_ptr<void> left_behind;
  // The acquisition that waited for the lock (its watches, the registry's
  // directories it held open), let go off the way to holding: by the
  // heartbeat thread at its next pass, or by release() after the handoff,
  // whichever comes first (drop_later()).
  std::shared_ptr<void> waited_with;

  // Cooperative yield (lock_options::on_yield_request): asked once, when a
  // live waiter of a higher priority than `priority` that may ask it
  // (queue.hpp first_above) queues for slot `slot`.
  std::function<void(const yield_request&)> on_yield;
  // The maximum hold (lock_options::max_hold): passed once the heartbeat
  // thread (or max_hold_over) sees taken_at + max_hold_ms go by.
  std::int64_t max_hold_ms = 0;
  std::int64_t taken_at = 0;  // monotonic ms, when this process took it (and its lease, when one follows)
  // The lock is held and its gpulease lease not yet (lease_join.hpp): the
  // GPU is not this holder's yet, so the heartbeat asks nothing of it (no
  // yield, no maximum hold, no idle rule) until take_lease() sets taken_at
  // anew and clears this (release order: taken_at is read only after).
  std::atomic<bool> lease_pending{false};
  int priority = 0;
  int slot = 0;
  std::atomic<bool> yield_asked{false};
  std::atomic<bool> max_hold_reached{false};
  // Whether the maximum hold has passed, by the clock (a lock without a
  // heartbeat has no thread to notice it).
  bool max_hold_over() const;
  std::unique_ptr<registry_reader> yield_reader;  // the heartbeat thread's
  // The site policy's idle rule (idle.hpp): watched by the idle thread
  // while `held_on` is set; idle_yield_due asks the heartbeat thread to ask
  // the holder to yield (the callback stays on that thread).
  std::int64_t idle_after_ms = 0;
  int idle_percent = 0;
  bool idle_yield = false;
  std::atomic<bool> held_on{true};
  std::atomic<bool> idle_yield_due{false};

  // The gpulease lease held with the lock (lease_join.hpp), or none; set
  // once the lock is held, while the heartbeat may already run.
  std::mutex lease_mu;
  std::unique_ptr<gpulease::lease_hold> lease;
  // The lock directory is the lease directory too (shared_dir.hpp): the
  // lease's claim is the lock's meta.json, released as one.
  bool shared = false;
  // The lease's epoch and the GPU_LEASE_* of a process started under it
  // (0 and none without a lease).
  std::uint64_t lease_epoch();
  std::string lease_claim_path();
  // The lease's directory (empty without a lease), and whether the claim
  // there is provably another's or gone now (a failed read is not).
  std::string lease_dir();
  bool lease_lost();
  std::vector<std::pair<std::string, std::string>> lease_environment();
  // Releases the lease (first, at the lock's release): lost when it was
  // not ours any more.
  error release_lease();
  // The lease goes with the lock to whoever keeps it: left in place here
  // (detach), or renewed and released from this forked keeper (adopt).
  void abandon_lease();
  void adopt_lease();

  // Kept by the heartbeat service (under its mutex).
  bool registered = false;
  int watch_id = -1;
  bool watch_tried = false;
  int yield_watch_id = -1;        // the registry (or, while it is missing, its parent)
  std::vector<int> yield_dir_ids;  // the users' directories in the registry
  bool yield_on_registry = false;  // yield_watch_id watches the registry itself
  int lease_watch_id = -1;         // the lease's directory, once the lease is held
  bool lease_watch_tried = false;
  std::int64_t held_since = 0;  // monotonic ms, when the service took it
  std::int64_t next_touch = 0;

  held_state() = default;
  held_state(const held_state&) = delete;
  held_state& operator=(const held_state&) = delete;
  // Its proof of life leaves the fork guard with it (os/files.hpp).
  ~held_state();

  // The refresh period: TTL/4, between 100 ms and 60 s.
  std::int64_t period() const;
  // Same directory at the path, with our token in its meta.json, and this
  // the process that took it: yes, no, or unknown when a look failed for
  // another reason than the name being gone (out of descriptors, EIO). A
  // failed look is no evidence of loss: the OFD lock still proves the
  // holder alive to everyone else, and the caller looks again.
  // `why` gets the failed look's error when unknown.
  enum class ownership { ours, not_ours, unknown };
  ownership check_ours(error* why = nullptr) const;
  // check_ours(), unknown counted as ours.
  bool still_ours() const { return check_ours() != ownership::not_ours; }
  // This is the process that took the lock (not a forked child of it).
  bool in_owner() const;
  // Refreshes meta.json's mtime (errors ignored: the next refresh retries,
  // and the OFD lock and the pid rule keep the lock held meanwhile), and
  // renews the lease. false when the lease turned out to be lost (replaced
  // by another holder); the lock itself is still ours then.
  bool touch();

  enum class kept { lost, holder_exited };
  // For a lock held on behalf of another process: blocks, refreshing the
  // mtime, until the lock is lost or the recorded holder exits. In a forked
  // keeper it first takes the proof of life over (a forked child's copy of
  // the holder's descriptor keeps none: os/files.hpp guard_from_fork).
  kept keep_until_holder_exits();

  // Leaves the heartbeat thread (a no-op when not registered).
  void stop_heartbeat();
  // B5: hands the lock to the next waiter (handoff.hpp) or removes the
  // directory, only if it is still ours (release.cpp).
  error release();
  // Closes meta_fd (under meta_mu): the proof of life ends with the hold.
  void drop_proof();
};

// Hands `s` to the process's heartbeat thread, which refreshes it every
// period() and calls its on_lost when it is removed or replaced.
void start_heartbeat(const std::shared_ptr<held_state>& s);
// Gives `what` to `s` to drop later (held_state::waited_with): the
// heartbeat thread drops it at its next pass, within kWatchAfterMs, unless
// the release comes first. Without a heartbeat it waits for the release.
void drop_later(held_state& s, std::shared_ptr<void> what);
// Tells the heartbeat thread that `s` now holds its lease too: from then on
// a claim replaced or removed is a loss noticed at once.
void watch_lease(held_state& s);
// Has the heartbeat thread ask `s`'s holder to yield, once, because it
// sits idle (idle.cpp); nothing when it has been asked already.
void ask_idle_yield(held_state& s);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_HEARTBEAT_HPP
