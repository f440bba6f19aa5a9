// Running a helper command with a time limit. See command.hpp.
#include "posix/command.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "posix/sys.hpp"

namespace offload_lock::cli::os {

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
  const std::int64_t deadline = detail::sys::monotonic_ms() + timeout_ms;
  bool timed_out = false;
  for (;;) {
    const std::int64_t left = deadline - detail::sys::monotonic_ms();
    struct pollfd p = {out[0], POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 60'000))) == 0) {
      timed_out = detail::sys::monotonic_ms() >= deadline;
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

}  // namespace offload_lock::cli::os
