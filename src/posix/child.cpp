// Child processes of the offload-lock command. See child.hpp.
#include "posix/child.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "posix/signals.hpp"
#include "posix/sys.hpp"

namespace offload_lock::cli::os {

namespace {

void close_fd(int& f) {
  if (f >= 0) ::close(f);
  f = -1;
}

// Reads exactly `n` bytes (async-signal-safe): false on EOF or an error.
bool read_full(int f, char* into, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(f, into + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// In the forked child, async-signal-safe: reads the late variables from
// the gate into `buf` (max_late_bytes + 1) and puts each into `env` (the
// first `count` entries in use, room for max_late more and the null),
// replacing a variable of the same name. false on a short read or a block
// larger than agreed.
bool take_late(int gate, char* buf, char** env, std::size_t count) {
  std::uint32_t size = 0;
  if (!read_full(gate, reinterpret_cast<char*>(&size), sizeof size)) return false;
  if (size > gated_child::max_late_bytes || !read_full(gate, buf, size)) return false;
  buf[size] = '\0';
  std::size_t added = 0;
  for (std::size_t at = 0; at < size;) {
    char* entry = buf + at;
    std::size_t len = 0;
    while (at + len < size && entry[len] != '\0') ++len;
    at += len + 1;
    std::size_t key = 0;
    while (key < len && entry[key] != '=') ++key;
    if (key == 0 || key == len) continue;
    std::size_t i = 0;
    for (; i < count; ++i) {
      std::size_t j = 0;
      while (j <= key && env[i][j] == entry[j]) ++j;
      if (j > key) break;  // the same NAME=
    }
    if (i < count) {
      env[i] = entry;
    } else if (added < gated_child::max_late) {
      env[count + added++] = entry;
    }
  }
  return true;
}

}  // namespace

result<gated_child> gated_child::fork_gated(const std::vector<std::string>& argv, const env_list& env,
                                            const std::vector<env_list>& variants, bool die_with_parent) {
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
  // Each environment keeps room for the late variables start() sends, and
  // one buffer receives them: nothing is allocated after fork.
  std::vector<std::vector<char*>> cenvs(env_strings.size());
  for (std::size_t v = 0; v < env_strings.size(); ++v) {
    for (auto& s : env_strings[v]) cenvs[v].push_back(s.data());
    cenvs[v].resize(cenvs[v].size() + max_late + 1, nullptr);
  }
  std::vector<char> late(max_late_bytes + 1, '\0');

  int gate[2], report[2];
  if (::pipe2(gate, O_CLOEXEC) != 0) return detail::sys::sys_error(errno, "pipe", "for " + argv[0]);
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(gate[0]);
    ::close(gate[1]);
    return detail::sys::sys_error(e, "pipe", "for " + argv[0]);
  }
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    for (int f : {gate[0], gate[1], report[0], report[1]}) ::close(f);
    return detail::sys::sys_error(e, "fork", "for " + argv[0]);
  }
  if (pid == 0) {
    if (die_with_parent) {
      (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
      // Died before the request took effect: the signal will never come.
      if (::getppid() != parent) ::_exit(127);
    }
    ::close(gate[1]);
    ::close(report[0]);
    int go = -1;  // the environment variant to start with, +1
    ssize_t n;
    do n = ::read(gate[0], &go, sizeof go);
    while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof go)) ::_exit(127);
    std::size_t v = go > 0 && static_cast<std::size_t>(go) < cenvs.size() ? static_cast<std::size_t>(go) : 0;
    if (!take_late(gate[0], late.data(), cenvs[v].data(), env_strings[v].size())) ::_exit(127);
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

error gated_child::start(int variant, const env_list& late) {
  // Handlers first: a signal that arrives as soon as CMD runs waits in the
  // self-pipe and is passed on by wait_forwarding().
  (void)catch_signals();
  // The child may have been killed while it waited at the gate: then the
  // write fails with EPIPE, which must not kill this process with SIGPIPE.
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);
  // The slot, then the late variables: their size and "NAME=VALUE\0" each.
  std::string block;
  for (const auto& [name, value] : late) block += name + "=" + value + '\0';
  if (late.size() > max_late || block.size() > max_late_bytes) {
    ::sigaction(SIGPIPE, &old, nullptr);
    return error(errc::bad_input, "too many variables for the command's environment");
  }
  const int go = variant + 1;
  const auto size = static_cast<std::uint32_t>(block.size());
  std::string message(reinterpret_cast<const char*>(&go), sizeof go);
  message.append(reinterpret_cast<const char*>(&size), sizeof size);
  message += block;
  int write_errno = 0;
  for (std::size_t off = 0; off < message.size();) {
    const ssize_t w = ::write(gate_, message.data() + off, message.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      write_errno = errno;
      break;
    }
    off += static_cast<std::size_t>(w);
  }
  ::sigaction(SIGPIPE, &old, nullptr);
  close_fd(gate_);
  if (write_errno) {
    close_fd(report_);
    int st = 0;
    while (::waitpid(static_cast<pid_t>(pid_), &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    ended_before_start_ = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    return detail::sys::sys_error(write_errno, "start", "command (it ended before it could start)");
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
    return detail::sys::sys_error(e, "exec", "command");
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

int gated_child::wait_forwarding() { return *wait_forwarding_for(-1); }

std::optional<int> gated_child::wait_forwarding_for(std::int64_t timeout_ms) {
  const int sig_fd = catch_signals();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (auto status = ended()) return *status;
    if (reaped_) return 1;
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      // SIGCHLD wakes the poll when the child ends; poll's int caps a wait.
      wait_ms = static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000));
    }
    struct pollfd fds[1] = {{sig_fd, POLLIN, 0}};
    if (::poll(fds, 1, wait_ms) <= 0) continue;
    while (auto m = next_caught()) {
      if (is_child_exit(*m)) continue;
      // A terminal's signal reaches the whole foreground process group, the
      // child included; only signals sent to this process alone are passed on.
      if (m->sent_to_process) ::kill(static_cast<pid_t>(pid_), m->signo);
    }
  }
}

result<bool> fork_detached() {
  pid_t pid = ::fork();
  if (pid < 0) return detail::sys::sys_error(errno, "fork", "background keeper");
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

}  // namespace offload_lock::cli::os
