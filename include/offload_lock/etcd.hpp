// Locks kept by an etcd cluster: the same lock, for resources that several
// hosts share (a GPU inference server, a licence, one writer of a shared
// dataset). A lock path "etcd://HOST:PORT[,HOST:PORT...]/NAME", given to
// lock_options::path, GPU_LOCK or the command's --lock, names one; every
// call of lock.hpp, inspect.hpp, waiters.hpp and release.hpp then works on
// it, with the semantics of a local lock (doc/etcd.md says where they
// differ). What differs:
// - Liveness is an etcd lease, kept alive by the process that holds or
//   waits (keep-alives every third of the TTL). lock_options::ttl is the
//   lease's TTL, in whole seconds (rounded up); left at default_ttl it is
//   etcd_default_ttl. A process that dies, or is cut off from etcd or
//   paused for longer than the TTL, loses its place or the lock; a holder
//   is told through lock_options::on_lost, at the latest when the TTL has
//   passed since its last renewal was sent (so before anyone else can take
//   the lock).
// - Every acquisition has a fencing token, lock::fence(): the etcd
//   revision at which it took the lock, greater than every earlier
//   holder's. A shared server that remembers the highest token it has seen
//   can refuse work that carries a lower one.
// - Waiters are ordered by priority, then by arrival (the revision of their
//   entry); each watches only the key just ahead of it.
// - lock_options::gpus > 1 with no gpu is bad_input (an etcd lock has no
//   slots to choose among); gpu = K names the lock NAME.gpuK.
#ifndef OFFLOAD_LOCK_ETCD_HPP
#define OFFLOAD_LOCK_ETCD_HPP

#include <chrono>
#include <string_view>

#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"

namespace offload_lock {

// Whether `path` names an etcd lock (it starts with "etcd://"). Pure.
OFFLOAD_LOCK_API bool is_etcd_lock(std::string_view path) noexcept;

// The lease TTL of an etcd acquisition that leaves lock_options::ttl at
// default_ttl: a crashed holder's lock is taken over within 10 s, and a
// holder paused or cut off for less than that keeps it.
inline constexpr milliseconds etcd_default_ttl = std::chrono::seconds(10);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_ETCD_HPP
