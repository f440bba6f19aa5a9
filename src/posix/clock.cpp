// The seam's clocks and randomness (os/clock.hpp), and the one poll toward a
// deadline (common.hpp) that every wait of the library uses.
#include "os/clock.hpp"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>

#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

namespace {

// A clock in microseconds. clock_gettime does not fail for these clocks; if
// it ever does (an injected fault), the last reading stands, so that no
// deadline or age jumps to 1970.
std::int64_t read_us(clockid_t c, std::atomic<std::int64_t>& last) {
  struct timespec t {};
  if (calls.clock_gettime(c, &t) != 0) return last.load(std::memory_order_relaxed);
  const std::int64_t us = static_cast<std::int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1'000;
  last.store(us, std::memory_order_relaxed);
  return us;
}

std::atomic<std::int64_t> g_last_real{0}, g_last_mono{0};

}  // namespace

std::int64_t now_ms() { return read_us(CLOCK_REALTIME, g_last_real) / 1000 + clock_skew_ms(); }

std::int64_t monotonic_us() { return read_us(CLOCK_MONOTONIC, g_last_mono); }

std::int64_t monotonic_ms() { return read_us(CLOCK_MONOTONIC, g_last_mono) / 1000; }

namespace {

// Fills `out` from getrandom(); false when there is no entropy source.
bool get_random(unsigned char* out, std::size_t bytes) {
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = calls.getrandom(out + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// Each thread's random bytes, drawn from the kernel a pool at a time: an
// acquisition needs a token and a name or two (28 bytes), and each draw is
// a system call. A child of fork() never uses what its parent drew (the
// pool is refilled whenever the fork generation differs), so no two
// processes make the same token or name.
struct random_pool {
  unsigned char bytes[256] = {};
  std::size_t left = 0;
  std::int64_t generation = -1;
};

bool pooled_random(unsigned char* out, std::size_t n) {
  thread_local random_pool pool;
  if (n > sizeof pool.bytes) return get_random(out, n);
  const std::int64_t gen = fork_generation();
  if (pool.generation != gen || pool.left < n) {
    pool.left = 0;
    if (!get_random(pool.bytes, sizeof pool.bytes)) return false;
    pool.left = sizeof pool.bytes;
    pool.generation = gen;
  }
  unsigned char* from = pool.bytes + (sizeof pool.bytes - pool.left);
  std::copy(from, from + n, out);
  std::fill(from, from + n, 0);  // given out once
  pool.left -= n;
  return true;
}

}  // namespace

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  if (!pooled_random(reinterpret_cast<unsigned char*>(raw.data()), bytes)) {
    // No entropy source at all: fall back to something unique enough for
    // staging names (pid, time); tokens then stay unique per acquisition.
    (void)std::snprintf(raw.data(), bytes, "%lx%lx", static_cast<long>(self_pid()), static_cast<long>(monotonic_ms()));
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

void pause_ms(std::int64_t ms) {
  (void)calls.poll(nullptr, 0, ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : static_cast<int>(ms));
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
  if (r < 0 && errno != EINTR) {
    // poll itself failed (ENOMEM, say): wait a little without it rather
    // than turn every caller's wait into a spin, and try again.
    const std::int64_t pause = t < 0 ? 10 : std::min<std::int64_t>(t, 10);
    struct timespec ts {0, static_cast<long>(pause) * 1'000'000};
    ::nanosleep(&ts, nullptr);
  }
  return deadline >= 0 && monotonic_ms() >= deadline ? 0 : -1;
}

}  // namespace offload_lock::detail::sys
