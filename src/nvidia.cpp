// Parsing nvidia-smi's output and CUDA_VISIBLE_DEVICES (pure). See
// include/offload_lock/gpus.hpp.
#include "offload_lock/gpus.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "offload_lock/slots.hpp"

namespace offload_lock {

namespace {

// Bounds on what an untrusted nvidia-smi may make this process keep.
constexpr std::size_t max_name = 256;
constexpr std::size_t max_uuid = 96;
constexpr std::size_t max_processes = 4096;

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

// The fields between `sep`s, untrimmed (a name may hold the separator).
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type from = 0;
  for (;;) {
    auto at = s.find(sep, from);
    out.push_back(s.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

// Fields [from, to) joined again by `sep`, trimmed: a name holding commas.
std::string rejoin(const std::vector<std::string>& f, std::size_t from, std::size_t to, char sep) {
  std::string s = f[from];
  for (std::size_t k = from + 1; k < to; ++k) s += sep + f[k];
  return trim(s);
}

// A decimal number of at most `digits` digits; nullopt for [N/A] and junk.
std::optional<std::int64_t> number(const std::string& s, std::size_t digits = 12) {
  if (s.empty() || s.size() > digits || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(s);
}

std::optional<int> gpu_index(const std::string& s) {
  auto v = number(s, 4);
  if (!v || *v >= max_gpus) return std::nullopt;
  return static_cast<int>(*v);
}

// A UUID as nvidia-smi prints one: the prefix, then letters, digits, '-'.
bool valid_uuid(const std::string& s, const std::string& prefix) {
  return s.size() > prefix.size() && s.size() <= max_uuid && s.compare(0, prefix.size(), prefix) == 0 &&
         s.find_first_not_of("0123456789abcdefABCDEF-GIMPU/") == std::string::npos;
}

std::string bounded(std::string s) {
  if (s.size() > max_name) s.resize(max_name);
  return s;
}

gpu_device* find_index(std::vector<gpu_device>& gpus, int index) {
  for (auto& g : gpus)
    if (g.index == index) return &g;
  return nullptr;
}

bool has_index(const std::vector<gpu_device>& gpus, int index) {
  return std::any_of(gpus.begin(), gpus.end(), [&](const gpu_device& g) { return g.index == index; });
}

void sort_by_index(std::vector<gpu_device>& gpus) {
  std::sort(gpus.begin(), gpus.end(), [](const gpu_device& a, const gpu_device& b) { return a.index < b.index; });
}

bool starts_with_nocase(const std::string& s, const std::string& prefix) {
  if (prefix.size() > s.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(s[i]) != lower(prefix[i])) return false;
  }
  return true;
}

// "(UUID: X)" at the end of a -L line: X, or empty.
std::string uuid_at_end(const std::string& line, const std::string& prefix, std::string* before = nullptr) {
  const std::string marker = " (UUID: ";
  const auto at = line.rfind(marker);
  if (at == std::string::npos || line.empty() || line.back() != ')') return {};
  std::string uuid = line.substr(at + marker.size(), line.size() - 1 - at - marker.size());
  if (!valid_uuid(uuid, prefix)) return {};
  if (before) *before = line.substr(0, at);
  return uuid;
}

}  // namespace

std::vector<gpu_device> parse_gpu_list(const std::string& text) {
  std::vector<gpu_device> gpus;
  gpu_device* last = nullptr;
  for (const std::string& raw : lines_of(text)) {
    const std::string line = trim(raw);
    if (line.rfind("MIG ", 0) == 0) {
      const std::string mig = uuid_at_end(line, "MIG-");
      if (last && !mig.empty() && last->mig_uuids.size() < 64) last->mig_uuids.push_back(mig);
      continue;
    }
    last = nullptr;
    if (line.rfind("GPU ", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    auto index = gpu_index(line.substr(4, colon - 4));
    if (!index || find_index(gpus, *index) || gpus.size() >= static_cast<std::size_t>(max_gpus)) continue;
    gpu_device g;
    g.index = *index;
    std::string head;
    g.uuid = uuid_at_end(line, "GPU-", &head);
    g.name = bounded(trim(g.uuid.empty() ? line.substr(colon + 1) : head.substr(colon + 1)));
    gpus.push_back(std::move(g));
    last = &gpus.back();
  }
  sort_by_index(gpus);
  return gpus;
}

void merge_gpu_query(std::vector<gpu_device>& gpus, const std::string& text) {
  for (const std::string& line : lines_of(text)) {
    // index, uuid, name, memory.used, memory.total, utilization.gpu; a name
    // holding commas is everything between the uuid and the last three.
    auto f = split(line, ',');
    if (f.size() < 6) continue;
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, f.size() - 3, f.size() - 2, f.size() - 1}) f[k] = trim(f[k]);
    auto index = gpu_index(f[0]);
    if (!index) continue;
    gpu_device* g = find_index(gpus, *index);
    if (!g) {
      if (gpus.size() >= static_cast<std::size_t>(max_gpus)) continue;
      gpus.push_back(gpu_device{});
      g = &gpus.back();
      g->index = *index;
    }
    const std::size_t n = f.size();
    if (g->uuid.empty() && valid_uuid(f[1], "GPU-")) g->uuid = f[1];
    if (g->name.empty()) g->name = bounded(rejoin(f, 2, n - 3, ','));
    g->memory_used_mib = number(f[n - 3]);
    g->memory_total_mib = number(f[n - 2]);
    auto util = number(f[n - 1], 3);
    g->utilization_pct = util && *util <= 100 ? std::optional<int>(static_cast<int>(*util)) : std::nullopt;
  }
  sort_by_index(gpus);
}

void merge_apps_query(std::vector<gpu_device>& gpus, const std::string& text) {
  for (const std::string& line : lines_of(text)) {
    // gpu_uuid, pid, process_name, used_memory; the name may hold commas.
    auto f = split(line, ',');
    if (f.size() < 4) continue;
    for (std::size_t k : {std::size_t{0}, std::size_t{1}, f.size() - 1}) f[k] = trim(f[k]);
    auto pid = number(f[1], 10);
    if (!pid || *pid <= 0 || *pid > 2147483647) continue;
    gpu_device* g = nullptr;
    for (auto& d : gpus)
      if (!d.uuid.empty() && d.uuid == f[0]) g = &d;
    if (!g || g->processes.size() >= max_processes) continue;
    gpu_process p;
    p.pid = *pid;
    p.name = bounded(rejoin(f, 2, f.size() - 1, ','));
    p.memory_mib = number(f.back());
    g->processes.push_back(std::move(p));
  }
}

visible_devices parse_visible_devices(const std::string& value, const std::optional<std::vector<gpu_device>>& known) {
  visible_devices v;
  if (trim(value).empty()) return v;
  for (const std::string& raw : split(value, ',')) {
    const std::string entry = trim(raw);
    int index = -1;
    std::string mig;
    if (auto i = gpu_index(entry)) {
      if (!known || has_index(*known, *i)) index = *i;
    } else if (known && entry.size() > 4 && (starts_with_nocase(entry, "GPU-") || starts_with_nocase(entry, "MIG-"))) {
      // A unique prefix of one GPU's (or one MIG device's) UUID.
      const bool is_mig = starts_with_nocase(entry, "MIG-");
      int matches = 0;
      for (const auto& g : *known) {
        if (!is_mig && starts_with_nocase(g.uuid, entry)) {
          ++matches;
          index = g.index;
        }
        if (!is_mig) continue;
        for (const auto& m : g.mig_uuids)
          if (starts_with_nocase(m, entry)) {
            ++matches;
            index = g.index;
            mig = m;
          }
      }
      if (matches != 1) index = -1;
    }
    if (index < 0) {
      v.ignored = entry;
      break;
    }
    if (std::find(v.indices.begin(), v.indices.end(), index) != v.indices.end()) continue;
    v.indices.push_back(index);
    v.mig.push_back(mig);
  }
  return v;
}

std::string describe_mib(std::int64_t mib) {
  if (mib < 1024) return std::to_string(mib) + " MiB";
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(mib) / 1024.0);
  return buf;
}

}  // namespace offload_lock
