// The GPU as a whole, the lock and the gpulease lease that goes with it:
// inspect_gpu() and wait_gpu_free() (include/offload_lock/inspect.hpp).
#include <algorithm>

#include "gpulease/look.hpp"
#include "offload_lock/inspect.hpp"
#include "os/watch.hpp"
#include "wait.hpp"

namespace offload_lock {

namespace gl = detail::gpulease;

gpu_view inspect_gpu(const std::string& path, milliseconds ttl) {
  gpu_view v;
  v.lock = inspect(path, ttl);
  v.lease = joined_lease();
  return v;
}

gpu_view wait_gpu_free(const std::string& path, milliseconds wait, milliseconds poll, milliseconds ttl) {
  const detail::deadline until = detail::deadline_for(wait);
  const std::int64_t poll_ms = std::max<std::int64_t>(1, poll.count());
  detail::sys::watcher w;
  for (;;) {
    gpu_view v;
    // The lock first, waited for as wait_free() waits for it; then the lease.
    const milliseconds left = until.is_forever() ? wait_forever : milliseconds(until.left());
    v.lock = wait_free(path, until.trying() ? milliseconds(0) : left, poll, ttl);
    const gl::lease_location loc = gl::resolve_lease(gl::lease_inputs_from_environment());
    const bool joined = gl::joined_by_acquisitions(loc);
    if (!v.lock.problem.empty() || v.lock.held) {
      if (joined) v.lease = inspect_lease(loc.dir);
      return v;
    }
    if (!joined) return v;
    // Watched before the look, so that a release between the two is not
    // missed.
    w.unwatch_all();
    const int dir_id = w.watch_entries(loc.dir);
    v.lease = inspect_lease(loc.dir);
    if (!lease_busy(*v.lease) || until.expired() || until.trying()) return v;
    // The lease also frees by time alone (its heartbeat and its window both
    // over), and where the directory cannot be watched only a look finds
    // its release: each sleep is at most `poll`.
    std::int64_t timeout = poll_ms;
    if (dir_id < 0) timeout = std::min<std::int64_t>(timeout, detail::fallback_poll_ms);
    // A holder that dies wakes this at once. One that cannot be watched
    // (gone already, or not a pid of this kernel) is looked at again soon.
    if (v.lease->pid > 0 && w.watch_pid(v.lease->pid) < 0)
      timeout = std::min<std::int64_t>(timeout, detail::contended_recheck_ms);
    (void)w.wait(until.clamp(timeout));
  }
}

}  // namespace offload_lock
