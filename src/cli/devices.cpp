// The GPU under each slot of the status board. See devices.hpp.
#include "cli/devices.hpp"

#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

// The name to show for a process: nvidia-smi's (a path: its last part),
// else the kernel's.
std::string shown_name(const gpu_process& p) {
  std::string n = p.name;
  if (auto slash = n.rfind('/'); slash != std::string::npos && slash + 1 < n.size()) n = n.substr(slash + 1);
  if (n.empty() || n == "[N/A]") n = os::command_name(p.pid).value_or("");
  return n.empty() ? "an unnamed process" : n;
}

ojson opt_number(const std::optional<std::int64_t>& v) { return v ? ojson(*v) : ojson(); }

}  // namespace

std::optional<gpu_device> device_of_slot(const std::optional<std::vector<gpu_device>>& gpus, int k, const info& slot) {
  if (!gpus) return std::nullopt;
  for (const auto& g : *gpus) {
    if (g.index != k) continue;
    gpu_device d = g;
    const std::int64_t holder = slot.held && slot.pid ? *slot.pid : 0;
    for (auto& p : d.processes) p.holds_lock = in_process_tree(p.pid, holder);
    return d;
  }
  return std::nullopt;
}

std::string device_text(const gpu_device& d) {
  const std::string gpu = "GPU " + std::to_string(d.index);
  std::string head = "  " + gpu + (d.name.empty() ? "" : " (" + d.name + ")") + ": ";
  if (d.memory_used_mib && d.memory_total_mib)
    head += describe_mib(*d.memory_used_mib) + " of " + describe_mib(*d.memory_total_mib) + " used";
  else
    head += "memory not reported";
  if (d.utilization_pct) head += ", " + std::to_string(*d.utilization_pct) + "% busy";
  std::string out = printable(head) + "\n";
  for (const auto& p : d.processes) {
    const std::string uses = p.memory_mib ? describe_mib(*p.memory_mib) + " on " + gpu : gpu;
    out += printable("    " + shown_name(p) + " (pid " + std::to_string(p.pid) + ") uses " + uses +
                     (p.holds_lock ? ", holding the lock" : " without the lock")) +
           "\n";
  }
  return out;
}

ojson device_json(const std::optional<gpu_device>& d) {
  if (!d) return ojson();
  ojson j;
  j["index"] = d->index;
  j["uuid"] = d->uuid.empty() ? ojson() : ojson(d->uuid);
  j["name"] = d->name.empty() ? ojson() : ojson(d->name);
  j["memoryUsedMiB"] = opt_number(d->memory_used_mib);
  j["memoryTotalMiB"] = opt_number(d->memory_total_mib);
  j["utilizationPct"] = d->utilization_pct ? ojson(*d->utilization_pct) : ojson();
  ojson ps = ojson::array();
  for (const auto& p : d->processes) {
    ojson pj;
    pj["pid"] = p.pid;
    pj["name"] = p.name.empty() ? ojson() : ojson(p.name);
    pj["memoryMiB"] = opt_number(p.memory_mib);
    pj["holdsLock"] = p.holds_lock;
    ps.push_back(std::move(pj));
  }
  j["processes"] = std::move(ps);
  return j;
}

int unlocked_processes(const gpu_device& d) {
  int n = 0;
  for (const auto& p : d.processes) n += p.holds_lock ? 0 : 1;
  return n;
}

}  // namespace offload_lock::cli
