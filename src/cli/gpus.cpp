// GPU slots on the command line. See gpus.hpp.
#include "cli/gpus.hpp"

#include <algorithm>

#include "cli/names.hpp"
#include "cli/output.hpp"
#include "offload_lock/lock.hpp"
#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

bool takes_a_slot(const std::string& command) { return command == "acquire" || command == "run" || command == "hold"; }

}  // namespace

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
  if (!p.slotted || !takes_a_slot(a.command)) return p;
  const auto visible_value = os::get_env(env_cuda_devices);
  const auto visible = visible_gpus();
  if (!visible || !visible_value) return p;

  // The caller may use only the GPUs its CUDA_VISIBLE_DEVICES names: the
  // library's choice, as every binding makes it.
  const slot_choice c = choose_slots(p.count, p.gpu, visible, "CUDA_VISIBLE_DEVICES=" + *visible_value);
  p.allowed = c.allowed;
  p.mig = c.mig;
  usage_error = c.problem;
  if (!c.note.empty() && !a.quiet) say("CUDA_VISIBLE_DEVICES=" + *visible_value + ": " + c.note);
  return p;
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
