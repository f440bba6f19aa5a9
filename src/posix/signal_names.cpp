// The names of the signals the command accepts. See signal_names.hpp.
#include "posix/signal_names.hpp"

#include <signal.h>

#include <utility>

namespace offload_lock::cli::os {

std::optional<int> signal_by_name(const std::string& name) {
  static const std::pair<const char*, int> names[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
      {"TERM", SIGTERM}, {"ALRM", SIGALRM}, {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"URG", SIGURG},
      {"PWR", SIGPWR},   {"XCPU", SIGXCPU}};
  for (const auto& [n, sig] : names)
    if (name == n) return sig;
  return std::nullopt;
}

bool catchable_signal(int signo) { return signo != SIGKILL && signo != SIGSTOP; }

}  // namespace offload_lock::cli::os
