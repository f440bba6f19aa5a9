// Lock path resolution (doc/protocol.md A1). Pure string work: the file system is
// not consulted, so every participant's rule can be checked side by side.
#include "offload_lock/path.hpp"

#include "os/process.hpp"

#include <vector>

namespace offload_lock {

const char* to_string(path_rule rule) noexcept {
  switch (rule) {
    case path_rule::override_path: return "override";
    case path_rule::gpu_lock_env: return "GPU_LOCK";
    case path_rule::tmpdir_env: return "TMPDIR";
    case path_rule::tmp_env: return "TMP";
    case path_rule::temp_env: return "TEMP";
    case path_rule::default_tmp: return "default";
  }
  return "?";
}

std::string clean_path(std::string_view p) {
  if (p.empty()) return ".";
  bool absolute = p.front() == '/';
  std::vector<std::string_view> parts;
  std::size_t i = 0;
  while (i <= p.size()) {
    std::size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    std::string_view part = p.substr(i, j - i);
    if (part.empty() || part == ".") {
      // skip
    } else if (part == "..") {
      if (!parts.empty() && parts.back() != "..") parts.pop_back();
      else if (!absolute) parts.push_back(part);
    } else {
      parts.push_back(part);
    }
    i = j + 1;
  }
  // Nothing left is "/" or ".". Returned here rather than assigned to an
  // empty result later: GCC 12 reads `out = "."` after the appends as a
  // possibly overlapping copy and warns (-Wrestrict).
  if (parts.empty()) return absolute ? "/" : ".";
  std::string out = absolute ? "/" : "";
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (k) out += '/';
    out += parts[k];
  }
  return out;
}

path_resolution resolve_path(std::string_view override_path, const env_lookup& env) {
  auto nonempty = [&](const char* name) -> std::optional<std::string> {
    auto v = env(name);
    if (v && !v->empty()) return v;
    return std::nullopt;
  };
  auto join = [](const std::string& dir) { return clean_path(dir + "/" + default_lock_name); };

  // Go: os.TempDir() is TMPDIR or /tmp, joined with filepath.Join (which
  // cleans); GPU_LOCK and the override are taken as they are.
  path_resolution r;
  auto gpu_lock = nonempty("GPU_LOCK");
  auto tmpdir = nonempty("TMPDIR");
  r.go_path = join(tmpdir ? *tmpdir : "/tmp");

  if (!override_path.empty()) {
    r.path = std::string(override_path);
    r.rule = path_rule::override_path;
    r.go_path = r.path;  // the pipeline hands the same override to its readers
    return r;
  }
  if (gpu_lock) {
    r.path = *gpu_lock;
    r.rule = path_rule::gpu_lock_env;
    r.go_path = r.path;
    return r;
  }
  // Node: os.tmpdir() is the first non-empty of TMPDIR, TMP, TEMP, else /tmp.
  if (tmpdir) {
    r.path = join(*tmpdir);
    r.rule = path_rule::tmpdir_env;
  } else if (auto tmp = nonempty("TMP")) {
    r.path = join(*tmp);
    r.rule = path_rule::tmp_env;
  } else if (auto temp = nonempty("TEMP")) {
    r.path = join(*temp);
    r.rule = path_rule::temp_env;
  } else {
    r.path = join("/tmp");
    r.rule = path_rule::default_tmp;
  }
  return r;
}

path_resolution resolve_path(std::string_view override_path) {
  return resolve_path(override_path, detail::sys::get_env);
}

}  // namespace offload_lock
