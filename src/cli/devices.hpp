// The GPU under each slot of the status board: memory, utilization, and who
// uses it, with or without the slot's lock.
// Text, JSON and Prometheus forms of one slot's device, next to its lock's.
#ifndef OFFLOAD_LOCK_SRC_CLI_DEVICES_HPP
#define OFFLOAD_LOCK_SRC_CLI_DEVICES_HPP

#include <optional>
#include <string>
#include <vector>

#include "offload_lock/gpus.hpp"
#include "cli/output.hpp"
#include "offload_lock/inspect.hpp"

namespace offload_lock::cli {

// The device of slot k among `gpus` (nvidia-smi's GPU k), its processes
// marked holds_lock when they are the slot's holder or one of its
// descendants (a shell under `acquire`, CMD's children under `run`);
// nullopt when nvidia-smi did not report GPU k.
std::optional<gpu_device> device_of_slot(const std::optional<std::vector<gpu_device>>& gpus, int k, const info& slot);

// Lines under the slot's status line, each ending in '\n', escaped:
//   "  GPU 0 (NAME): 5.1 GiB of 24.0 GiB used, 37% busy"
//   "    render (pid 4534) uses 4.0 GiB on GPU 0, holding the lock"
//   "    llama-swap (pid 77) uses 5.1 GiB on GPU 0 without the lock"
std::string device_text(const gpu_device& d);

// null, or {index, uuid, name, memoryUsedMiB, memoryTotalMiB,
// utilizationPct, processes: [{pid, name, memoryMiB, holdsLock}]}.
ojson device_json(const std::optional<gpu_device>& d);

// The processes on the device that do not hold its slot's lock.
int unlocked_processes(const gpu_device& d);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_DEVICES_HPP
