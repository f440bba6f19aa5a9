// The offload-lock command line: grammar, values and help texts.
// Signals and pids are parsed here too; nothing here does I/O.
#ifndef OFFLOAD_LOCK_SRC_CLI_ARGS_HPP
#define OFFLOAD_LOCK_SRC_CLI_ARGS_HPP

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/exit_codes.hpp"
#include "offload_lock/describe.hpp"

namespace offload_lock::cli {

struct args {
  // global
  std::string lock_path;
  std::chrono::milliseconds ttl = std::chrono::hours(1);
  bool json = false;
  bool quiet = false;
  bool help = false;
  bool version = false;
  // the command and its options
  std::string command;
  bool explain = false;                       // path
  std::optional<std::chrono::milliseconds> wait;
  std::chrono::milliseconds poll = std::chrono::seconds(1);
  std::optional<std::chrono::milliseconds> within;  // wait-free --within
  std::int64_t pid = 0;                       // acquire / release
  std::string token;                          // release
  bool force = false;                         // release
  std::string label;
  std::string lease_class;                    // --class: media or text (the gpulease lease's)
  std::chrono::milliseconds expect{0};        // acquire / run / hold --expect; 0: undeclared
  std::chrono::milliseconds max_hold{0};      // run / hold / acquire --max-hold; 0: none
  std::chrono::milliseconds max_hold_grace = std::chrono::seconds(30);  // run --max-hold-grace
  int priority = 0;                           // acquire / run / hold --priority
  int busy_exit = exit_busy;                  // run
  int yield_signal = 0;                       // run --yield-signal; 0: CMD is not asked to yield
  bool on_lost_term = false;                  // run --on-lost term
  std::vector<std::string> cmd;               // run
  // several GPUs: --gpus N|auto (gpus_auto), --gpu K
  int gpus = 1;
  bool gpus_auto = false;
  int gpu = -1;
  bool watch = false;                         // status --watch
  bool prometheus = false;                    // status --prometheus
  bool fleet = false;                         // status --fleet
  bool start_history = false;                 // history --start
  bool allow_remote = false;                  // serve --allow-remote
  std::chrono::milliseconds remind = std::chrono::minutes(1);  // waiting off a terminal
  std::optional<std::chrono::milliseconds> since;  // history --since
  std::string by;                             // history --by: label, user or gpu; empty: no grouping
  std::string listen = "127.0.0.1:9479";      // serve --listen ADDR:PORT
};

// The values of DUR and --priority are parsed by the library's grammar
// (offload_lock/describe.hpp: parse_duration, parse_priority), which every
// binding shares.
// A --yield-signal: a name (USR1, SIGUSR1, usr1, ...) or a number from 1 to
// 64, neither KILL nor STOP.
std::optional<int> parse_signal(const std::string& text);
// A positive decimal pid that fits the kernel's pid_t.
std::optional<std::int64_t> parse_pid(const std::string& text);

// Parses argv (without the program name). --opt=value is --opt value; -h,
// -q, -j, -w and -l are --help, --quiet, --json, --wait and --label. An
// unknown command or option is answered with the nearest known one. On a
// usage error returns the one-line message and leaves `out` partly filled.
// (`help [COMMAND]` sets help, and command to COMMAND or empty.)
std::optional<std::string> parse(const std::vector<std::string>& argv, args& out);

// `offload-lock --help` (the overview), and the per-command help
// (cli/help.cpp).
std::string usage();
std::string command_help(const std::string& command);
// Every command, help included, in the overview's order.
std::vector<std::string> command_names();

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_ARGS_HPP
