// Where the lock lives: the path rules every participant must agree on
// (doc/protocol.md A1), and a report of when the Go readers would look elsewhere.
#ifndef OFFLOAD_LOCK_PATH_HPP
#define OFFLOAD_LOCK_PATH_HPP

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "offload_lock/export.h"

namespace offload_lock {

// The basename of the default lock directory under the temporary directory.
inline constexpr const char* default_lock_name = "local-offload-gpu.lock";

// Which rule chose the path.
enum class path_rule {
  override_path,  // an explicit path from the caller (--lock, a config field)
  gpu_lock_env,   // the GPU_LOCK environment variable
  tmpdir_env,     // <TMPDIR>/local-offload-gpu.lock
  tmp_env,        // <TMP>/... (TMPDIR empty or unset): Go does not read TMP
  temp_env,       // <TEMP>/... (TMPDIR and TMP empty or unset): Go does not read TEMP
  default_tmp,    // /tmp/local-offload-gpu.lock
};

OFFLOAD_LOCK_API const char* to_string(path_rule rule) noexcept;

struct path_resolution {
  std::string path;     // the path offload-lock and the Node runners use
  path_rule rule{};     // which rule chose it
  std::string go_path;  // the path a Go reader (os.TempDir) resolves from the same input
  // True when the Go readers would look at another directory, so they would
  // silently stop seeing this lock (doc/protocol.md D7).
  bool go_disagrees() const { return go_path != path; }
};

// Reads one environment variable; returns nullopt when unset.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

// Resolves the lock path exactly as the Node runners do: a non-empty
// override, else a non-empty GPU_LOCK, else the first non-empty of TMPDIR,
// TMP, TEMP (else /tmp) joined with default_lock_name and cleaned lexically
// like Node's path.join. Pure: does not touch the file system. The overload
// without `env` reads the process environment (getenv; not thread-safe
// against concurrent setenv, like getenv itself).
OFFLOAD_LOCK_API path_resolution resolve_path(std::string_view override_path, const env_lookup& env);
OFFLOAD_LOCK_API path_resolution resolve_path(std::string_view override_path = {});

// Lexical clean of a path as Node's path.join / Go's filepath.Join leave it:
// repeated slashes folded, "." removed, ".." resolved where it can be.
OFFLOAD_LOCK_API std::string clean_path(std::string_view p);

// One name per lock directory, whatever path reaches it: "DEV:INO/NAME" of
// its parent directory and its last component, the key under which the
// threads of one process queue for it and a nested acquisition is
// recognized ("a/../gpu.lock" and a symlinked parent name the same lock).
// When the parent cannot be opened, the path as given. Never blocks on the
// lock; reads the file system (one open and one stat).
OFFLOAD_LOCK_API std::string lock_identity(const std::string& path);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_PATH_HPP
