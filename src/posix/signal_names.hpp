// The names of the signals the command accepts (`run --yield-signal`), and
// which signals a process can catch: the signal numbers known here, so that
// the pure command-line parser (cli/args.cpp) includes no system header.
// (A signal's name for messages is signal_name, in signals.hpp.)
#ifndef OFFLOAD_LOCK_SRC_POSIX_SIGNAL_NAMES_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SIGNAL_NAMES_HPP

#include <optional>
#include <string>

namespace offload_lock::cli::os {

// The number of the signal `name` names, in capitals and without "SIG"
// ("USR1", "TERM"): one of HUP, INT, QUIT, USR1, USR2, TERM, ALRM, CONT,
// WINCH, URG, PWR and XCPU, the signals a command may be asked to make way
// with; nullopt for any other name. Pure: no call is made.
std::optional<int> signal_by_name(const std::string& name);

// Whether a process can catch signal `signo`: every signal but SIGKILL and
// SIGSTOP.
bool catchable_signal(int signo);

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_SIGNAL_NAMES_HPP
