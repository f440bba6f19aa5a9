// The C API of the gpulease view (include/offload_lock/offload_lock.h,
// offload_lock_lease_*) over lease.hpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "offload_lock/lease.hpp"
#include "offload_lock/offload_lock.h"

namespace {

void copy_out(char* dst, std::size_t cap, const std::string& src) {
  if (cap == 0) return;
  const std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

void fill(offload_lock_lease_info* info, const offload_lock::lease_info& i) {
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

}  // namespace

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
  fill(info, offload_lock::inspect_lease(d));
  return OFFLOAD_LOCK_OK;
}

extern "C" int offload_lock_lease_joined(offload_lock_lease_info* info, int* joined, int* busy) {
  if (!info || !joined) return OFFLOAD_LOCK_INVALID;
  const auto i = offload_lock::joined_lease();
  *joined = i ? 1 : 0;
  if (busy) *busy = i && offload_lock::lease_busy(*i) ? 1 : 0;
  if (i) fill(info, *i);
  else *info = offload_lock_lease_info{};
  return OFFLOAD_LOCK_OK;
}
