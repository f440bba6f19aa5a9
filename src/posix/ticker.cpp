// A periodic descriptor and a wake pipe. See ticker.hpp.
#include "posix/ticker.hpp"

#include <fcntl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace offload_lock::cli::os {

ticker::ticker(std::int64_t period_ms)
    : fd_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)), period_ms_(period_ms) {}

void ticker::run(bool on) {
  if (fd_ < 0 || on == running_) return;
  running_ = on;
  struct itimerspec its {};
  if (on) {
    its.it_interval.tv_sec = static_cast<time_t>(period_ms_ / 1000);
    its.it_interval.tv_nsec = static_cast<long>((period_ms_ % 1000) * 1000000);
    its.it_value = its.it_interval;
  }
  ::timerfd_settime(fd_, 0, &its, nullptr);  // all zero: disarmed
}

ticker::~ticker() {
  if (fd_ >= 0) ::close(fd_);
}

bool ticker::take() {
  std::uint64_t n = 0;
  return fd_ >= 0 && ::read(fd_, &n, sizeof n) == static_cast<ssize_t>(sizeof n) && n > 0;
}

wake_pipe::wake_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
    r_ = p[0];
    w_ = p[1];
  }
}

wake_pipe::~wake_pipe() {
  if (r_ >= 0) ::close(r_);
  if (w_ >= 0) ::close(w_);
}

void wake_pipe::poke() {
  const char c = 1;
  if (w_ >= 0) (void)!::write(w_, &c, 1);
}

void wake_pipe::drain() {
  char buf[64];
  while (r_ >= 0 && ::read(r_, buf, sizeof buf) > 0) {
  }
}

}  // namespace offload_lock::cli::os
