// The terminal of the offload-lock command: width and stderr writes.
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

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_TERMINAL_HPP
