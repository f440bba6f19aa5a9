// What the parts of an etcd lock share: lock.cpp checks an acquisition's
// options and passes a nested or passed-down one through, lock_wait.cpp
// waits in the line for the lock and takes it, lock_hold.cpp keeps it.
#ifndef OFFLOAD_LOCK_SRC_ETCD_LOCK_PARTS_HPP
#define OFFLOAD_LOCK_SRC_ETCD_LOCK_PARTS_HPP

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "etcd/address.hpp"
#include "etcd/client.hpp"
#include "etcd/lock.hpp"
#include "etcd/record.hpp"
#include "os/clock.hpp"
#include "plan.hpp"
#include "timing.hpp"

namespace offload_lock::detail::etcd {

// What a hold is made of: a lock taken (lock_wait.cpp) or passed down
// (lock.cpp).
struct hold::made {
  address addr;
  std::string token, record_json;
  std::uint64_t fence = 0;
  std::int64_t lease = 0, ttl_ms = 0, pid = 0, valid_until = 0;
  int gpu = 0, priority = 0;
  bool inherited = false;
  std::function<void(const error&)> on_lost;
  std::function<void(const yield_request&)> on_yield;
  std::int64_t max_hold_ms = 0;
};

// Bounds for one call: every member may be tried within it.
inline sys::net_bounds call_bounds(const client& c, const std::vector<int>& cancel = {}) {
  return {sys::monotonic_ms() + per_member_ms * static_cast<std::int64_t>(c.endpoints().size()), cancel};
}

// The options of one etcd acquisition, checked once (lock.cpp).
struct wanted {
  address a;
  int gpu = 0;
  std::int64_t ttl_s = 0;
  bool queue = true;
  record holder, waiting;
  deadline until = deadline::forever();
  std::vector<int> cancel;
  reporting report;
  bool inherit = true;
  std::function<void(const error&)> on_lost;
  std::function<void(const yield_request&)> on_yield;
  std::int64_t max_hold_ms = 0;
};

// Waits in the line for the lock `w` names and takes it (lock_wait.cpp):
// blocks up to w.until. The hold made, its thread not started yet; else
// busy, timed_out, cancelled, or a system error naming etcd.
result<std::shared_ptr<hold>> wait_and_take(wanted w);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_LOCK_PARTS_HPP
