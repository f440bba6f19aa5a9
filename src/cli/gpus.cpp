// GPU slots on the command line. See gpus.hpp.
#include "cli/gpus.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

#include "cli/names.hpp"
#include "offload_lock/lock.hpp"
#include "posix/command.hpp"
#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

// GPUs on this machine for --gpus auto; 1 when neither the driver nor
// nvidia-smi finds any.
int detect_gpus() {
  int n = 0;
  if (auto names = os::list_names("/proc/driver/nvidia/gpus")) n = static_cast<int>(names->size());
  if (n > 0) return std::min(n, max_gpus);
  if (auto out = os::read_command({"nvidia-smi", "-L"}, 1 << 20, 10'000)) {
    std::stringstream lines(*out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("GPU ", 0) == 0) ++n;
  }
  return n > 0 ? std::min(n, max_gpus) : 1;
}

}  // namespace

gpu_plan plan_gpus(const args& a) {
  gpu_plan p;
  p.slotted = a.gpus > 1 || a.gpus_auto || a.gpu >= 0;
  p.count = a.gpus_auto ? detect_gpus() : a.gpus;
  p.gpu = a.gpu;
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

std::string cuda_device(int k) {
  auto v = os::get_env(env_cuda_devices);
  if (v && !v->empty()) {
    std::vector<std::string> items;
    std::stringstream ss(*v);
    for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
    if (k < static_cast<int>(items.size())) return items[static_cast<std::size_t>(k)];
  }
  return std::to_string(k);
}

}  // namespace offload_lock::cli
