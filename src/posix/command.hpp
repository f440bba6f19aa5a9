// Running a helper command with a time limit (`nvidia-smi -L`).
// Its standard output is read back, bounded.
#ifndef OFFLOAD_LOCK_SRC_POSIX_COMMAND_HPP
#define OFFLOAD_LOCK_SRC_POSIX_COMMAND_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offload_lock::cli::os {

// Runs argv (PATH searched, no shell; stdin and stderr on /dev/null) and
// returns at most `cap` bytes of its standard output; nullopt when it
// cannot be run, fails, or is still running after timeout_ms (it is then
// killed).
std::optional<std::string> read_command(const std::vector<std::string>& argv, std::size_t cap,
                                        std::int64_t timeout_ms);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_COMMAND_HPP
