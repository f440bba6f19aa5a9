// One name per lock directory (lock_identity, include/offload_lock/path.hpp).
#include "lock_dir.hpp"
#include "offload_lock/path.hpp"

namespace offload_lock {

std::string lock_identity(const std::string& path) {
  auto t = detail::open_target(path);
  if (!t) return path;
  auto id = detail::parent_identity(*t);
  if (!id) return path;
  // As the in-process queue keys its gates (src/local_gate.cpp).
  return std::to_string(id->dev) + ":" + std::to_string(id->ino) + "/" + t->name;
}

}  // namespace offload_lock
