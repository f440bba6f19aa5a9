// When another's lease has surely expired (expiry.hpp).
#include "etcd/expiry.hpp"

#include <algorithm>

namespace offload_lock::detail::etcd {

namespace {
// Kept off each bound, for clocks that tick at slightly different rates.
constexpr std::int64_t margin_ms = 20;
}  // namespace

void expiry_reckoner::saw(std::int64_t sent, std::int64_t answered, std::int64_t remaining_s,
                          std::int64_t granted_s) {
  if (remaining_s < 0) {
    // No such lease, says the leader: revoked, swept, or more than a
    // second past its expiry, or a leader just elected that has not yet
    // applied its grant. Not acted on: a lease that is gone has taken its
    // keys with it (the watch says so), and one past its expiry is swept
    // by etcd. The chain starts again.
    first_zero_.reset();
    last_zero_.reset();
    next_ = answered + expiry_poll_ms;
    return;
  }
  if (remaining_s > 0) {
    // Renewed (or not yet near its end): no chain. At leader time s >= sent
    // at least remaining_s seconds were left: below a second no sooner than
    // sent + remaining_s - 1 s.
    first_zero_.reset();
    last_zero_.reset();
    next_ = std::max(answered + expiry_poll_ms, sent + (remaining_s - 1) * 1000);
    return;
  }
  // A renewal between the last reading and this one shows as a remaining
  // time of 1 s or more only when this one came within TTL - 1 s of it.
  const std::int64_t longest_gap = (granted_s - 1) * 1000 - margin_ms;
  if (!last_zero_ || answered - last_zero_->sent > longest_gap) first_zero_ = reading{sent, answered};
  last_zero_ = reading{sent, answered};
  next_ = answered + expiry_poll_ms;
}

void expiry_reckoner::missed(std::int64_t retry_at) {
  first_zero_.reset();
  last_zero_.reset();
  next_ = retry_at;
}

bool expiry_reckoner::expired() const {
  // The first 0 reading's leader time was at most its answer; the last
  // one's at least its sending.
  return first_zero_ && last_zero_ && last_zero_->sent >= first_zero_->answered + 1000 + margin_ms;
}

}  // namespace offload_lock::detail::etcd
