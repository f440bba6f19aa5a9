// Signals for the offload-lock command. See signals.hpp.
#include "posix/signals.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <initializer_list>

namespace offload_lock::cli::os {

namespace {

// Self-pipe carrying {signo, si_code} from the signal handler to poll().
int g_sig_pipe[2] = {-1, -1};

struct sig_msg {
  int signo;
  int code;
};

void on_signal(int signo, siginfo_t* info, void*) {
  int saved = errno;
  sig_msg m{signo, info ? info->si_code : SI_USER};
  ssize_t r = ::write(g_sig_pipe[1], &m, sizeof m);
  (void)r;
  errno = saved;
}

void install_handlers(std::initializer_list<int> sigs) {
  if (g_sig_pipe[0] < 0) {
    if (::pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
  }
  // A parent may have left these blocked; a blocked SIGTERM would never be
  // passed on.
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int s : sigs) sigaddset(&unblock, s);
  ::pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  for (int s : sigs) {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    // A child that stops or continues (a terminal's Ctrl-Z and fg reach a
    // job's whole process group) has not ended: only its end is news, and
    // a stop taken for one cancelled a waiting run.
    if (s == SIGCHLD) sa.sa_flags |= SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    ::sigaction(s, &sa, nullptr);
  }
}

bool read_sig(sig_msg& m) {
  if (g_sig_pipe[0] < 0) return false;
  return ::read(g_sig_pipe[0], &m, sizeof m) == static_cast<ssize_t>(sizeof m);
}

}  // namespace

int catch_signals() {
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  return g_sig_pipe[0];
}

int catch_stop_signals() {
  install_handlers({SIGINT, SIGTERM, SIGHUP});
  return g_sig_pipe[0];
}

void default_signals() {
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH}) (void)::signal(s, SIG_DFL);
}

int catch_resize() {
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGWINCH});
  return g_sig_pipe[0];
}

bool is_resize(int signo) { return signo == SIGWINCH; }

void ignore_broken_pipes() { (void)::signal(SIGPIPE, SIG_IGN); }

int take_signal() {
  sig_msg m{};
  while (read_sig(m)) {
    if (m.signo != SIGCHLD) return m.signo;
  }
  return 0;
}

std::optional<caught_signal> next_caught() {
  sig_msg m{};
  if (!read_sig(m)) return std::nullopt;
  return caught_signal{m.signo, m.code == SI_USER || m.code == SI_QUEUE || m.code == SI_TKILL};
}

bool is_child_exit(const caught_signal& s) { return s.signo == SIGCHLD; }

int wait_for_eof_or_signal(std::int64_t timeout_ms) {
  const int sig_fd = catch_signals();
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return -1;
      wait_ms = static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000));
    }
    struct pollfd fds[2] = {{sig_fd, POLLIN, 0}, {0, POLLIN, 0}};
    if (::poll(fds, 2, wait_ms) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      if (int sig = take_signal(); sig == SIGINT || sig == SIGTERM) return sig;
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return 0;
    }
  }
}

void terminate(std::int64_t pid) {
  if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGTERM);
}

void send_signal(std::int64_t pid, int sig) {
  if (pid > 0) ::kill(static_cast<pid_t>(pid), sig);
}

void signal_group(std::int64_t pid, int sig) {
  if (pid <= 0) return;
  const auto p = static_cast<pid_t>(pid);
  ::kill(::getpgid(p) == p ? -p : p, sig);
}

void terminate_group(std::int64_t pid) { signal_group(pid, SIGTERM); }
void kill_group(std::int64_t pid) { signal_group(pid, SIGKILL); }

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace offload_lock::cli::os
