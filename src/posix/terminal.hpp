// The terminal of the offload-lock command: width, stderr writes, and a
// copy of stderr for a warning from a detached process.
#ifndef OFFLOAD_LOCK_SRC_POSIX_TERMINAL_HPP
#define OFFLOAD_LOCK_SRC_POSIX_TERMINAL_HPP

#include <string>

namespace offload_lock::cli::os {

// The standard streams, for terminal_width().
inline constexpr int standard_output = 1;
inline constexpr int standard_error = 2;

// Writes to stderr without buffering; safe from any thread.
void write_stderr(const std::string& s);

// The width of the terminal on `fd` in columns; 0 when `fd` is not a terminal.
int terminal_width(int fd);

// A close-on-exec copy of stderr unless it is a pipe or a socket (a
// terminal, a log file, /dev/null), else -1: for a warning a detached
// process (the keeper of `acquire`) may still owe the caller, in cron and
// CI too. Never a pipe, whose reader (`$(...)`, a log collector) would wait
// for it to close.
int stderr_copy_unless_pipe();
// Writes `s` to `fd` (when >= 0) and closes it.
void write_and_close(int fd, const std::string& s);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_TERMINAL_HPP
