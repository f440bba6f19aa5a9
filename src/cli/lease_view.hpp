// The gpulease lease on the command's screens: a line of `status`, its
// "gpulease" object in `status --json`, and the `doctor` checks
// (doc/protocol-gpulease.md). Where no gpulease root exists, `status` shows
// nothing of it and costs one open().
#ifndef OFFLOAD_LOCK_SRC_CLI_LEASE_VIEW_HPP
#define OFFLOAD_LOCK_SRC_CLI_LEASE_VIEW_HPP

#include <optional>
#include <string>
#include <vector>

#include "cli/output.hpp"
#include "offload_lock/lease.hpp"

namespace offload_lock::cli {

struct lease_board {
  lease_place place;
  lease_info info;
};

// The lease now, or nullopt where no gpulease root exists.
std::optional<lease_board> look_lease_board();

// Whether the lease keeps the GPU of the plain lock (slot 0) busy: the
// acquisitions take it (place.joined) and it is held or cannot be judged.
bool lease_keeps_gpu(const std::optional<lease_board>& b);

// The first line of `status` for a GPU whose lock is free while the lease
// keeps it: "held by a gpulease holder: media lease (pid 4242, epoch 17,
// reason "render") for 5m12s, window ends in 54m48s; the lock itself is
// free", escaped. `lock_line` is what the lock's own line would say.
std::string lease_busy_line(const lease_board& b, const std::string& lock_line);

// "gpulease: held by media lease (pid 4242, epoch 17, reason "render") for
// 5m12s, window ends in 54m48s (/var/lib/local-offload/gpu/lease)", escaped.
std::string lease_text(const lease_board& b);
// The "gpulease" member of `status --json`: null where no root exists.
ojson lease_json(const std::optional<lease_board>& b);

// doctor's checks: where the lease is and what sets it, whether a gpulease
// root exists, who holds the lease, and the warnings (a path gpulease
// refuses, a lease directory this user cannot write, GPU_LOCK shared with
// the lock path). `lock_path` is the lock path doctor checks.
struct lease_check {
  std::string name;
  bool ok = true;
  std::string detail;
};
std::vector<lease_check> lease_checks(const std::string& lock_path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_LEASE_VIEW_HPP
