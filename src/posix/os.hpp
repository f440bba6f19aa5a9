// The few facts the offload-lock command reads from the system.
// An environment variable, its parent's pid, its effective uid, the names
// in a directory, how a path splits into parent and name, another process's
// parent and name, a user's name. Thin calls over the library's seam
// (posix/sys.hpp) and the password database.
#ifndef OFFLOAD_LOCK_SRC_POSIX_OS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_OS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offload_lock::cli::os {

// The variable's value (possibly empty); nullopt when it is not set.
std::optional<std::string> get_env(const std::string& name);
std::int64_t parent_pid();
std::int64_t self_pid();
std::uint32_t effective_uid();
// Splits a path into its parent and its last component by the library's
// own rule ("a/b/c": "a/b" and "c"; "c": "." and "c"; "/c": "/" and "c"),
// so the command names the directory the lock lives in exactly as the lock
// does.
void split_path(const std::string& path, std::string& parent, std::string& name);
// The names in the directory at `path` (without . and ..); nullopt when it
// cannot be opened or read.
std::optional<std::vector<std::string>> list_names(const std::string& path);
// Opens /dev/null on each of descriptors 0, 1 and 2 that is closed, so that
// no descriptor the command opens later becomes standard input or output by
// accident (`offload-lock hold <&-` would read its own pipe). First thing in
// main().
void open_missing_standard_fds();

// The kernel's name of process `pid` (/proc/<pid>/comm, at most 15 bytes,
// chosen by that process: escape it before printing); nullopt when it
// cannot be read.
std::optional<std::string> command_name(std::int64_t pid);
// Whether process `pid` ends (or is a zombie) within `ms` milliseconds;
// looks every 20 ms.
bool exits_within(std::int64_t pid, int ms);
// The owner of process `pid` (its effective uid; root for one that is not
// dumpable); nullopt when it is gone or /proc is not this pid namespace's.
std::optional<std::uint32_t> process_uid(std::int64_t pid);
// This machine's host name, as the library records it.
std::string host_name();
// The login name of `uid`; nullopt when the password database has none.
std::optional<std::string> user_name(std::uint32_t uid);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_OS_HPP
