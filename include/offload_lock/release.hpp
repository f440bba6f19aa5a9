// Releasing a lock that this process does not hold as a `lock` object: by the
// token printed at acquisition, by the recorded pid, or by force.
#ifndef OFFLOAD_LOCK_RELEASE_HPP
#define OFFLOAD_LOCK_RELEASE_HPP

#include <cstdint>
#include <string>

#include "offload_lock/error.hpp"
#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"

namespace offload_lock {

struct release_request {
  std::string token;      // matches the lock's token
  std::int64_t pid = 0;   // or matches the lock's recorded pid
  bool force = false;     // remove whatever lock directory is there
};
enum class release_status {
  released,      // the lock was the requested one and is gone
  already_free,  // nothing held the lock (absent, or stale and not ours)
  not_owner,     // a live holder other than the requested one holds it; untouched
};
struct release_outcome {
  release_status status = release_status::already_free;
  info before;  // the lock as it was found
};

// Removes the lock at `path` only if it matches the request (doc/protocol.md B5),
// moving exactly the matched directory aside before deleting it.
// - Never blocks on the lock; a few system calls (more if the lock keeps
//   changing under it, bounded).
// - Never removes something that is not a directory (ENOTDIR), nor a
//   directory holding what a lock never holds (ENOTEMPTY).
// - A missing parent is already_free. System errors carry errno and path.
// - Thread-safe. From a forked child it acts like any other process.
OFFLOAD_LOCK_API result<release_outcome> release_by(const std::string& path, const release_request& request,
                                                    milliseconds ttl = default_ttl);

// release_by under its 0.1 name.
[[deprecated("use release_by")]] inline result<release_outcome> release_lock(const std::string& path,
                                                                              const release_request& request,
                                                                              milliseconds ttl = default_ttl) {
  return release_by(path, request, ttl);
}

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_RELEASE_HPP
