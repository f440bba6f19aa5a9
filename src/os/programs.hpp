// The seam's view of other programs: the kernel's name of a process, its
// parent, and running a helper program (nvidia-smi) with a time limit.
// Declarations only: src/posix/programs.cpp and src/posix/command.cpp
// implement them.
#ifndef OFFLOAD_LOCK_SRC_OS_PROGRAMS_HPP
#define OFFLOAD_LOCK_SRC_OS_PROGRAMS_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offload_lock::detail::sys {

// The kernel's name of process `pid` (/proc/<pid>/comm, at most 15 bytes,
// chosen by that process: escape it before printing); nullopt when it
// cannot be read (gone, or /proc is not this pid namespace's).
std::optional<std::string> command_name(std::int64_t pid);

// The parent pid of process `pid` (/proc/<pid>/stat); nullopt when it
// cannot be read.
std::optional<std::int64_t> parent_of(std::int64_t pid);

// Runs argv (PATH searched, no shell; stdin and stderr on /dev/null, no
// descriptor of this process inherited) and returns at most `cap` bytes of
// its standard output. nullopt when it cannot be run, fails, or has not
// exited within timeout_ms: the limit is on the process, not on its output,
// so a program that closes its output and keeps running is killed at the
// limit too.
std::optional<std::string> read_command(const std::vector<std::string>& argv, std::size_t cap,
                                        std::int64_t timeout_ms);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_PROGRAMS_HPP
