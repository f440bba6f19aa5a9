// A descriptor that becomes readable once a period (timerfd), for a view
// that moves its clocks without looking at anything again, and a pipe that
// one thread pokes to wake another's wait.
#ifndef OFFLOAD_LOCK_SRC_POSIX_TICKER_HPP
#define OFFLOAD_LOCK_SRC_POSIX_TICKER_HPP

#include <cstdint>

namespace offload_lock::cli::os {

class ticker {
 public:
  // Stopped until run(true).
  explicit ticker(std::int64_t period_ms);
  ~ticker();
  ticker(const ticker&) = delete;
  ticker& operator=(const ticker&) = delete;
  int fd() const { return fd_; }  // -1 when the kernel has no timerfd
  // Starts (a period from now) or stops it; a no-op when already so.
  void run(bool on);
  // Whether the period has passed since the last take (and resets it).
  bool take();

 private:
  int fd_ = -1;
  std::int64_t period_ms_;
  bool running_ = false;
};

class wake_pipe {
 public:
  wake_pipe();
  ~wake_pipe();
  wake_pipe(const wake_pipe&) = delete;
  wake_pipe& operator=(const wake_pipe&) = delete;
  int read_fd() const { return r_; }
  void poke();  // safe from any thread and from a signal handler
  void drain();

 private:
  int r_ = -1, w_ = -1;
};

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_TICKER_HPP
