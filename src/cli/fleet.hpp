// `status --fleet`: every host's locks as they publish them to the etcd
// that OFFLOAD_LOCK_FLEET names (src/etcd/fleet.hpp), in text, JSON and the
// Prometheus exposition; and the line `status` and `doctor` add about this
// host's part of that view.
#ifndef OFFLOAD_LOCK_SRC_CLI_FLEET_HPP
#define OFFLOAD_LOCK_SRC_CLI_FLEET_HPP

#include <optional>
#include <string>

#include "cli/args.hpp"
#include "cli/output.hpp"

namespace offload_lock::cli {

// Prints the fleet once. Exit 0; exit_usage when OFFLOAD_LOCK_FLEET is
// unset or invalid; exit_system when etcd cannot be read.
int print_fleet(const args& a);

// This host's part of the view for the local lock at `path`: nullopt when
// no fleet is configured, else whether it is stale and why (one look at
// etcd, bounded).
struct fleet_note {
  bool stale = false;
  std::string endpoints, why;
};
std::optional<fleet_note> fleet_freshness(const std::string& path);
ojson fleet_json(const fleet_note& n);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_FLEET_HPP
