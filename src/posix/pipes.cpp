// The seam's pipes and waits (os/files.hpp) on Linux: a wake pipe, one
// read or write that never blocks (nor raises SIGPIPE), and the wait for
// any of some descriptors.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>
#include <vector>

#include "os/files.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

result<std::pair<fd, fd>> make_pipe() {
  int p[2];
  if (calls.pipe2(p, O_CLOEXEC) != 0) return sys_error(errno, "pipe", "");
  if (calls.fcntl_int(p[0], F_SETFL, O_NONBLOCK) != 0) {
    const int e = errno;
    calls.close(p[0]);
    calls.close(p[1]);
    return sys_error(e, "fcntl(F_SETFL)", "pipe");
  }
  return std::make_pair(fd(p[0]), fd(p[1]));
}

void notify(int write_end) {
  char c = 1;
  (void)write_some(write_end, &c, 1);
}

long read_some(int f, char* buf, std::size_t n) {
  return static_cast<long>(retry([&] { return calls.read(f, buf, n); }));
}

long write_some(int f, const char* buf, std::size_t n) {
  // A pipe or FIFO whose reader has gone raises SIGPIPE, which would kill a
  // host process that did not ask for it: blocked on this thread around the
  // write, and a SIGPIPE this write raised is taken back before unblocking.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  ::pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const bool was_pending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  const long r = static_cast<long>(retry([&] { return calls.write(f, buf, n); }));
  const int e = errno;
  if (r < 0 && e == EPIPE && !was_pending) {
    struct timespec zero {0, 0};
    while (::sigtimedwait(&pipe_only, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  errno = e;
  return r;
}

void drain(int read_end) {
  char buf[256];
  while (calls.read(read_end, buf, sizeof buf) > 0) {
  }
}

int wait_any(const std::vector<int>& fds, std::int64_t timeout_ms) {
  std::vector<struct pollfd> p;
  p.reserve(fds.size());
  for (int f : fds) p.push_back({f, POLLIN, 0});
  const std::int64_t deadline = timeout_ms < 0 ? -1 : deadline_in(timeout_ms);
  for (bool first = true;; first = false) {
    const int r = poll_toward(p, deadline, first);
    if (r == 0) return -1;
    if (r < 0) continue;
    for (std::size_t i = 0; i < p.size(); ++i)
      if (p[i].revents) return static_cast<int>(i);
  }
}

void wait_readable(std::initializer_list<int> fds, std::int64_t timeout_ms) {
  std::vector<struct pollfd> p;
  for (int f : fds)
    if (f >= 0) p.push_back({f, POLLIN, 0});
  const std::int64_t deadline = timeout_ms < 0 ? -1 : deadline_in(timeout_ms);
  for (bool first = true; poll_toward(p, deadline, first) < 0; first = false) {
  }
}

}  // namespace offload_lock::detail::sys
