// Every acquisition holds a gpulease lease as well, where the upstream's
// current runners keep one (doc/protocol-gpulease.md, "Every acquisition
// holds both").
//
// The order is fixed: the offload-lock lock first (its queue, priorities and
// ETAs decide which offload-lock waiter goes next), then the lease. It
// cannot deadlock: a gpulease participant holds only the lease and never
// waits for the lock while it holds it, and a process that runs under a
// gpulease holder's lease (GPU_LEASE_*) waits for neither, it passes
// through (lease_passed_down). An offload-lock holder that waits for the
// lease keeps the lock, so no v1 runner or other offload-lock waiter slips
// in; gpulease waiters poll and may take a lease that is released, as a v1
// runner may take a free lock.
#ifndef OFFLOAD_LOCK_SRC_LEASE_JOIN_HPP
#define OFFLOAD_LOCK_SRC_LEASE_JOIN_HPP

#include <optional>
#include <string>
#include <string_view>

#include "gpulease/inherit.hpp"
#include "gpulease/location.hpp"
#include "heartbeat.hpp"
#include "plan.hpp"

namespace offload_lock::detail {

// The lease an acquisition also takes.
struct lease_join {
  gpulease::lease_location loc;
  // The lease directory is the lock directory itself (GPU_LOCK placed
  // both): one meta.json is the lock's record and the lease's claim, taken
  // and released in one step by the acquisition (shared_dir.hpp), not
  // after it by take_lease().
  bool shared = false;
};

// The lease this acquisition also takes, or nullopt for none: a plain lock
// or slot 0 named (its directory is the plain lock's; the other slots are a
// site's own arrangement, which gpulease's one lease cannot describe); a lease placed by a state root
// (OFFLOAD_LOCK_LEASE_ROOT, LOCAL_OFFLOAD_STATE_DIR or the default) that
// exists and that gpulease accepts, or a GPU_LOCK that names this very
// lock directory where gpulease's counter is beside it (lease_sharing). A
// GPU_LOCK naming another directory than the lock's is not joined.
std::optional<lease_join> lease_to_take(const plan& p);

// Where `lock_path` is also gpulease's lease directory: GPU_LOCK names it
// (cleaned and made absolute as gpulease makes it), gpulease accepts the
// path, and its counter is beside it (<parent>/epoch: gpulease has acquired
// there; a site that runs no gpulease sets GPU_LOCK too). Then that lease's
// place; nullopt otherwise. An open and a stat where GPU_LOCK is set,
// nothing else where it is not.
std::optional<gpulease::lease_location> lease_sharing(const std::string& lock_path);

// What the claims of the acquisition planned by `p` record: its class, its
// label as the reason, the origin "offload-lock", and the holder the lock
// records (acquire --pid's, which outlives the command).
gpulease::take_options lease_options(const plan& p);

// How the errors of take_lease() that name the lease's holder begin (the
// command tells them from a busy lock by it).
inline constexpr std::string_view lease_wait_context = "the gpulease ";
// The context of a lost lease's errc::lost (on_lost, a release): the
// claim's path after the same words, so that the command says which of the
// two locks was lost.
inline std::string lease_loss_context(const std::string& claim_path) {
  return std::string(lease_wait_context) + "lease claim " + claim_path;
}

// Takes the lease at `loc` for the holder of `s` (whose lock is held),
// waiting as the plan says: a live holder is waited for (its exit, its
// claim's removal, and its window and heartbeat by the clock), a dead one
// is taken over by gpulease's rules. busy, timed_out or cancelled as for
// the lock, naming the lease's holder; a system error otherwise. On
// success the lease is in `s` (renewed by its heartbeat, released first at
// its release).
error take_lease(const plan& p, const gpulease::lease_location& loc, held_state& s);

// After release_by() let go of the lock held by `pid` (slot 0 or the plain
// lock), whose keeper may be gone: the lease taken with it (made by
// offload-lock, naming the same holder) is given back too, as the keeper
// would have. Errors are ignored: a lease left behind is taken over by
// gpulease's rules once its heartbeat and window end.
void give_back_lease_of(std::int64_t pid);

// GPU_LEASE_* in this process's environment naming the lease at `loc`:
// none (also for another lease directory's), a current lease to pass
// through, or one refused (its `why`).
gpulease::inheritance lease_passed_down(const gpulease::lease_location& loc);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_LEASE_JOIN_HPP
