// Running a helper program with a time limit. See os/programs.hpp.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "os/clock.hpp"
#include "os/programs.hpp"

namespace offload_lock::detail::sys {

namespace {

// How often a program that closed its output is checked for having exited.
constexpr int reap_poll_ms = 5;

// Reaps `pid` if it has exited by `deadline` (monotonic ms); kills it at the
// deadline otherwise. The exit status, or nullopt when it had to be killed.
std::optional<int> reap_by(pid_t pid, std::int64_t deadline) {
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (r == 0 && monotonic_ms() >= deadline) break;
    if (r == 0) ::poll(nullptr, 0, reap_poll_ms);
  }
  ::kill(pid, SIGKILL);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return std::nullopt;
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
  // One deadline for the whole run, the output and the exit alike: a
  // program that closes its output and stays must not outlive it.
  const std::int64_t deadline = monotonic_ms() + timeout_ms;
  for (;;) {
    const std::int64_t left = deadline - monotonic_ms();
    if (left <= 0) break;
    struct pollfd p = {out[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 60'000)));
    if (ready <= 0) continue;  // EINTR, or the time left has passed (checked above)
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const std::size_t room = cap - std::min(cap, text.size());
    text.append(buf, std::min(static_cast<std::size_t>(n), room));
  }
  ::close(out[0]);
  const auto st = reap_by(pid, deadline);
  if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0) return std::nullopt;
  return text;
}

}  // namespace offload_lock::detail::sys
