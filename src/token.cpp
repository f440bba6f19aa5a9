// Tokens (token.hpp) and the version: what meta.json's "token" and "tool"
// keys hold (doc/protocol.md B8).
#include "token.hpp"

#include "offload_lock/lock.hpp"
#include "os/clock.hpp"

namespace offload_lock {

namespace detail {

bool valid_token(const std::string& token) {
  return !token.empty() && token.size() <= 128 &&
         token.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") ==
             std::string::npos;
}

}  // namespace detail

const char* version() noexcept { return OFFLOAD_LOCK_VERSION; }

std::string new_token() { return detail::sys::random_hex(16); }

}  // namespace offload_lock
