// Child processes and signals for the offload-lock command. See process.hpp.
#include "posix/process.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "posix/sys.hpp"

namespace offload_lock::detail::proc {

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
    sigemptyset(&sa.sa_mask);
    ::sigaction(s, &sa, nullptr);
  }
}

bool read_sig(sig_msg& m) {
  if (g_sig_pipe[0] < 0) return false;
  return ::read(g_sig_pipe[0], &m, sizeof m) == static_cast<ssize_t>(sizeof m);
}

void close_fd(int& f) {
  if (f >= 0) ::close(f);
  f = -1;
}

}  // namespace

int catch_signals() {
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  return g_sig_pipe[0];
}

int take_signal() {
  sig_msg m{};
  while (read_sig(m)) {
    if (m.signo != SIGCHLD) return m.signo;
  }
  return 0;
}

result<gated_child> gated_child::fork_gated(const std::vector<std::string>& argv, const env_list& env,
                                            const std::vector<env_list>& variants) {
  if (argv.empty()) return error(errc::bad_input, "no command to run");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls. One environment per variant (the first without one).
  std::vector<std::vector<std::string>> env_strings(variants.size() + 1);
  for (std::size_t v = 0; v <= variants.size(); ++v) {
    env_list all = env;
    if (v > 0) all.insert(all.end(), variants[v - 1].begin(), variants[v - 1].end());
    for (char** e = environ; e && *e; ++e) {
      std::string s(*e);
      bool replaced = false;
      for (const auto& kv : all)
        if (s.compare(0, kv.first.size() + 1, kv.first + "=") == 0) replaced = true;
      if (!replaced) env_strings[v].push_back(std::move(s));
    }
    for (const auto& kv : all) env_strings[v].push_back(kv.first + "=" + kv.second);
  }
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::vector<char*>> cenvs(env_strings.size());
  for (std::size_t v = 0; v < env_strings.size(); ++v) {
    for (auto& s : env_strings[v]) cenvs[v].push_back(s.data());
    cenvs[v].push_back(nullptr);
  }

  int gate[2], report[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return sys::sys_error(errno, "pipe", "for " + argv[0]);
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(gate[0]);
    ::close(gate[1]);
    return sys::sys_error(e, "pipe", "for " + argv[0]);
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int f : {gate[0], gate[1], report[0], report[1]}) ::close(f);
    return sys::sys_error(e, "fork", "for " + argv[0]);
  }
  if (pid == 0) {
    ::close(gate[1]);
    ::close(report[0]);
    int go = -1;  // the environment variant to start with, +1
    ssize_t n;
    do n = ::read(gate[0], &go, sizeof go);
    while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof go)) ::_exit(127);
    std::size_t v = go > 0 && static_cast<std::size_t>(go) < cenvs.size() ? static_cast<std::size_t>(go) : 0;
    ::execvpe(cargv[0], cargv.data(), cenvs[v].data());
    int e = errno;
    ssize_t w = ::write(report[1], &e, sizeof e);
    (void)w;
    ::_exit(127);
  }
  ::close(gate[0]);
  ::close(report[1]);
  gated_child c;
  c.pid_ = pid;
  c.gate_ = gate[1];
  c.report_ = report[0];
  return c;
}

gated_child::gated_child(gated_child&& o) noexcept
    : pid_(o.pid_), gate_(o.gate_), report_(o.report_), reaped_(o.reaped_), ended_before_start_(o.ended_before_start_) {
  o.pid_ = -1;
  o.gate_ = o.report_ = -1;
}

gated_child::~gated_child() {
  if (pid_ > 0 && gate_ >= 0) abandon();
  close_fd(gate_);
  close_fd(report_);
}

