// The public view of the gpulease lease (include/offload_lock/lease.hpp)
// over the lease module.
#include <algorithm>

#include "gpulease/epoch.hpp"
#include "gpulease/look.hpp"
#include "offload_lock/lease.hpp"
#include "os/clock.hpp"

namespace offload_lock {

namespace gl = detail::gpulease;

const char* to_string(lease_rule rule) noexcept {
  switch (rule) {
    case lease_rule::explicit_dir: return "explicit";
    case lease_rule::gpu_lock_env: return "GPU_LOCK";
    case lease_rule::lease_root_env: return "OFFLOAD_LOCK_LEASE_ROOT";
    case lease_rule::state_dir_env: return "LOCAL_OFFLOAD_STATE_DIR";
    case lease_rule::default_root: return "default";
  }
  return "?";
}

const char* to_string(lease_state s) noexcept {
  switch (s) {
    case lease_state::free: return "free";
    case lease_state::held: return "held";
    case lease_state::stale: return "stale";
    case lease_state::unknown: return "unknown";
  }
  return "?";
}

lease_place find_lease(std::string_view explicit_dir) {
  std::optional<std::string> x;
  if (!explicit_dir.empty()) x = std::string(explicit_dir);
  const gl::lease_location loc = gl::resolve_lease(gl::lease_inputs_from_environment(x));
  lease_place p;
  p.dir = loc.dir;
  p.gpu_dir = loc.gpu_dir;
  p.root = loc.root;
  switch (loc.source) {
    case gl::lease_source::explicit_dir: p.rule = lease_rule::explicit_dir; break;
    case gl::lease_source::gpu_lock: p.rule = lease_rule::gpu_lock_env; break;
    case gl::lease_source::lease_root: p.rule = lease_rule::lease_root_env; break;
    case gl::lease_source::state_dir: p.rule = lease_rule::state_dir_env; break;
    case gl::lease_source::default_root: p.rule = lease_rule::default_root; break;
  }
  p.exists = gl::lease_root_exists(loc);
  p.refused = loc.refused;
  // For the root rules, exists is the root's opening.
  p.joined = p.exists && gl::joinable(loc);
  return p;
}

lease_info inspect_lease(const std::string& dir) {
  const std::int64_t now = detail::sys::now_ms();
  const gl::lease_verdict v = gl::judge_lease(gl::read_lease(dir), now, gl::lease_process_view::real());
  lease_info i;
  i.dir = dir;
  switch (v.state) {
    case gl::lease_state::free: i.state = lease_state::free; break;
    case gl::lease_state::alive: i.state = lease_state::held; break;
    case gl::lease_state::dead: i.state = lease_state::stale; break;
    case gl::lease_state::unknown: i.state = lease_state::unknown; break;
  }
  i.why = v.why;
  i.in_progress = v.in_progress;
  i.gpulease_readers_held = v.gpulease_readers_held;
  if (v.rec) {
    i.pid = v.rec->pid;
    i.lease_class = v.rec->lease_class;
    i.epoch = v.rec->epoch;
    i.reason = v.rec->reason;
    i.origin = v.rec->origin;
    i.job_id = v.rec->job_id;
    i.acquired_at_ms = v.rec->acquired_at_ms;
    i.expires_at_ms = v.rec->expires_at_ms;
    i.renewed_at_ms = v.renewed_at_ms;
    i.held_for = std::chrono::milliseconds(std::max<std::int64_t>(0, now - v.rec->acquired_at_ms));
  }
  const std::string gpu_dir = gl::resolve_lease(gl::lease_inputs_from_environment(dir)).gpu_dir;
  if (auto c = gl::read_counter(gpu_dir); c && *c) i.counter = **c;
  return i;
}

bool lease_busy(const lease_info& i) noexcept {
  return i.state == lease_state::held || i.state == lease_state::unknown;
}

std::optional<lease_info> joined_lease() {
  const lease_place p = find_lease();
  if (!p.joined) return std::nullopt;
  return inspect_lease(p.dir);
}

}  // namespace offload_lock
