// The seam's clocks and randomness (os/clock.hpp), and the one poll toward a
// deadline (common.hpp) that every wait of the library uses.
#include "os/clock.hpp"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>

#include "os/test_hooks.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

std::int64_t now_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ts_ms(t) + clock_skew_ms();
}

std::int64_t monotonic_us() {
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1'000;
}

std::int64_t monotonic_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return ts_ms(t);
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = calls.getrandom(&raw[got], bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // No entropy source at all: fall back to something unique enough for
      // staging names (pid, time); tokens then stay unique per acquisition.
      (void)std::snprintf(raw.data(), bytes, "%lx%lx", static_cast<long>(::getpid()),
                          static_cast<long>(monotonic_ms()));
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(bytes * 2);
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::int64_t deadline_in(std::int64_t timeout_ms) { return monotonic_ms() + timeout_ms; }

int poll_toward(std::vector<struct pollfd>& fds, std::int64_t deadline, bool first) {
  int t = -1;
  if (deadline >= 0) {
    const std::int64_t left = deadline - monotonic_ms();
    if (left <= 0 && !first) return 0;
    t = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : static_cast<int>(left);
  }
  const int r = calls.poll(fds.data(), static_cast<nfds_t>(fds.size()), t);
  if (r > 0) return r;
  if (r < 0) return errno == EINTR ? -1 : 0;
  return deadline >= 0 && monotonic_ms() >= deadline ? 0 : -1;
}

}  // namespace offload_lock::detail::sys
