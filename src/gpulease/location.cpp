// Placing the gpulease lease. See location.hpp.
#include "gpulease/location.hpp"

#include <array>
#include <string_view>

#include "gpulease/record.hpp"
#include "offload_lock/path.hpp"
#include "os/cwd.hpp"
#include "os/process.hpp"

namespace offload_lock::detail::gpulease {

std::string heartbeat_name(std::uint64_t epoch) { return "hb." + std::to_string(epoch); }
std::string unloaded_name(std::uint64_t epoch) { return "unloaded." + std::to_string(epoch); }

bool is_gpulease_name(const std::string& name) {
  return name.rfind("hb.", 0) == 0 || name.rfind("unloaded.", 0) == 0 || name.rfind(".writeprobe-", 0) == 0;
}

const char* to_string(lease_source s) noexcept {
  switch (s) {
    case lease_source::explicit_dir: return "explicit";
    case lease_source::gpu_lock: return env_gpu_lock;
    case lease_source::lease_root: return env_lease_root;
    case lease_source::state_dir: return env_state_dir;
    case lease_source::default_root: return "default";
  }
  return "?";
}

namespace {

// Go's filepath.Abs: joined to the working directory when relative, then
// cleaned.
std::string absolute(const std::string& p, const std::string& cwd) {
  if (!p.empty() && p.front() != '/' && !cwd.empty()) return clean_path(cwd + "/" + p);
  return clean_path(p);
}

// Go's filepath.Dir of a cleaned path.
std::string parent_of(const std::string& p) {
  const auto slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::optional<std::string> trimmed(const std::optional<std::string>& v) {
  if (!v) return std::nullopt;
  std::string t(trim_space(*v));
  if (t.empty()) return std::nullopt;
  return t;
}

}  // namespace

lease_location resolve_lease(const lease_inputs& in) {
  lease_location loc;
  auto direct = [&](const std::string& dir, lease_source s) {
    loc.dir = absolute(dir, in.cwd);
    loc.source = s;
  };
  auto under_root = [&](const std::string& root, lease_source s) {
    loc.root = absolute(root, in.cwd);
    loc.dir = clean_path(loc.root + "/gpu/lease");
    loc.source = s;
  };
  if (auto v = trimmed(in.explicit_dir))
    direct(*v, lease_source::explicit_dir);
  else if (auto g = trimmed(in.gpu_lock))
    direct(*g, lease_source::gpu_lock);
  else if (auto r = trimmed(in.lease_root))
    under_root(*r, lease_source::lease_root);
  else if (auto s = trimmed(in.state_dir))
    under_root(*s, lease_source::state_dir);
  else
    under_root(default_state_root, lease_source::default_root);
  loc.gpu_dir = parent_of(loc.dir);
  loc.refused = sync_root_reason(loc.root.empty() ? loc.dir : loc.root);
  if (loc.refused.empty()) loc.refused = sync_root_reason(loc.dir);
  return loc;
}

lease_inputs lease_inputs_from_environment(const std::optional<std::string>& explicit_dir) {
  lease_inputs in;
  in.explicit_dir = explicit_dir;
  in.gpu_lock = sys::get_env(env_gpu_lock);
  in.lease_root = sys::get_env(env_lease_root);
  in.state_dir = sys::get_env(env_state_dir);
  // The working directory matters only to a relative path (and asking
  // costs a system call on every acquisition): left empty when every path
  // given is absolute, as the default root is.
  bool relative = false;
  for (const auto* v : {&in.explicit_dir, &in.gpu_lock, &in.lease_root, &in.state_dir})
    if (auto t = trimmed(*v); t && t->front() != '/') relative = true;
  if (relative) in.cwd = sys::current_directory().value_or("");
  return in;
}

std::string sync_root_reason(const std::string& path) {
  // The folders of cloud-sync clients gpulease refuses: whole segments, and
  // prefixes that vendors decorate ("OneDrive - Contoso", "Dropbox (Personal)").
  static const std::array<std::string_view, 10> exact = {"my drive", "google drive", "googledrive", "shared drives",
                                                         "box sync", "nextcloud",    "owncloud",    "syncthing",
                                                         "pcloud",   "mega"};
  static const std::array<std::string_view, 3> prefixes = {"onedrive", "dropbox", "icloud"};
  std::size_t i = 0;
  while (i <= path.size()) {
    std::size_t j = path.find_first_of("/\\", i);
    if (j == std::string::npos) j = path.size();
    std::string seg(trim_space(std::string_view(path).substr(i, j - i)));
    for (char& c : seg)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    i = j + 1;
    if (seg.empty()) continue;
    for (auto m : exact)
      if (seg == m) return "path segment \"" + seg + "\" is a cloud-sync root";
    for (auto m : prefixes) {
      if (seg.compare(0, m.size(), m) != 0) continue;
      const std::string rest = seg.substr(m.size());
      if (rest.empty() || rest[0] == ' ' || rest[0] == '(' || rest == "drive")
        return "path segment \"" + seg + "\" is a cloud-sync root";
    }
  }
  return {};
}

}  // namespace offload_lock::detail::gpulease
