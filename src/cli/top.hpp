// `offload-lock top`: a live view of the lock on a terminal, and its keys.
#ifndef OFFLOAD_LOCK_SRC_CLI_TOP_HPP
#define OFFLOAD_LOCK_SRC_CLI_TOP_HPP

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/board.hpp"
#include "cli/gpus.hpp"
#include "offload_lock/history.hpp"

namespace offload_lock::cli {

// What one frame shows.
struct top_view {
  std::string path;
  board b;
  std::vector<int> slot_numbers;  // the slot of each of b.slots
  milliseconds moved{0};          // since the board was looked at: its times move on by this
  std::chrono::steady_clock::time_point looked_at{};  // when that look began
  std::int64_t now_ms = 0;
  std::vector<history_entry> recent;
  bool history_kept = false;
  // The selected row: the slots first, then the waiters, in order.
  int selected = 0;
  std::string message;  // the last line: what the last key did
};

// The frame's lines, each exactly `cols` wide (escaped text), `rows` of
// them; the selected row in reverse video.
std::vector<std::string> top_lines(const top_view& v, int cols, int rows);

enum class key { quit, up, down, redraw, cancel_wait, ask_yield, other };
// The keys in what the terminal sent: q, arrows (and k, j), w, y, Ctrl-L;
// anything else is `other`.
std::vector<key> parse_keys(const std::string& bytes);

// Runs until q, SIGINT, SIGTERM or SIGHUP: exit 0 for q, 128+N for signal
// N; 2 when standard input or output is not a terminal.
int cmd_top(const args& a, const gpu_plan& gpus, const std::string& path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_TOP_HPP
