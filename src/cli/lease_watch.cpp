// Waking a live view when the gpulease lease may have changed. See
// lease_watch.hpp.
#include "cli/lease_watch.hpp"

namespace offload_lock::cli {

namespace {

constexpr std::int64_t kUnwatchedMs = 1'000;
constexpr std::int64_t kHeldLookMs = 5'000;

}  // namespace

void lease_watch::arm(const lease_place& place) {
  if (!place.exists || (watched_ == place.dir && w_.watching())) return;
  watched_.clear();
  // gpulease makes the lease directory and its parent at its first lease:
  // until then the nearest directory above it sees them made.
  for (const std::string& d : {place.dir, place.gpu_dir, place.root})
    if (!d.empty() && w_.watch(d)) {
      watched_ = d;
      return;
    }
}

bool lease_watch::drain() {
  const auto ev = w_.drain();
  if (ev.gone) watched_.clear();
  return ev.any || ev.gone;
}

std::int64_t lease_watch::timeout_ms(const std::optional<lease_board>& seen) const {
  if (!seen) return -1;
  if (watched_.empty()) return kUnwatchedMs;
  return seen->info.state == lease_state::free ? -1 : kHeldLookMs;
}

std::int64_t lease_watch::holder_pid(const std::optional<lease_board>& seen) {
  return seen && seen->info.state == lease_state::held && seen->info.pid > 0 ? seen->info.pid : 0;
}

}  // namespace offload_lock::cli
