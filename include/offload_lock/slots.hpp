// GPU slots: one lock per GPU of a machine, slot 0 being the ordinary lock
// path, so that single-GPU participants keep contending on GPU 0.
#ifndef OFFLOAD_LOCK_SLOTS_HPP
#define OFFLOAD_LOCK_SLOTS_HPP

#include <string>

#include "offload_lock/export.h"

namespace offload_lock {

// The most GPU slots one lock can have.
inline constexpr int max_gpus = 1024;

// The lock path of GPU slot `gpu`: slot 0 (or less) is `path` itself, slot k
// the sibling `path.gpu<k>`. Pure.
OFFLOAD_LOCK_API std::string gpu_slot_path(const std::string& path, int gpu);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_SLOTS_HPP
