// The gpulease lease that current upstream runners take instead of the v1
// lock (doc/protocol-gpulease.md): where it lives, and who holds it, judged
// by gpulease's own rules. Read-only: nothing here creates, takes over or
// removes anything.
#ifndef OFFLOAD_LOCK_LEASE_HPP
#define OFFLOAD_LOCK_LEASE_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "offload_lock/export.h"

namespace offload_lock {

// Which rule placed the lease directory (first match wins).
enum class lease_rule {
  explicit_dir,    // a directory the caller named
  gpu_lock_env,    // GPU_LOCK: the lease directory itself, as gpulease reads it
  lease_root_env,  // OFFLOAD_LOCK_LEASE_ROOT: <root>/gpu/lease
  state_dir_env,   // LOCAL_OFFLOAD_STATE_DIR (gpulease's own variable): <root>/gpu/lease
  default_root,    // /var/lib/local-offload/gpu/lease
};
OFFLOAD_LOCK_API const char* to_string(lease_rule rule) noexcept;

struct lease_place {
  std::string dir;      // the lease directory (absolute, cleaned)
  std::string gpu_dir;  // its parent, where the fencing counter `epoch` lives
  std::string root;     // the state root of the root rules, "" otherwise
  lease_rule rule = lease_rule::default_root;
  // A gpulease root exists: the state root, or for an explicit directory
  // the lease directory's parent, is a directory; for GPU_LOCK (which
  // v1-only sites set too), gpulease's counter is also there. Where it does
  // not, no gpulease participant can be holding, and offload-lock takes no
  // lease.
  bool exists = false;
  // Why gpulease refuses this path (a cloud-sync folder), "" when it accepts it.
  std::string refused;
  // offload-lock's acquisitions of a plain lock take this lease too (it
  // exists, a state root rule placed it, gpulease accepts it): the lease
  // joined_lease() judges, which makes the GPU busy whatever the lock says.
  bool joined = false;
};

// Places the lease from the environment (GPU_LOCK, OFFLOAD_LOCK_LEASE_ROOT,
// LOCAL_OFFLOAD_STATE_DIR) and the working directory, or at `explicit_dir`
// when it is not empty. One open() to tell `exists`; never creates anything.
// Thread-safe against everything but a concurrent setenv.
OFFLOAD_LOCK_API lease_place find_lease(std::string_view explicit_dir = {});

enum class lease_state {
  free,     // no claim
  held,     // the holder lives by gpulease's rules (or its claim is being written)
  stale,    // its holder is provably gone: any participant may take it over now
  unknown,  // something could not be read: it is never taken over
};
OFFLOAD_LOCK_API const char* to_string(lease_state s) noexcept;

// One point-in-time view of the lease. The strings come from the claim,
// which anyone who can write the lease directory may have written: escape
// them before a terminal or a parser sees them.
struct lease_info {
  std::string dir;
  lease_state state = lease_state::free;
  std::string why;           // the verdict in words
  bool in_progress = false;  // an unparseable claim younger than gpulease's 10 s grace
  // The claim's holder (zero and empty when there is no parseable claim).
  std::int64_t pid = 0;
  std::string lease_class;  // "media" or "text"
  std::uint64_t epoch = 0;  // the lease's fencing epoch
  std::string reason, origin, job_id;
  std::int64_t acquired_at_ms = 0;
  std::int64_t expires_at_ms = 0;         // the end of the holder's declared window
  std::int64_t renewed_at_ms = 0;         // its last heartbeat (hb.<epoch>, else the claim's own stamp)
  std::chrono::milliseconds held_for{0};  // now - acquired_at_ms, at least 0
  // What gpulease's own readers (its status, its gates) conclude: held, or
  // free. They differ from `state` for a claim being written (free to them)
  // and where offload-lock is more careful (a zombie holder, unreadable files).
  bool gpulease_readers_held = false;
  // The last epoch issued under this lease's gpu directory, when readable.
  std::optional<std::uint64_t> counter;
};

// Judges the lease at `dir` now. Never blocks on the lease; a few system
// calls. A missing directory is free; one that cannot be read is unknown,
// with why saying what failed. Thread-safe; safe in a forked child.
OFFLOAD_LOCK_API lease_info inspect_lease(const std::string& dir);

// Whether `i` keeps the GPU from being taken: held, or unknown (a lease
// that cannot be judged is never taken over, so an acquisition waits for
// it as for a holder). Pure.
OFFLOAD_LOCK_API bool lease_busy(const lease_info& i) noexcept;

// The lease that offload-lock's acquisitions of a plain lock (or of its GPU
// slot 0) also take (doc/protocol-gpulease.md, "Every acquisition holds
// both"), judged now; nullopt where they take none: no gpulease state root
// exists (OFFLOAD_LOCK_LEASE_ROOT, LOCAL_OFFLOAD_STATE_DIR, or
// /var/lib/local-offload), GPU_LOCK places the lease (a directory both
// protocols would share), or gpulease refuses the path. Placed from the
// environment and the working directory; one open, then inspect_lease().
// Changes nothing. Thread-safe against everything but a concurrent setenv.
OFFLOAD_LOCK_API std::optional<lease_info> joined_lease();

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_LEASE_HPP
