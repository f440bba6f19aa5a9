// Asking the machine about its GPUs: nvidia-smi (with a time limit), the
// driver's entries, the slots beside a lock, CUDA_VISIBLE_DEVICES. See
// include/offload_lock/gpus.hpp.
#include <algorithm>

#include "offload_lock/gpus.hpp"
#include "offload_lock/slots.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/programs.hpp"

namespace offload_lock {

namespace {

namespace sys = detail::sys;

// What an untrusted nvidia-smi may make this process keep.
constexpr std::size_t nvidia_smi_bytes = 1 << 20;

std::optional<std::string> nvidia_smi(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"nvidia-smi"};
  argv.insert(argv.end(), args.begin(), args.end());
  return sys::read_command(argv, nvidia_smi_bytes, nvidia_smi_timeout_ms);
}

std::optional<std::vector<std::string>> names_in(const std::string& dir) {
  auto d = sys::open_dir(sys::cwd, dir, false, dir);
  if (!d) return std::nullopt;
  auto names = sys::list_dir(d->get(), dir);
  if (!names) return std::nullopt;
  return std::move(*names);
}

}  // namespace

const std::optional<std::vector<gpu_device>>& machine_gpus() {
  // A function-local static: asked once, thread-safe by the language.
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

bool in_process_tree(std::int64_t pid, std::int64_t root) {
  constexpr int max_ancestry = 64;
  if (root <= 0) return false;
  for (int depth = 0; pid > 1 && depth < max_ancestry; ++depth) {
    if (pid == root) return true;
    auto parent = sys::parent_of(pid);
    if (!parent || *parent == pid) return false;
    pid = *parent;
  }
  return false;
}

bool shows_idle(const gpu_device& d, const std::vector<std::int64_t>& holders, int busy_percent) {
  if (!d.utilization_pct || *d.utilization_pct > busy_percent) return false;
  for (const auto& p : d.processes)
    for (std::int64_t h : holders)
      if (in_process_tree(p.pid, h)) return false;
  return true;
}

int count_gpus() {
  const auto& gpus = machine_gpus();
  if (gpus && !gpus->empty()) return std::min(max_gpus, gpus->back().index + 1);
  if (auto names = names_in("/proc/driver/nvidia/gpus")) return std::min(max_gpus, static_cast<int>(names->size()));
  return 0;
}

int discover_slots(const std::string& path) {
  std::string parent, name;
  sys::split_path(path, parent, name);
  auto names = names_in(parent);
  if (!names) return 1;
  int n = 1;
  const std::string prefix = name + ".gpu";
  for (const auto& e : *names) {
    if (e.size() <= prefix.size() || e.compare(0, prefix.size(), prefix) != 0) continue;
    std::string k = e.substr(prefix.size());
    if (k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos || k[0] == '0') continue;
    // Only a directory can be a slot's lock: a file planted under that
    // name is no GPU slot.
    if (auto st = sys::stat_at(sys::cwd, parent + "/" + e, e); !st || !st->is_dir) continue;
    n = std::max(n, std::min(max_gpus, std::stoi(k) + 1));
  }
  return n;
}

std::optional<visible_devices> visible_gpus() {
  const auto value = sys::get_env("CUDA_VISIBLE_DEVICES");
  if (!value) return std::nullopt;
  return parse_visible_devices(*value, machine_gpus());
}

namespace {

std::string list_text(const std::vector<int>& ks) {
  if (ks.empty()) return "no GPU";
  std::string s = ks.size() == 1 ? "GPU " : "GPUs ";
  for (std::size_t i = 0; i < ks.size(); ++i) s += (i ? ", " : "") + std::to_string(ks[i]);
  return s;
}

}  // namespace

slot_choice choose_slots(int count, int gpu, const std::optional<visible_devices>& visible, const std::string& shown) {
  slot_choice c;
  c.gpu = gpu;
  if (!visible) return c;
  const visible_devices& v = *visible;
  if (!v.ignored.empty())
    c.note = "'" + v.ignored + "' names no GPU of this machine" +
             (machine_gpus() ? "" : " (nvidia-smi cannot be run to list them)") +
             "; CUDA ignores it and the entries after it, and so does offload-lock";
  if (gpu >= 0) {
    auto at = std::find(v.indices.begin(), v.indices.end(), gpu);
    if (at != v.indices.end()) {
      c.allowed = {gpu};
      c.mig = {v.mig[static_cast<std::size_t>(at - v.indices.begin())]};
    } else {
      c.problem = "--gpu " + std::to_string(gpu) + " is outside " + shown + ", which allows " + list_text(v.indices);
    }
  } else {
    for (std::size_t i = 0; i < v.indices.size(); ++i)
      if (v.indices[i] < count) {
        c.allowed.push_back(v.indices[i]);
        c.mig.push_back(v.mig[i]);
      }
    if (c.allowed.empty())
      c.problem = shown + " allows " + list_text(v.indices) + ", none of the " + std::to_string(count) +
                  " GPU slots (0 to " + std::to_string(count - 1) + ")";
    // One slot allowed: that one. All of them: no restriction.
    else if (c.allowed.size() == 1) c.gpu = c.allowed.front();
  }
  // A problem is one line: the ignored entry is part of it.
  if (!c.problem.empty() && !c.note.empty()) {
    c.problem += " (" + c.note + ")";
    c.note.clear();
  }
  return c;
}

}  // namespace offload_lock
