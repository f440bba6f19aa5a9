// GPU slots on the command line, resolved once per command.
// How many slots a command uses (--gpus N, --gpus auto, --gpu K), which of
// them CUDA_VISIBLE_DEVICES allows, the slots that exist next to a lock,
// and what CMD is told about the GPU of the slot it got. Slot k is the
// machine's GPU k in nvidia-smi's order (PCI bus order), whoever asks.
#ifndef OFFLOAD_LOCK_SRC_CLI_GPUS_HPP
#define OFFLOAD_LOCK_SRC_CLI_GPUS_HPP

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.hpp"
#include "offload_lock/gpus.hpp"

namespace offload_lock::cli {

// The slots of one command, resolved once: it may run nvidia-smi.
struct gpu_plan {
  bool slotted = false;  // the command line asked for GPU slots at all
  int count = 1;         // --gpus N, or the GPUs --gpus auto found (1 when none)
  int gpu = -1;          // --gpu K; -1 for any slot
  // The slots among 0..count-1 this command may take (acquire, run, hold
  // under a CUDA_VISIBLE_DEVICES list); empty: every one.
  std::vector<int> allowed;
  // For each slot CMD may get, a MIG device to name instead of the whole
  // GPU (CUDA_VISIBLE_DEVICES named one); parallel to `allowed`.
  std::vector<std::string> mig;
};

// The plan of `a`. With --gpus auto, counts the GPUs (the library's
// count_gpus()); with none, says so on
// stderr and uses one slot. For acquire, run and hold, CUDA_VISIBLE_DEVICES
// restricts the slots. A usage error (a --gpu K outside that list, a list
// that allows none of the slots) is returned in `usage_error`.
gpu_plan plan_gpus(const args& a, std::string& usage_error);

// What CMD of `run` is told about slot k's GPU: CUDA_VISIBLE_DEVICES naming
// that physical GPU (its UUID; else its index with CUDA_DEVICE_ORDER=
// PCI_BUS_ID) and OFFLOAD_LOCK_GPU=k.
std::vector<std::pair<std::string, std::string>> cuda_environment(const gpu_plan& plan, int k);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_GPUS_HPP
