// The one table of outcomes the command, the C API, Node and Go agree on.
// Each row: an exit code of the offload-lock command, the offload_lock::errc
// values and C API codes (offload_lock.h) of the same outcome, and what it
// means. compat/node, compat/go and doc/command.md carry the same numbers;
// tests/unit/outcomes_test.cpp fails when any of them drifts.
#ifndef OFFLOAD_LOCK_SRC_CLI_EXIT_CODES_HPP
#define OFFLOAD_LOCK_SRC_CLI_EXIT_CODES_HPP

#include <array>
#include <string_view>

#include "offload_lock/error.hpp"

namespace offload_lock::cli {

// A C API result code by its name in offload_lock.h; an empty name is none.
struct c_code {
  std::string_view name;
  int value = -1;
};

struct outcome {
  std::string_view name;  // compat/node's key is the same in camelCase (not_owner: notOwner)
  int exit_code;          // published: scripts test for it, never renumber
  // The library's outcomes and the C API's codes that end with this exit
  // code; errc{} and an empty c_code are unused places. Where both are
  // present, errcs[k] and c_api[k] are the same outcome.
  std::array<errc, 2> errcs;
  std::array<c_code, 2> c_api;
  std::string_view meaning;  // the row of doc/command.md's exit-code table
};

// The C API numbers differ from the exit codes (C 3 is lost, exit 3 is not
// owner; C tells busy from timed out): the rows make that mapping explicit.
// errc::cancelled has no row: a wait abandoned by signal N ends 128+N.
inline constexpr std::array<outcome, 6> outcomes = {{
    {"ok", 0, {}, {{{"OFFLOAD_LOCK_OK", 0}, {}}},
     "done. `acquire`, `hold`: taken (`hold`: and kept untouched to the end); `release`: released, or "
     "already free; `status`: held (with several GPUs, every slot shown; a gpulease holder counts, below); "
     "`wait-free`: free (the lease too); `doctor`: all well; `path`, `help`: always"},
    {"busy", 1, {errc::busy, errc::timed_out}, {{{"OFFLOAD_LOCK_BUSY", 1}, {"OFFLOAD_LOCK_TIMED_OUT", 2}}},
     "busy. `acquire`, `hold`: still held by someone else when `--wait` ended (at once with `--wait 0`), "
     "or `hold`'s stdin closed while it waited; `run`: the same, unless `--busy-exit N`; `status`: free "
     "(a slot shown is free); `wait-free`: still held when `--wait` ended; `doctor`: warnings"},
    {"usage", 2, {errc::bad_input}, {{{"OFFLOAD_LOCK_INVALID", 5}, {}}},
     "usage error, any command: an unknown command or option, a malformed or missing value, no command, "
     "`--gpu K` outside `CUDA_VISIBLE_DEVICES` (one line on stderr, nothing on stdout)"},
    {"not_owner", 3, {}, {},
     "`release`: held by someone else than the `--pid` or `--token` given (left in place)"},
    {"system", 4, {}, {{{"OFFLOAD_LOCK_ERROR", 4}, {}}},
     "system error, any command: permission, missing parent, not a directory, a stale lock that cannot be "
     "removed, no space (one line on stderr naming the path and the reason)"},
    {"lost", 5, {errc::lost}, {{{"OFFLOAD_LOCK_LOST", 3}, {}}},
     "`hold`: its lock was removed or replaced during the hold (a v1 runner's reclaim, `release --force`, "
     "a release by its token from elsewhere), whether or not someone holds it now"},
}};

// The exit code of the outcome named `name`; -1 for a name not in the table.
constexpr int exit_code_named(std::string_view name) {
  for (const outcome& o : outcomes)
    if (o.name == name) return o.exit_code;
  return -1;
}

inline constexpr int exit_ok = exit_code_named("ok");
inline constexpr int exit_busy = exit_code_named("busy");
inline constexpr int exit_usage = exit_code_named("usage");
inline constexpr int exit_not_owner = exit_code_named("not_owner");
inline constexpr int exit_system = exit_code_named("system");
inline constexpr int exit_lost = exit_code_named("lost");
static_assert(exit_ok >= 0 && exit_busy >= 0 && exit_usage >= 0 && exit_not_owner >= 0 && exit_system >= 0 &&
              exit_lost >= 0);

// A wait abandoned by signal N (errc::cancelled) ends like being killed by
// it: 128 + N.
inline constexpr int exit_signal_base = 128;

// `run` and `hold` ended by their --max-hold: 124, as timeout(1) ends a
// command that ran out of time. The command's own outcome, like 128+N: no
// row above, since no library outcome, C code or binding shares it.
inline constexpr int exit_max_hold = 124;

// The C API's codes of outcomes that have no exit code of their own: a
// cancelled wait (the command ends 128+N for the signal that cancelled it).
struct c_only_code {
  c_code c;
  errc e{};
};
inline constexpr std::array<c_only_code, 1> c_api_only = {{{{"OFFLOAD_LOCK_CANCELLED", 6}, errc::cancelled}}};

// The exit code for an outcome of the library: its row; errc values without
// one (cancelled) are the caller's to decide, and get exit_system here.
constexpr int exit_code_for(errc e) {
  for (const outcome& o : outcomes)
    for (errc c : o.errcs)
      if (c == e && c != errc{}) return o.exit_code;
  return exit_system;
}

// The same for any error: system errors (errno) are exit_system.
inline int exit_code_for(const error& e) {
  if (e.code().category() != category()) return exit_system;
  return exit_code_for(static_cast<errc>(e.code().value()));
}

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_EXIT_CODES_HPP
