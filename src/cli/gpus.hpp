// GPU slots on the command line, resolved once per command.
// How many slots a command uses (--gpus N, --gpus auto, --gpu K), the slots
// that exist next to a lock, and the CUDA device of a slot.
#ifndef OFFLOAD_LOCK_SRC_CLI_GPUS_HPP
#define OFFLOAD_LOCK_SRC_CLI_GPUS_HPP

#include <string>

#include "cli/args.hpp"

namespace offload_lock::cli {

// The slots of one command, resolved once: --gpus auto may run nvidia-smi.
struct gpu_plan {
  bool slotted = false;  // the command line asked for GPU slots at all
  int count = 1;         // --gpus N, or the GPUs --gpus auto found (1 when none)
  int gpu = -1;          // --gpu K; -1 for any slot
};

// The plan of `a`. With --gpus auto, counts the GPUs: the NVIDIA driver's
// /proc/driver/nvidia/gpus entries, else the lines of `nvidia-smi -L`.
gpu_plan plan_gpus(const args& a);

// Slots that exist next to the lock at `path` (path.gpu<k>), and slot 0:
// how many `status` shows when no --gpus or --gpu says.
int discover_slots(const std::string& path);

// The CUDA device of slot k: the k-th entry of an inherited
// CUDA_VISIBLE_DEVICES list when there is one, else k.
std::string cuda_device(int k);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_GPUS_HPP
