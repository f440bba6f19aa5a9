// The commands of offload-lock, one function each.
// Each takes the parsed command line, the GPU slots resolved once for it,
// and the lock path, and returns the exit code (cli/exit_codes.hpp; `run`:
// CMD's status).
#ifndef OFFLOAD_LOCK_SRC_CLI_COMMANDS_HPP
#define OFFLOAD_LOCK_SRC_CLI_COMMANDS_HPP

#include <string>

#include "cli/args.hpp"
#include "cli/gpus.hpp"

namespace offload_lock::cli {

int cmd_path(const args& a);
int cmd_status(const args& a, const gpu_plan& gpus, const std::string& path);
int cmd_acquire(const args& a, const gpu_plan& gpus, const std::string& path);
int cmd_release(const args& a, const gpu_plan& gpus, const std::string& base);  // base: the lock, not a slot
int cmd_run(const args& a, const gpu_plan& gpus, const std::string& path);
int cmd_hold(const args& a, const gpu_plan& gpus, const std::string& path);
int cmd_wait_free(const args& a, const std::string& path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_COMMANDS_HPP
