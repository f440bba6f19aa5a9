// One look at an etcd lock: its holder's key and its waiters' entries, read
// in one range (one revision), put in the order the lock serves them, and
// said as the library says a local lock (info, waiter).
#ifndef OFFLOAD_LOCK_SRC_ETCD_VIEW_HPP
#define OFFLOAD_LOCK_SRC_ETCD_VIEW_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "etcd/address.hpp"
#include "etcd/client.hpp"
#include "etcd/record.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/waiters.hpp"

namespace offload_lock::detail::etcd {

struct entry {
  key_value kv;
  record rec;
};

struct lock_view {
  std::int64_t revision = 0;     // the store's revision at the look
  std::optional<entry> holder;   // the holder's key, whatever its value
  // The waiters, in the order served: priority (highest first), then
  // arrival (create revision). Only well-formed entries: a key under the
  // queue prefix named by the lease it is attached to (16 hex digits).
  // Anything else there (no lease, another name) is `foreign` and waits
  // for nothing.
  std::vector<entry> queue;
  std::size_t foreign = 0;
};

// The lock's view from a range over address::lock_prefix().
lock_view read_view(const address& a, const range_reply& r);
// One range, within `b`.
result<lock_view> look(client& c, const address& a, const sys::net_bounds& b);

// A lease's name in a queue key: 16 lower-case hex digits.
std::string lease_name(std::int64_t lease);

// What inspect() says of the lock: held exactly while the holder key
// exists; the holder's record as it said it (a record that cannot be read
// holds all the same: `stale_reason` is nullopt and `label` names the
// problem). `now_ms`: the wall clock.
info to_info(const address& a, const lock_view& v, std::int64_t now_ms);
// What waiters() says: each waiter's place and ETA (the holder's expected
// free time plus the declared durations ahead; unknown as soon as one of
// them is undeclared).
std::vector<waiter> to_waiters(const lock_view& v, const info& holder, std::int64_t now_ms);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_VIEW_HPP
