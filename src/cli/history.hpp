// `offload-lock history`: the lock's history summed up, by label, user or
// GPU slot, and its recent entries; `--start` begins keeping it.
#ifndef OFFLOAD_LOCK_SRC_CLI_HISTORY_HPP
#define OFFLOAD_LOCK_SRC_CLI_HISTORY_HPP

#include <cstdint>
#include <string>
#include <vector>

#include "cli/args.hpp"

namespace offload_lock::cli {

// Exit 0; 4 when the history cannot be read (or started).
int cmd_history(const args& a, const std::string& path);

// The tokens of the slots of `path` held now (for the current holders'
// held time so far).
std::vector<std::string> current_tokens(const std::string& path);

// The wall clock, epoch milliseconds.
std::int64_t now_epoch_ms();

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_HISTORY_HPP
