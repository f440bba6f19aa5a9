// Signals for the offload-lock command: the self-pipe, SIGTERM, names.
// SIGINT, SIGTERM, SIGHUP and SIGCHLD are queued in a self-pipe; waiting for
// EOF or a signal; SIGTERM to another process; signal names for messages.
#ifndef OFFLOAD_LOCK_SRC_POSIX_SIGNALS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SIGNALS_HPP

#include <cstdint>
#include <optional>
#include <string>

namespace offload_lock::cli::os {

// From now on SIGINT, SIGTERM, SIGHUP and SIGCHLD are caught (and unblocked)
// and queued in a self-pipe; returns its read end, readable while a signal
// waits there. Call before anything a signal must not interrupt. Calling it
// again re-installs the handlers and returns the same descriptor.
int catch_signals();
// The next queued signal number other than SIGCHLD, 0 when none.
int take_signal();

// One signal read from the self-pipe, SIGCHLD included.
struct caught_signal {
  int signo = 0;
  // Sent to this process alone (kill, sigqueue, tkill), not by a terminal
  // to the whole process group.
  bool sent_to_process = false;
};
// The next queued signal; nullopt when none waits.
std::optional<caught_signal> next_caught();
bool is_child_exit(const caught_signal& s);

// Blocks until standard input reaches EOF or SIGTERM/SIGINT arrives. Returns
// the signal number, or 0 for EOF.
int wait_for_eof_or_signal();

// Asks the process to end: kill(pid, SIGTERM); nothing for pid <= 0. Safe
// from any thread.
void terminate(std::int64_t pid);
// kill(pid, sig); nothing for pid <= 0. Safe from any thread.
void send_signal(std::int64_t pid, int sig);

// Names of signals for messages ("SIGTERM").
std::string signal_name(int sig);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_SIGNALS_HPP
