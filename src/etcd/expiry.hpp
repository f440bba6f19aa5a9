// When another process's etcd lease has surely expired, reckoned from what
// etcd says of it (doc/etcd.md "A holder on another host").
//
// etcd frees the keys of a lease that was not renewed within its TTL only
// when it next looks for expired leases (every 500 ms), so a waiter that
// waits for the deletion waits up to half a second past the expiry. The
// waiter first in line reads the holder's remaining TTL instead and revokes
// the lease itself once it has surely expired: what etcd would do anyway.
//
// etcd says the remaining time in whole seconds, cut toward zero, read on
// the leader's clock. A reading of 0 at leader time s means the lease
// expires before s + 1 s unless it is renewed after s. A renewal at u makes
// the remaining time TTL - (t - u) at any later t, so a reading taken at
// most TTL - 1 s after the one before would show at least 1 s: a chain of
// 0 readings, each within that of the one before, proves that no renewal
// came during the chain. Once the chain reaches 1 s past its first reading,
// the lease expired inside it and, expired, cannot be renewed: revoking it
// takes nothing from a live holder. A lease the leader says it does not
// have is never acted on (a leader just elected may not have applied its
// grant yet). Each reading's leader time lies between
// when it was sent and when its answer came; the bounds use the side that
// is safe.
#ifndef OFFLOAD_LOCK_SRC_ETCD_EXPIRY_HPP
#define OFFLOAD_LOCK_SRC_ETCD_EXPIRY_HPP

#include <cstdint>
#include <optional>

namespace offload_lock::detail::etcd {

// How often the remaining time is read once it could be below a second
// (the expiry is seen within about this much).
inline constexpr std::int64_t expiry_poll_ms = 50;

class expiry_reckoner {
 public:
  explicit expiry_reckoner(std::int64_t lease) : lease_(lease) {}

  std::int64_t lease() const { return lease_; }
  // One reading: sent and answered at (monotonic ms), the remaining whole
  // seconds etcd said (-1: no such lease) and the TTL it was granted.
  void saw(std::int64_t sent, std::int64_t answered, std::int64_t remaining_s, std::int64_t granted_s);
  // A reading that failed: the chain is broken (the gap it leaves is not
  // known to be short); the next one is due at retry_at.
  void missed(std::int64_t retry_at);
  // When the next reading is due (monotonic ms).
  std::int64_t next_reading() const { return next_; }
  // Whether the lease has surely expired.
  bool expired() const;

 private:
  struct reading {
    std::int64_t sent = 0, answered = 0;
  };
  std::int64_t lease_;
  std::int64_t next_ = 0;
  // The chain of 0 readings: its first, and its last.
  std::optional<reading> first_zero_, last_zero_;
};

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_EXPIRY_HPP
