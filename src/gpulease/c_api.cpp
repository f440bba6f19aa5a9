// The C API of the gpulease view (include/offload_lock/offload_lock.h,
// offload_lock_lease_*) over lease.hpp, and its struct both ways
// (c_api_lease.hpp).
#include <algorithm>
#include <cstring>
#include <string>

#include "c_api_lease.hpp"

namespace {

void copy_out(char* dst, std::size_t cap, const std::string& src) {
  if (cap == 0) return;
  const std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

}  // namespace

namespace offload_lock::detail {

void fill_c_lease(offload_lock_lease_info& out, const lease_info& i) {
  offload_lock_lease_info* info = &out;
  *info = offload_lock_lease_info{};
  copy_out(info->dir, sizeof info->dir, i.dir);
  switch (i.state) {
    case offload_lock::lease_state::free: info->state = OFFLOAD_LOCK_LEASE_FREE; break;
    case offload_lock::lease_state::held: info->state = OFFLOAD_LOCK_LEASE_HELD; break;
    case offload_lock::lease_state::stale: info->state = OFFLOAD_LOCK_LEASE_STALE; break;
    case offload_lock::lease_state::unknown: info->state = OFFLOAD_LOCK_LEASE_UNKNOWN; break;
  }
  info->in_progress = i.in_progress ? 1 : 0;
  info->readers_held = i.gpulease_readers_held ? 1 : 0;
  info->pid = i.pid;
  copy_out(info->lease_class, sizeof info->lease_class, i.lease_class);
  info->epoch = i.epoch;
  copy_out(info->reason, sizeof info->reason, i.reason);
  copy_out(info->origin, sizeof info->origin, i.origin);
  copy_out(info->job_id, sizeof info->job_id, i.job_id);
  info->acquired_at_ms = i.acquired_at_ms;
  info->expires_at_ms = i.expires_at_ms;
  info->renewed_at_ms = i.renewed_at_ms;
  info->held_for_ms = i.held_for.count();
  info->has_counter = i.counter ? 1 : 0;
  info->counter = i.counter.value_or(0);
  copy_out(info->why, sizeof info->why, i.why);
}

lease_info lease_of_c(const offload_lock_lease_info& c) {
  // The C strings are NUL-terminated within their fields (copy_out).
  auto text = [](const char* f, std::size_t cap) { return std::string(f, strnlen(f, cap)); };
  lease_info i;
  i.dir = text(c.dir, sizeof c.dir);
  switch (c.state) {
    case OFFLOAD_LOCK_LEASE_FREE: i.state = lease_state::free; break;
    case OFFLOAD_LOCK_LEASE_HELD: i.state = lease_state::held; break;
    case OFFLOAD_LOCK_LEASE_STALE: i.state = lease_state::stale; break;
    default: i.state = lease_state::unknown; break;
  }
  i.in_progress = c.in_progress != 0;
  i.gpulease_readers_held = c.readers_held != 0;
  i.pid = c.pid;
  i.lease_class = text(c.lease_class, sizeof c.lease_class);
  i.epoch = c.epoch;
  i.reason = text(c.reason, sizeof c.reason);
  i.origin = text(c.origin, sizeof c.origin);
  i.job_id = text(c.job_id, sizeof c.job_id);
  i.acquired_at_ms = c.acquired_at_ms;
  i.expires_at_ms = c.expires_at_ms;
  i.renewed_at_ms = c.renewed_at_ms;
  i.held_for = std::chrono::milliseconds(c.held_for_ms);
  if (c.has_counter) i.counter = c.counter;
  i.why = text(c.why, sizeof c.why);
  return i;
}

}  // namespace offload_lock::detail

extern "C" int offload_lock_lease_find(const char* explicit_dir, offload_lock_lease_place* place) {
  if (!place) return OFFLOAD_LOCK_INVALID;
  const auto p = offload_lock::find_lease(explicit_dir ? explicit_dir : "");
  *place = offload_lock_lease_place{};
  copy_out(place->dir, sizeof place->dir, p.dir);
  copy_out(place->gpu_dir, sizeof place->gpu_dir, p.gpu_dir);
  copy_out(place->root, sizeof place->root, p.root);
  copy_out(place->rule, sizeof place->rule, offload_lock::to_string(p.rule));
  place->exists = p.exists ? 1 : 0;
  copy_out(place->refused, sizeof place->refused, p.refused);
  return OFFLOAD_LOCK_OK;
}

extern "C" int offload_lock_lease_inspect(const char* dir, offload_lock_lease_info* info) {
  if (!info) return OFFLOAD_LOCK_INVALID;
  const std::string d = dir && *dir ? std::string(dir) : offload_lock::find_lease().dir;
  offload_lock::detail::fill_c_lease(*info, offload_lock::inspect_lease(d));
  return OFFLOAD_LOCK_OK;
}

extern "C" int offload_lock_lease_joined(offload_lock_lease_info* info, int* joined, int* busy) {
  if (!info || !joined) return OFFLOAD_LOCK_INVALID;
  const auto i = offload_lock::joined_lease();
  *joined = i ? 1 : 0;
  if (busy) *busy = i && offload_lock::lease_busy(*i) ? 1 : 0;
  if (i) offload_lock::detail::fill_c_lease(*info, *i);
  else *info = offload_lock_lease_info{};
  return OFFLOAD_LOCK_OK;
}
