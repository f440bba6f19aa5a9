// Tokens: the random name of one acquisition, recorded in meta.json (B8) and
// printed by `acquire` so a later `release --token` can name it.
#ifndef OFFLOAD_LOCK_SRC_TOKEN_HPP
#define OFFLOAD_LOCK_SRC_TOKEN_HPP

#include <string>

namespace offload_lock::detail {

// Letters, digits, '-' and '_' only, 1 to 128 of them.
bool valid_token(const std::string& token);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_TOKEN_HPP
