// GPU slot paths (include/offload_lock/slots.hpp): slot 0 is the ordinary
// lock, slot k its sibling "<path>.gpu<k>".
#include "offload_lock/slots.hpp"

namespace offload_lock {

std::string gpu_slot_path(const std::string& path, int gpu) {
  return gpu <= 0 ? path : path + ".gpu" + std::to_string(gpu);
}

}  // namespace offload_lock
