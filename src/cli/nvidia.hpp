// The machine's GPUs as nvidia-smi reports them, and CUDA_VISIBLE_DEVICES.
// Pure parsers of nvidia-smi's output (`-L` and the two CSV queries) and of
// a CUDA_VISIBLE_DEVICES list, read as CUDA reads it. nvidia-smi's output is
// untrusted: every field is checked and bounded, nothing is thrown.
#ifndef OFFLOAD_LOCK_SRC_CLI_NVIDIA_HPP
#define OFFLOAD_LOCK_SRC_CLI_NVIDIA_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offload_lock::cli {

// A process nvidia-smi lists as a compute app of a GPU.
struct gpu_process {
  std::int64_t pid = 0;
  std::string name;                       // as nvidia-smi gives it: escape before printing
  std::optional<std::int64_t> memory_mib;  // nullopt: not reported ([N/A])
  bool holds_lock = false;                 // filled in by the status board, not by nvidia-smi
};

// One GPU. `index` is nvidia-smi's, which is PCI bus order: slot k is the
// GPU whose index is k.
struct gpu_device {
  int index = 0;
  std::string uuid;  // "GPU-…"; empty when unknown
  std::string name;  // "NVIDIA GeForce RTX 4090"; escape before printing
  std::vector<std::string> mig_uuids;  // its MIG devices ("MIG-…"), from `-L`
  // From --query-gpu; nullopt when not asked for or not reported.
  std::optional<std::int64_t> memory_used_mib, memory_total_mib;
  std::optional<int> utilization_pct;
  std::vector<gpu_process> processes;  // from --query-compute-apps
};

// The field lists the two queries ask for, in nvidia-smi's own names.
inline constexpr const char* query_gpu_fields = "index,uuid,name,memory.used,memory.total,utilization.gpu";
inline constexpr const char* query_apps_fields = "gpu_uuid,pid,process_name,used_memory";

// `nvidia-smi -L`: "GPU 0: NAME (UUID: GPU-…)" lines, each possibly
// followed by indented "MIG … (UUID: MIG-…)" lines. Other lines, malformed
// ones and duplicate indices are skipped. Sorted by index.
std::vector<gpu_device> parse_gpu_list(const std::string& text);

// `nvidia-smi --query-gpu=<query_gpu_fields> --format=csv,noheader,nounits`:
// fills memory and utilization of the devices in `gpus` with the same
// index (adding devices `-L` did not list, and their uuid and name when
// `-L` gave none).
void merge_gpu_query(std::vector<gpu_device>& gpus, const std::string& text);

// `nvidia-smi --query-compute-apps=<query_apps_fields> --format=csv,noheader,nounits`:
// appends each process to the device with its uuid; lines naming no known
// device are dropped.
void merge_apps_query(std::vector<gpu_device>& gpus, const std::string& text);

// A CUDA_VISIBLE_DEVICES value read as CUDA reads it: a comma-separated
// list of device indices, GPU-… UUIDs or MIG-… UUIDs (a unique prefix is
// enough); the first entry that names no device ends the list, and that
// entry and the ones after it are ignored. An empty value hides every GPU.
// An index is nvidia-smi's index (PCI bus order, as CUDA_DEVICE_ORDER=
// PCI_BUS_ID counts).
struct visible_devices {
  std::vector<int> indices;  // the GPUs allowed, in list order, each once
  // For each entry of `indices`, the text CUDA should be given for it when
  // it is a MIG device (so CMD stays inside the slice it was allowed);
  // empty for a whole GPU.
  std::vector<std::string> mig;
  std::string ignored;  // the first entry that names no device, if any
};
// `known`: the GPUs nvidia-smi listed, or nullopt when it could not be
// asked (then indices are taken as given and UUIDs name nothing).
visible_devices parse_visible_devices(const std::string& value, const std::optional<std::vector<gpu_device>>& known);

// "5.1 GiB", "812 MiB": a size given in MiB, for people.
std::string describe_mib(std::int64_t mib);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_NVIDIA_HPP
