// The environment variables the command sets for CMD and reads back.
// `run` sets them for CMD; a command CMD starts reads them (doc/protocol.md B11).
#ifndef OFFLOAD_LOCK_SRC_CLI_NAMES_HPP
#define OFFLOAD_LOCK_SRC_CLI_NAMES_HPP

namespace offload_lock::cli {

// The lock (slot) path CMD runs under.
inline constexpr const char* env_lock_path = "OFFLOAD_LOCK_PATH";
// The token of the lock CMD runs under; the library passes a nested
// acquisition of that lock straight through.
inline constexpr const char* env_lock_token = "OFFLOAD_LOCK_TOKEN";
// The CUDA devices CMD may use: the slot's device. Read from the command's
// own environment, a list of the GPUs it may take.
inline constexpr const char* env_cuda_devices = "CUDA_VISIBLE_DEVICES";
// How CUDA numbers devices; set to PCI_BUS_ID when CMD is given an index.
inline constexpr const char* env_cuda_order = "CUDA_DEVICE_ORDER";
// The slot (GPU index) CMD runs on.
inline constexpr const char* env_lock_gpu = "OFFLOAD_LOCK_GPU";

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_NAMES_HPP
