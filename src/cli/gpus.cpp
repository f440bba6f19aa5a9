// GPU slots on the command line. See gpus.hpp.
#include "cli/gpus.hpp"

#include <algorithm>

#include "cli/names.hpp"
#include "cli/output.hpp"
#include "offload_lock/lock.hpp"
#include "posix/command.hpp"
#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

// nvidia-smi answers in well under a second; one that hangs (a wedged
// driver) must not hang the command with it.
constexpr std::int64_t nvidia_smi_ms = 5'000;
constexpr std::size_t nvidia_smi_bytes = 1 << 20;

std::optional<std::string> nvidia_smi(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"nvidia-smi"};
  argv.insert(argv.end(), args.begin(), args.end());
  return os::read_command(argv, nvidia_smi_bytes, nvidia_smi_ms);
}

// GPUs on this machine for --gpus auto: one past nvidia-smi's highest index,
// else the driver's entries; 0 when neither finds any.
int count_gpus() {
  const auto& gpus = machine_gpus();
  if (gpus && !gpus->empty()) return std::min(max_gpus, gpus->back().index + 1);
  if (auto names = os::list_names("/proc/driver/nvidia/gpus")) return std::min(max_gpus, static_cast<int>(names->size()));
  return 0;
}

std::string list_text(const std::vector<int>& ks) {
  if (ks.empty()) return "no GPU";
  std::string s = ks.size() == 1 ? "GPU " : "GPUs ";
  for (std::size_t i = 0; i < ks.size(); ++i) s += (i ? ", " : "") + std::to_string(ks[i]);
  return s;
}

bool takes_a_slot(const std::string& command) { return command == "acquire" || command == "run" || command == "hold"; }

}  // namespace

const std::optional<std::vector<gpu_device>>& machine_gpus() {
  static const std::optional<std::vector<gpu_device>> gpus = []() -> std::optional<std::vector<gpu_device>> {
    auto out = nvidia_smi({"-L"});
    if (!out) return std::nullopt;
    return parse_gpu_list(*out);
  }();
  return gpus;
}

std::optional<std::vector<gpu_device>> gpu_usage() {
  auto q = nvidia_smi({std::string("--query-gpu=") + query_gpu_fields, "--format=csv,noheader,nounits"});
  if (!q) return std::nullopt;
  std::vector<gpu_device> gpus;
  merge_gpu_query(gpus, *q);
  if (auto apps = nvidia_smi({std::string("--query-compute-apps=") + query_apps_fields, "--format=csv,noheader,nounits"}))
    merge_apps_query(gpus, *apps);
  return gpus;
}

gpu_plan plan_gpus(const args& a, std::string& usage_error) {
  gpu_plan p;
  p.slotted = a.gpus > 1 || a.gpus_auto || a.gpu >= 0;
  p.count = a.gpus;
  p.gpu = a.gpu;
  if (a.gpus_auto) {
    p.count = count_gpus();
    if (p.count == 0) {
      if (!a.quiet) say("no GPU found (nvidia-smi -L lists none, or cannot be run): --gpus auto uses one slot, slot 0");
      p.count = 1;
    }
  }
  const auto visible = os::get_env(env_cuda_devices);
  if (!p.slotted || !takes_a_slot(a.command) || !visible) return p;

  // The caller may use only the GPUs its CUDA_VISIBLE_DEVICES names: the
  // slots of those GPUs, whatever position they have in the list.
  const visible_devices v = parse_visible_devices(*visible, machine_gpus());
  const std::string shown = "CUDA_VISIBLE_DEVICES=" + *visible;
  std::string ignored;
  if (!v.ignored.empty())
    ignored = "'" + v.ignored + "' names no GPU of this machine" +
              (machine_gpus() ? "" : " (nvidia-smi cannot be run to list them)") +
              "; CUDA ignores it and the entries after it, and so does offload-lock";
  if (p.gpu >= 0) {
    auto at = std::find(v.indices.begin(), v.indices.end(), p.gpu);
    if (at != v.indices.end()) {
      p.allowed = {p.gpu};
      p.mig = {v.mig[static_cast<std::size_t>(at - v.indices.begin())]};
    } else {
      usage_error = "--gpu " + std::to_string(p.gpu) + " is outside " + shown + ", which allows " + list_text(v.indices);
    }
  } else {
    for (std::size_t i = 0; i < v.indices.size(); ++i)
      if (v.indices[i] < p.count) {
        p.allowed.push_back(v.indices[i]);
        p.mig.push_back(v.mig[i]);
      }
    if (p.allowed.empty())
      usage_error = shown + " allows " + list_text(v.indices) + ", none of the " + std::to_string(p.count) +
                    " GPU slots (0 to " + std::to_string(p.count - 1) + ")";
  }
  // A usage error is one line: the ignored entry is part of it.
  if (!usage_error.empty() && !ignored.empty()) usage_error += " (" + ignored + ")";
  else if (!ignored.empty() && !a.quiet) say(shown + ": " + ignored);
  return p;
}

int discover_slots(const std::string& path) {
  std::string parent, name;
  os::split_path(path, parent, name);
  auto names = os::list_names(parent);
  if (!names) return 1;
  int n = 1;
  const std::string prefix = name + ".gpu";
  for (const auto& e : *names) {
    if (e.size() <= prefix.size() || e.compare(0, prefix.size(), prefix) != 0) continue;
    std::string k = e.substr(prefix.size());
    if (k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos || k[0] == '0') continue;
    n = std::max(n, std::min(max_gpus, std::stoi(k) + 1));
  }
  return n;
}

std::vector<std::pair<std::string, std::string>> cuda_environment(const gpu_plan& plan, int k) {
  std::vector<std::pair<std::string, std::string>> env = {{env_lock_gpu, std::to_string(k)}};
  auto at = std::find(plan.allowed.begin(), plan.allowed.end(), k);
  if (at != plan.allowed.end() && !plan.mig[static_cast<std::size_t>(at - plan.allowed.begin())].empty()) {
    env.emplace_back(env_cuda_devices, plan.mig[static_cast<std::size_t>(at - plan.allowed.begin())]);
    return env;
  }
  if (const auto& gpus = machine_gpus())
    for (const auto& g : *gpus)
      if (g.index == k && !g.uuid.empty()) {
        env.emplace_back(env_cuda_devices, g.uuid);
        return env;
      }
  // No UUID to name it by: its index, counted in the same (PCI bus) order.
  env.emplace_back(env_cuda_devices, std::to_string(k));
  env.emplace_back(env_cuda_order, "PCI_BUS_ID");
  return env;
}

}  // namespace offload_lock::cli
