// `offload-lock doctor`: one screen that checks the setup and explains it.
// The path each side resolves, the lock's parent directory and who can
// reclaim whose stale lock there, the kernel features the lock relies on,
// /proc, nvidia-smi.
#ifndef OFFLOAD_LOCK_SRC_CLI_DOCTOR_HPP
#define OFFLOAD_LOCK_SRC_CLI_DOCTOR_HPP

#include "cli/args.hpp"

namespace offload_lock::cli {

// Prints one line per check (or one JSON object with --json). Exit 0 when
// every check is well, 1 when any warns.
int cmd_doctor(const args& a);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_DOCTOR_HPP
