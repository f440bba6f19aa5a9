// inspect(), waiters(), wait_free() and release_by() for an etcd lock: what
// include/offload_lock/inspect.hpp, waiters.hpp and release.hpp promise,
// kept by etcd (each public function hands an etcd URL over to these).
#ifndef OFFLOAD_LOCK_SRC_ETCD_LOOK_HPP
#define OFFLOAD_LOCK_SRC_ETCD_LOOK_HPP

#include <string>
#include <vector>

#include "offload_lock/release.hpp"
#include "offload_lock/waiters.hpp"

namespace offload_lock::detail::etcd {

// One look. A bad URL or an etcd that cannot be reached is info::problem
// (naming the endpoint), as a local lock's unreadable parent is.
info inspect(const std::string& url);
std::vector<waiter> waiters(const std::string& url);
// Woken by the holder key's deletion (a watch from the revision read), or
// the wait's end. An etcd that cannot be reached ends it with the problem.
info wait_free(const std::string& url, milliseconds wait);
// By token, by pid (recorded on this host), or by force: deletes the
// holder key as it was read (a transaction on its create revision) and
// revokes its lease, so that its keeper learns it at once.
result<release_outcome> release_by(const std::string& url, const release_request& req);
// What `doctor` says of an etcd lock: the URL, each member (reached, its
// version, whether it has a leader), the lock's keys (its state, entries
// that are not a waiter's).
struct health_line {
  std::string name;
  bool ok = true;
  std::string detail;
};
std::vector<health_line> health(const std::string& url);

// The store's revision now (0 when etcd cannot be reached): what a watcher
// of the lock reads before its first look, so that wait_change() from it
// misses no change made after.
std::int64_t current_revision(const std::string& url);
// Waits until the lock (holder or queue) changes after `since` (a
// revision; 0: now), the wait passes, or one of `cancel_fds` is readable.
// Returns the revision seen last (0 when etcd could not be reached).
std::int64_t wait_change(const std::string& url, std::int64_t since, milliseconds wait,
                         const std::vector<int>& cancel_fds);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_LOOK_HPP
