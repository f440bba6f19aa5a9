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
// SIGINT, SIGTERM and SIGHUP only, in the same self-pipe: for a command
// whose wait a child's exit must not end (`acquire`, where the library may
// run nvidia-smi while it waits). Returns the read end.
int catch_stop_signals();
// The default action again for every signal caught above (a forked keeper
// that nobody reads the self-pipe of ends on SIGTERM as it always did).
void default_signals();
// The next queued signal number other than SIGCHLD, 0 when none.
int take_signal();
// SIGWINCH (the terminal was resized) too, in the same self-pipe, for a
// full-screen view; it reads the pipe with next_caught(), since
// take_signal() would take a resize for a signal that ends the command.
int catch_resize();
bool is_resize(int signo);
// A write to a connection the other side closed fails with EPIPE instead
// of killing the process (a server's clients come and go).
void ignore_broken_pipes();

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

// Blocks until standard input reaches EOF or SIGTERM/SIGINT arrives, or
// until timeout_ms have passed (-1: no limit). Returns the signal number, 0
// for EOF, -1 when the time ran out.
int wait_for_eof_or_signal(std::int64_t timeout_ms = -1);

// Asks the process to end: kill(pid, SIGTERM); nothing for pid <= 0. Safe
// from any thread.
void terminate(std::int64_t pid);
// kill(pid, sig); nothing for pid <= 0. Safe from any thread.
void send_signal(std::int64_t pid, int sig);
// Signal `sig` to the process group pid leads, or to pid alone when it leads
// none (a command run in offload-lock's own group, where the group would
// include offload-lock). Nothing for pid <= 0. Safe from any thread.
void signal_group(std::int64_t pid, int sig);
// signal_group with SIGTERM, and with SIGKILL.
void terminate_group(std::int64_t pid);
void kill_group(std::int64_t pid);

// Names of signals for messages ("SIGTERM").
std::string signal_name(int sig);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_SIGNALS_HPP
