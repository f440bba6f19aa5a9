// The waiter registry: each offload-lock process that waits for the lock
// keeps one small JSON file in a directory next to it, so that `status` can
// list the queue. Advisory only: the lock itself never depends on it.
#ifndef OFFLOAD_LOCK_SRC_WAITERS_HPP
#define OFFLOAD_LOCK_SRC_WAITERS_HPP

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "offload_lock/waiters.hpp"
#include "os/files.hpp"

namespace offload_lock::detail {

// The registry directory for the lock named `lock_name` (slot 0's name).
std::string waiters_dir_name(const std::string& lock_name);

struct waiter_record {
  std::int64_t pid = 0;
  std::string label, host, boot_id;
  std::uint64_t proc_ticks = 0;
  std::int64_t since = 0;
  int gpu = -1;
  int gpus = 1;
};

// Serialized and read back; parse fails (false) on anything but an object
// with a positive integer pid.
std::string serialize_waiter(const waiter_record& r);
bool parse_waiter(const std::string& bytes, waiter_record& out);

// One registration, removed by the destructor (and the registry directory
// with it when that was the last entry).
class waiter_registration {
 public:
  // Registers `rec` next to the lock at `lock_path`. Best effort: nullptr
  // when the registry cannot be written (permissions, a foreign file in the
  // way); waiting goes on unregistered. Also removes entries of this host's
  // dead waiters, which are the registry's own files.
  static std::unique_ptr<waiter_registration> add(const std::string& lock_path, const waiter_record& rec);
  ~waiter_registration();
  waiter_registration(const waiter_registration&) = delete;
  waiter_registration& operator=(const waiter_registration&) = delete;

 private:
  waiter_registration() = default;
  sys::fd parent_, dir_;
  std::string dir_name_, file_, shown_;
};

// Removes the entries of this host's dead waiters from the registry
// `dir_name` in `parent`, and the registry itself when that leaves it empty.
// Best effort; a waiter registering meanwhile makes the directory again.
void sweep_waiters(int parent, const std::string& dir_name, const std::string& lock_path);

// The live entries of the registry of the lock at `lock_path`, oldest first.
std::vector<waiter> read_waiters(const std::string& lock_path, std::int64_t now_ms);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_WAITERS_HPP
