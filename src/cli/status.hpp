// The status board: text, JSON, Prometheus, --watch.
// Who holds each slot of the lock and who waits, printed once or redrawn as
// it changes.
#ifndef OFFLOAD_LOCK_SRC_CLI_STATUS_HPP
#define OFFLOAD_LOCK_SRC_CLI_STATUS_HPP

#include <string>

#include "cli/args.hpp"
#include "cli/gpus.hpp"

namespace offload_lock::cli {

// Prints the board once. Exit code: ok when every slot shown is held, busy
// otherwise (ok whatever the state with --prometheus); system when a slot
// cannot be looked at.
int print_status(const args& a, const gpu_plan& gpus, const std::string& path);

// Prints the board, then again whenever it changes, until SIGINT, SIGTERM
// or SIGHUP. On a terminal the screen is redrawn; elsewhere each change is
// appended as a new block.
int watch_status(const args& a, const gpu_plan& gpus, const std::string& path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_STATUS_HPP
