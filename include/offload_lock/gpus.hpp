// The machine's GPUs: what nvidia-smi reports (the pure parsers of its
// `-L` output and of its two CSV queries), asking it (with a time limit),
// and CUDA_VISIBLE_DEVICES read as CUDA reads it. Slot k of a lock is the
// machine's GPU k in nvidia-smi's order (PCI bus order), whoever asks: the
// command, the C API and the bindings share these. nvidia-smi's output is
// untrusted: every field is checked and bounded, nothing is thrown.
#ifndef OFFLOAD_LOCK_GPUS_HPP
#define OFFLOAD_LOCK_GPUS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offload_lock/export.h"

namespace offload_lock {

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
OFFLOAD_LOCK_API std::vector<gpu_device> parse_gpu_list(const std::string& text);

// `nvidia-smi --query-gpu=<query_gpu_fields> --format=csv,noheader,nounits`:
// fills memory and utilization of the devices in `gpus` with the same
// index (adding devices `-L` did not list, and their uuid and name when
// `-L` gave none).
OFFLOAD_LOCK_API void merge_gpu_query(std::vector<gpu_device>& gpus, const std::string& text);

// `nvidia-smi --query-compute-apps=<query_apps_fields> --format=csv,noheader,nounits`:
// appends each process to the device with its uuid; lines naming no known
// device are dropped.
OFFLOAD_LOCK_API void merge_apps_query(std::vector<gpu_device>& gpus, const std::string& text);

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
OFFLOAD_LOCK_API visible_devices parse_visible_devices(const std::string& value, const std::optional<std::vector<gpu_device>>& known);

// "5.1 GiB", "812 MiB": a size given in MiB, for people.
OFFLOAD_LOCK_API std::string describe_mib(std::int64_t mib);

// ---- asking the machine ----

// How long one run of nvidia-smi may take: one that hangs (a wedged driver),
// or closes its output and stays, is killed then and counts as absent.
inline constexpr int nvidia_smi_timeout_ms = 5'000;

// The machine's GPUs from `nvidia-smi -L`, asked once per process and
// remembered; nullopt when nvidia-smi cannot be run, fails or times out.
// Blocks up to nvidia_smi_timeout_ms the first time. Thread-safe.
OFFLOAD_LOCK_API const std::optional<std::vector<gpu_device>>& machine_gpus();

// The GPUs with their memory, utilization and compute processes (the two
// --query-... forms of nvidia-smi), asked now; nullopt when nvidia-smi
// cannot be run or fails. Blocks up to twice nvidia_smi_timeout_ms.
OFFLOAD_LOCK_API std::optional<std::vector<gpu_device>> gpu_usage();

// How many GPUs this machine has, for `--gpus auto`: one past nvidia-smi's
// highest index, else the number of the driver's /proc/driver/nvidia/gpus
// entries; at most max_gpus; 0 when neither finds any. Blocks as
// machine_gpus().
OFFLOAD_LOCK_API int count_gpus();

// The GPU slots that exist next to the lock at `path` (path.gpu<k>), and
// slot 0: one past the highest found, at least 1, at most max_gpus. Reads
// the lock's parent directory; never blocks on the lock.
OFFLOAD_LOCK_API int discover_slots(const std::string& path);

// Whether process `pid` is `root` or descends from it (its parents read
// from /proc, at most 64 generations up); false when a parent cannot be
// read. How a GPU process is tied to a lock's holder.
OFFLOAD_LOCK_API bool in_process_tree(std::int64_t pid, std::int64_t root);

// Whether GPU `d` shows a holder idle: it lists no process that is one of
// `holders` or descends from one, and it reports a utilization of at most
// `busy_percent`. An unreported utilization is not idle (nothing is known).
// The site policy's idle rule (offload_lock/policy.hpp) applies this.
OFFLOAD_LOCK_API bool shows_idle(const gpu_device& d, const std::vector<std::int64_t>& holders, int busy_percent);

// This process's CUDA_VISIBLE_DEVICES, read as parse_visible_devices reads
// it against machine_gpus(); nullopt when the variable is not set (every
// GPU allowed). May run nvidia-smi (to resolve UUIDs).
OFFLOAD_LOCK_API std::optional<visible_devices> visible_gpus();

// The GPU slots of `count` an acquisition of this process may take, as
// the command chooses them for acquire, run and hold: unrestricted when
// `visible` is nullopt (CUDA_VISIBLE_DEVICES unset); else only the slots of
// the GPUs it names (slot k is GPU k), whatever their place in the list.
// `gpu` >= 0 asks for that slot only. `shown` names the restriction in
// messages ("CUDA_VISIBLE_DEVICES=1,3").
struct slot_choice {
  int gpu = -1;                  // the one slot to take; -1: any of `allowed`
  std::vector<int> allowed;      // the slots allowed, in list order; empty: every slot
  std::vector<std::string> mig;  // for each of `allowed`, its MIG device or ""
  std::string problem;           // non-empty: none can be taken (one line, why)
  std::string note;              // non-empty: an entry CUDA ignores, to say once
};
OFFLOAD_LOCK_API slot_choice choose_slots(int count, int gpu, const std::optional<visible_devices>& visible,
                                          const std::string& shown);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_GPUS_HPP
