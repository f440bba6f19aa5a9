// Looking at the lock without taking it: what is there, who holds it, and
// whether the other participants (the Node runners, the Go readers) would
// call it held; and waiting until it is free.
#ifndef OFFLOAD_LOCK_INSPECT_HPP
#define OFFLOAD_LOCK_INSPECT_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "offload_lock/export.h"
#include "offload_lock/lease.hpp"

namespace offload_lock {

using milliseconds = std::chrono::milliseconds;

// A wait that never ends by itself.
inline constexpr milliseconds wait_forever = milliseconds::max();
// The TTL of doc/protocol.md A3: a holder whose meta.json mtime is older than this is
// stale for every participant. offload-lock holders refresh the mtime (B7).
inline constexpr milliseconds default_ttl = std::chrono::hours(1);
// How long a lock directory with a missing or unparseable meta.json is left
// alone, so a Node runner between its mkdir and its write is never robbed (B3).
inline constexpr milliseconds default_grace = std::chrono::seconds(2);

// One point-in-time view of the lock, as `status` shows it. The strings come
// from meta.json, which anyone who can write the lock's parent may have
// written: escape them before a terminal or a parser sees them.
// A waiter of a higher priority than the holder's, asking it to make way
// (lock_options::on_yield_request).
struct yield_request {
  std::int64_t pid = 0;  // the waiter it is for; 0: none waits
  std::string label;     // the waiter's; when none waits, the reason
  int priority = 0;
  // Why the holder is asked: "priority" (this waiter is above it), "max
  // hold" (its maximum hold passed) or "idle" (the site policy's idle rule).
  std::string reason = "priority";
};

struct info {
  std::string path;
  bool present = false;  // something exists at path
  bool held = false;     // present and not stale by offload-lock's rules
  std::optional<std::int64_t> pid;         // recorded holder pid, when a number
  std::optional<std::int64_t> started_at;  // recorded startedAt, epoch ms
  milliseconds held_for{0};  // now - startedAt (or - the meta mtime when no startedAt)
  milliseconds age{0};       // now - meta.json mtime, the clock the TTL rule uses
  std::string label, host, token, tool;
  std::optional<std::uint32_t> owner_uid;  // uid owning the lock directory
  // Why a present lock does not count as held (nullopt when held or absent).
  std::optional<std::string> stale_reason;
  // Deprecated: the same as stale_reason, under its 0.1 name; removed in
  // 0.3. (Not marked [[deprecated]]: compilers then warn at every copy of
  // an info, in code that never names the member.)
  std::optional<std::string> stale;
  // What the other participants conclude from the same bytes.
  bool node_stale = false;  // the Node runners' isStale() (doc/protocol.md A3)
  bool go_held = false;     // the Go readers' Inspect().Held (doc/protocol.md A5)
  // Why the Node runners would call this lock stale (and may reclaim it at
  // any moment), nullopt when they call it held (or it is absent).
  std::optional<std::string> v1_stale_reason;
  // The holder recorded a pid namespace other than this reader's: its pid
  // means nothing here, and v1 runners and Go readers outside that
  // namespace judge it by a stranger's pid (usually: dead).
  bool other_pid_namespace = false;
  // What the holder declared (meta.json `priority`, `expectMs`): its
  // priority in the queue, and how long it expects to hold the lock (0:
  // undeclared; then expected_free_in is unknown too).
  int priority = 0;
  milliseconds expected{0};
  // expected - held_for, at least 0 (overdue); nullopt when undeclared or free.
  std::optional<milliseconds> expected_free_in;
  // The holder's maximum hold (meta.json `maxHoldMs`; 0: none), and what is
  // left of it: max_hold - held_for, below 0 once it has passed; nullopt
  // when none or free.
  milliseconds max_hold{0};
  std::optional<milliseconds> max_hold_in;
  // The holder said it can make way (meta.json `canYield`), and the first
  // live waiter of a higher priority than the holder's, which its holder is
  // asked to make way for (nullopt: none, or the holder cannot yield).
  bool can_yield = false;
  std::optional<yield_request> yield_requested;
  // The holder's GPU has shown it idle since this epoch ms, by the site
  // policy's idle rule (offload_lock/policy.hpp, "idleAfter"), as the
  // holder marked it, and for how long at the look (at least 0); both
  // nullopt when not idle, free, or no rule applies.
  std::optional<std::int64_t> idle_since;
  std::optional<milliseconds> idle_for;
  // Set when the lock could not be looked at (for example EACCES on its
  // parent); held is then false and the message names the path and errno.
  std::string problem;
  // An etcd lock's fencing token (offload_lock/etcd.hpp): the revision at
  // which its holder took it, greater for every later acquisition; 0 for a
  // local lock, and when free.
  std::uint64_t fence = 0;
};

// Inspects the lock at `path` without changing anything.
// - Never blocks on the lock; costs a few system calls.
// - A missing parent directory reads as no lock (present = false).
// - A system error does not throw: a failure to look at all (EACCES on the
//   parent) is info::problem; an unreadable meta.json reads as unreadable, as
//   it does for the other participants.
// - Thread-safe; safe in a forked child.
OFFLOAD_LOCK_API info inspect(const std::string& path, milliseconds ttl = default_ttl,
                              milliseconds grace = default_grace);

// Waits until the lock at `path` is free (absent, or stale) or `wait` has
// passed, and returns the last inspection (held is true only when the wait
// ran out).
// - Blocks up to `wait`: 0 or negative looks once; wait_forever never gives up.
// - Wakes at once on the lock directory's removal and on the holder's death
//   (inotify, pidfd); `poll` (at least 1 ms) bounds each sleep where the file
//   system gives no notifications.
// - Reclaims nothing, changes nothing. Errors as inspect(). Thread-safe.
OFFLOAD_LOCK_API info wait_free(const std::string& path, milliseconds wait,
                                milliseconds poll = std::chrono::seconds(1), milliseconds ttl = default_ttl);

// The GPU of a plain lock (or of its slot 0) as a whole: the lock, and the
// gpulease lease that every acquisition of it also takes where the
// upstream's current runners keep one (lease.hpp, joined_lease()). A
// gpulease holder has the GPU though the lock is free: whether "the card is
// free" is busy(), not lock.held.
struct gpu_view {
  info lock;
  std::optional<lease_info> lease;  // nullopt where acquisitions take no lease
  // Someone has the GPU: the lock is held, or the lease is held or cannot
  // be judged (lease_busy).
  bool busy() const noexcept { return lock.held || (lease && lease_busy(*lease)); }
};

// inspect() of the lock at `path` (the plain lock, or slot 0's path), and
// joined_lease(). Never blocks; changes nothing. Errors as inspect().
OFFLOAD_LOCK_API gpu_view inspect_gpu(const std::string& path, milliseconds ttl = default_ttl);

// wait_free() for the GPU as a whole: waits until neither the lock at
// `path` nor the joined lease keeps it (busy() is false), or `wait` has
// passed, and returns the last look (busy() is true only when the wait ran
// out, or lock.problem says why it could not look).
// - Blocks up to `wait`: 0 or negative looks once; wait_forever never gives up.
// - Wakes at once on the lock's removal and its holder's death (as
//   wait_free), and on a change in the lease directory and the lease
//   holder's death; `poll` (at least 1 ms) bounds each sleep, which is also
//   how soon a lease that goes stale by time alone (its heartbeat and
//   window both over) is seen.
// - Reclaims nothing, changes nothing. Thread-safe.
OFFLOAD_LOCK_API gpu_view wait_gpu_free(const std::string& path, milliseconds wait,
                                        milliseconds poll = std::chrono::seconds(1), milliseconds ttl = default_ttl);

// A duration for people: "850ms", "42s", "5m12s", "2h03m". Pure.
OFFLOAD_LOCK_API std::string describe_duration(milliseconds d);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_INSPECT_HPP
