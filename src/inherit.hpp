// Child processes (doc/protocol.md B11): the lock a process was started under,
// passed down in its environment, so that the child's own acquisition of the
// same lock passes straight through instead of waiting on its parent.
#ifndef OFFLOAD_LOCK_SRC_INHERIT_HPP
#define OFFLOAD_LOCK_SRC_INHERIT_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "lock_dir.hpp"

namespace offload_lock::detail {

// The path this process was started under (env_lock_path), if any.
std::optional<std::string> inherited_path();

// The token of the lock this process was started under (env_lock_path and
// env_lock_token), when it is the lock `t` (same parent directory, same
// name) and still held with that token.
std::optional<std::string> inherited_token(const target& t, std::int64_t ttl, std::int64_t grace);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_INHERIT_HPP
