// The seam's current working directory, for making a relative path
// absolute the way Go's filepath.Abs does (src/gpulease/location.cpp).
// Declaration only: src/posix/lease_cwd.cpp.
#ifndef OFFLOAD_LOCK_SRC_OS_CWD_HPP
#define OFFLOAD_LOCK_SRC_OS_CWD_HPP

#include <optional>
#include <string>

namespace offload_lock::detail::sys {

// getcwd(3); nullopt when it fails (the directory was removed, EACCES on a
// parent, ...).
std::optional<std::string> current_directory();

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_CWD_HPP
