// Where gpulease keeps its lease, and the names it makes there
// (doc/protocol-gpulease.md, "Where the lease lives").
//
//   <lease dir>/meta.json          the claim (record.hpp)
//   <lease dir>/hb.<epoch>         the heartbeat of the lease with that epoch
//   <lease dir>/unloaded.<epoch>   "models were unloaded for this lease"
//   <lease dir>/.writeprobe-*      gpulease's writability probe, removed at once
//   <gpu dir>/epoch                the fencing counter (outside the lease dir)
//   <gpu dir>/epoch.lock           the counter's lock, made with O_EXCL
//   <gpu dir>/epoch.tmp            the counter's next value, renamed over it
// where <gpu dir> is the lease directory's parent.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_LOCATION_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_LOCATION_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace offload_lock::detail::gpulease {

inline constexpr const char* claim_name = "meta.json";
inline constexpr const char* counter_name = "epoch";
inline constexpr const char* counter_lock_name = "epoch.lock";
inline constexpr const char* counter_temp_name = "epoch.tmp";
// gpulease's machine-wide state root on Linux.
inline constexpr const char* default_state_root = "/var/lib/local-offload";

// The environment variables that place the lease.
inline constexpr const char* env_gpu_lock = "GPU_LOCK";                   // the lease directory itself
inline constexpr const char* env_lease_root = "OFFLOAD_LOCK_LEASE_ROOT";  // offload-lock's name for the state root
inline constexpr const char* env_state_dir = "LOCAL_OFFLOAD_STATE_DIR";   // gpulease's name for it

std::string heartbeat_name(std::uint64_t epoch);  // "hb.<epoch>"
std::string unloaded_name(std::uint64_t epoch);   // "unloaded.<epoch>"
// A name gpulease makes in a lease directory besides the claim: hb.*,
// unloaded.*, .writeprobe-*. gpulease's release removes every hb.* and
// unloaded.* it finds; offload-lock removes only those of its own epoch.
bool is_gpulease_name(const std::string& name);

// Which rule placed the lease directory, first match wins. gpulease itself
// reads its config's gpu_lock_path first, then GPU_LOCK, then its config's
// state_dir, then LOCAL_OFFLOAD_STATE_DIR, then the default; offload-lock
// cannot see that config, so a site sets GPU_LOCK or OFFLOAD_LOCK_LEASE_ROOT
// to what it says.
enum class lease_source {
  explicit_dir,  // a lease directory the caller named (a test, a flag)
  gpu_lock,      // GPU_LOCK: the lease directory itself, as gpulease reads it
  lease_root,    // OFFLOAD_LOCK_LEASE_ROOT: <root>/gpu/lease
  state_dir,     // LOCAL_OFFLOAD_STATE_DIR: <root>/gpu/lease
  default_root,  // /var/lib/local-offload/gpu/lease
};
const char* to_string(lease_source s) noexcept;

struct lease_location {
  std::string dir;      // the lease directory, absolute and cleaned (Go's filepath.Abs)
  std::string gpu_dir;  // its parent: where the counter lives
  std::string root;     // the state root, for the root rules ("" for the others)
  lease_source source = lease_source::default_root;
  // Non-empty when gpulease refuses this path (a cloud-sync folder among its
  // segments): no gpulease participant can be using it.
  std::string refused;
};

// The inputs of the resolution, each as read (nullopt: unset).
struct lease_inputs {
  std::optional<std::string> explicit_dir, gpu_lock, lease_root, state_dir;
  std::string cwd;  // for relative paths; "" leaves them relative
};

// Places the lease. Values are trimmed of white space as gpulease trims
// them, an empty one is skipped, a relative one is joined to cwd and every
// result cleaned lexically. Pure.
lease_location resolve_lease(const lease_inputs& in);
// The same inputs from this process's environment and working directory.
lease_inputs lease_inputs_from_environment(const std::optional<std::string>& explicit_dir = std::nullopt);

// gpulease's refusal of a cloud-synced path: why, or "" when it accepts it.
// Segments split at '/' and '\\', trimmed, compared in lower case. Pure.
std::string sync_root_reason(const std::string& path);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_LOCATION_HPP
