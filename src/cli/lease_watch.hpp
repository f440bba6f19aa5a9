// Waking a live view (`status --watch`, `top`, `serve`) when the gpulease
// lease may have changed: a watch on the lease directory where a root
// exists (or, until gpulease makes that directory at its first lease, on
// the nearest directory above it), and the bounds on a view's sleep for
// what no event says (a lease that frees by time alone).
#ifndef OFFLOAD_LOCK_SRC_CLI_LEASE_WATCH_HPP
#define OFFLOAD_LOCK_SRC_CLI_LEASE_WATCH_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "cli/lease_view.hpp"
#include "posix/dir_watch.hpp"

namespace offload_lock::cli {

class lease_watch {
 public:
  // Before each look: watches the lease directory `place` names, where a
  // root exists, unless it is watched already.
  void arm(const lease_place& place);
  // Readable when something happened there; -1 without inotify.
  int fd() const { return w_.fd(); }
  // Takes what happened: true when the view should look again.
  bool drain();
  // The longest a view that saw `seen` may sleep (-1: no bound): a second
  // while the lease directory could not be watched, a few seconds while
  // the lease is not free (it frees by time alone once its holder's
  // heartbeat and window are over).
  std::int64_t timeout_ms(const std::optional<lease_board>& seen) const;
  // The lease's holder while it is held, for a pid watch; 0: none.
  static std::int64_t holder_pid(const std::optional<lease_board>& seen);

 private:
  os::dir_watch w_;
  std::string watched_;  // the directory watched; "" when none
};

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_LEASE_WATCH_HPP