error gated_child::start(int variant) {
  // Handlers first: a signal that arrives as soon as CMD runs waits in the
  // self-pipe and is passed on by wait_forwarding().
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  // The child may have been killed while it waited at the gate: then the
  // write fails with EPIPE, which must not kill this process with SIGPIPE.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);
  int go = variant + 1;
  ssize_t w;
  do w = ::write(gate_, &go, sizeof go);
  while (w < 0 && errno == EINTR);
  int write_errno = w < 0 ? errno : 0;
  ::sigaction(SIGPIPE, &old, nullptr);
  close_fd(gate_);
  if (write_errno) {
    close_fd(report_);
    int st = 0;
    while (::waitpid(static_cast<pid_t>(pid_), &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    ended_before_start_ = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    return sys::sys_error(write_errno, "start", "command (it ended before it could start)");
  }
  int e = 0;
  ssize_t n;
  do n = ::read(report_, &e, sizeof e);
  while (n < 0 && errno == EINTR);
  close_fd(report_);
  if (n == static_cast<ssize_t>(sizeof e)) {
    int st;
    ::waitpid(static_cast<pid_t>(pid_), &st, 0);
    reaped_ = true;
    return sys::sys_error(e, "exec", "command");
  }
  return {};
}

void gated_child::abandon() {
  close_fd(gate_);
  if (pid_ > 0 && !reaped_) {
    int st;
    while (::waitpid(static_cast<pid_t>(pid_), &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
}

void gated_child::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(static_cast<pid_t>(pid_), sig);
}

std::optional<int> gated_child::ended() {
  if (pid_ <= 0 || reaped_) return std::nullopt;
  siginfo_t info {};
  int r;
  do r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  while (r < 0 && errno == EINTR);
  if (r != 0 || info.si_pid == 0) return std::nullopt;
  if (info.si_code == CLD_EXITED) return info.si_status;
  return 128 + info.si_status;
}

void gated_child::reap() {
  if (pid_ <= 0 || reaped_) return;
  int st;
  while (::waitpid(static_cast<pid_t>(pid_), &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
}

int gated_child::wait_forwarding() {
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  for (;;) {
    if (auto status = ended()) return *status;
    if (reaped_) return 1;
    struct pollfd fds[1] = {{g_sig_pipe[0], POLLIN, 0}};
    if (::poll(fds, 1, -1) < 0) continue;
    sig_msg m{};
    while (read_sig(m)) {
      if (m.signo == SIGCHLD) continue;
      // A terminal's signal reaches the whole foreground process group, the
      // child included; only signals sent to this process alone are passed on.
      if (m.code == SI_USER || m.code == SI_QUEUE || m.code == SI_TKILL) ::kill(static_cast<pid_t>(pid_), m.signo);
    }
  }
}

int wait_for_eof_or_signal() {
  install_handlers({SIGINT, SIGTERM, SIGHUP, SIGCHLD});
  char buf[4096];
  for (;;) {
    struct pollfd fds[2] = {{g_sig_pipe[0], POLLIN, 0}, {0, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[0].revents & POLLIN) {
      if (int sig = take_signal(); sig == SIGINT || sig == SIGTERM) return sig;
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)) {
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return 0;
    }
  }
}

result<bool> fork_detached() {
  pid_t pid = ::fork();
  if (pid < 0) return sys::sys_error(errno, "fork", "background keeper");
  if (pid > 0) {
    // The intermediate child exits at once (below), so the keeper is
    // re-parented and never becomes a zombie of the caller.
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return false;
  }
  ::setsid();
  pid_t again = ::fork();
  if (again != 0) ::_exit(0);
  // Descriptors without close-on-exec came from whoever started us (a
  // shell's extra pipes, say); keeping them open would keep their readers
  // waiting for an EOF until the keeper ends.
  if (DIR* d = ::opendir("/proc/self/fd")) {
    std::vector<int> inherited;
    int self = ::dirfd(d);
    while (struct dirent* e = ::readdir(d)) {
      int f = static_cast<int>(std::strtol(e->d_name, nullptr, 10));
      if (f > 2 && f != self && e->d_name[0] != '.' && (::fcntl(f, F_GETFD) & FD_CLOEXEC) == 0) inherited.push_back(f);
    }
    ::closedir(d);
    for (int f : inherited) ::close(f);
  }
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > 2) ::close(null);
  }
  if (::chdir("/") != 0) {
  }
  return true;
}

void send_signal(std::int64_t pid, int sig) {
  if (pid > 0) ::kill(static_cast<pid_t>(pid), sig);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void write_stderr(const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

int terminal_width(int fd) {
  if (!::isatty(fd)) return 0;
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

namespace {

// pidfd_open(2); -1 with errno set (ENOSYS where the kernel or libc lacks it,
// or when OFFLOAD_LOCK_NO_PIDFD is set).
long open_pidfd(std::int64_t pid) {
  errno = ENOSYS;
  if (std::getenv("OFFLOAD_LOCK_NO_PIDFD")) return -1;
#ifdef SYS_pidfd_open
  return ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

std::optional<std::string> read_command(const std::vector<std::string>& argv, std::size_t cap,
                                        std::int64_t timeout_ms) {
  if (argv.empty()) return std::nullopt;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned != 0) {
    ::close(out[0]);
    return std::nullopt;
  }
  std::string text;
  const std::int64_t deadline = sys::monotonic_ms() + timeout_ms;
  bool timed_out = false;
  for (;;) {
    const std::int64_t left = deadline - sys::monotonic_ms();
    struct pollfd p = {out[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 60'000))) == 0) {
      timed_out = sys::monotonic_ms() >= deadline;
      if (timed_out) break;
      continue;
    }
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(std::min<ssize_t>(n, static_cast<ssize_t>(cap - std::min(cap, text.size())))));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return std::nullopt;
  return text;
}

change_feed::change_feed() {
  if (!std::getenv("OFFLOAD_LOCK_NO_INOTIFY")) ino_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
}

change_feed::~change_feed() {
  for (int f : pidfds_) ::close(f);
  if (ino_ >= 0) ::close(ino_);
}

bool change_feed::arm_dirs(const std::vector<std::string>& dirs) {
  if (ino_ < 0) return false;
  // Adding a watch that exists only refreshes it: no event, same
  // descriptor. Removing one would queue IN_IGNORED and wake the next wait,
  // so watches are never removed here; the kernel drops those of deleted
  // directories by itself.
  for (const auto& d : dirs)
    (void)::inotify_add_watch(ino_, d.c_str(),
                              IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |
                                  IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW);
  return true;
}

change_feed::pids_armed change_feed::arm_pids(const std::vector<std::int64_t>& pids) {
  for (int f : pidfds_) ::close(f);
  pidfds_.clear();
  pids_armed result = pids_armed::ok;
  for (std::int64_t pid : pids) {
    const long f = open_pidfd(pid);
    if (f >= 0) {
      ::fcntl(static_cast<int>(f), F_SETFD, FD_CLOEXEC);
      pidfds_.push_back(static_cast<int>(f));
    } else if (errno == ESRCH) {
      return pids_armed::gone;
    } else {
      result = pids_armed::unwatched;
    }
  }
  return result;
}

bool change_feed::wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds) {
  std::vector<struct pollfd> fds;
  fds.reserve(extra_fds.size() + 1 + pidfds_.size());
  for (int f : extra_fds) fds.push_back({f, POLLIN, 0});
  if (ino_ >= 0) fds.push_back({ino_, POLLIN, 0});
  for (int f : pidfds_) fds.push_back({f, POLLIN, 0});
  int t = timeout_ms < 0 ? -1 : timeout_ms > 3'600'000 ? 3'600'000 : static_cast<int>(timeout_ms);
  int r;
  do r = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), t);
  while (r < 0 && errno == EINTR);
  for (std::size_t i = 0; i < extra_fds.size(); ++i)
    if (fds[i].revents) return false;
  if (ino_ >= 0) {
    char buf[4096];
    while (::read(ino_, buf, sizeof buf) > 0) {
    }
  }
  return true;
}

}  // namespace offload_lock::detail::proc
