// offload_lock::gpu_mutex: the machine-wide lock in the shape of a standard
// mutex (Lockable), for std::lock_guard / std::unique_lock / std::scoped_lock.
#ifndef OFFLOAD_LOCK_MUTEX_HPP
#define OFFLOAD_LOCK_MUTEX_HPP

#include <system_error>

#include "offload_lock/lock.hpp"

namespace offload_lock {

// One object shared by the threads of a process:
//
//   offload_lock::gpu_mutex gpu;                 // resolve_path(), wait forever
//   { std::lock_guard<offload_lock::gpu_mutex> g(gpu); render(); }
//
// lock() blocks (threads of this process queue by priority then arrival, B10) and
// throws std::system_error when the lock cannot be taken for a reason other
// than contention (a missing parent, a stale lock that cannot be removed), or
// when options.wait ends first (errc::timed_out). try_lock() tries once and
// returns false when someone else holds it. unlock() releases; a lock that
// had been taken away meanwhile is reported through options.on_lost, not by
// unlock(). Like std::mutex, locking it again on the thread that holds it is
// not allowed (use lock::acquire for nested acquisitions).
class gpu_mutex {
 public:
  gpu_mutex() = default;
  explicit gpu_mutex(lock_options options) : options_(std::move(options)) {}
  gpu_mutex(const gpu_mutex&) = delete;
  gpu_mutex& operator=(const gpu_mutex&) = delete;

  void lock() {
    auto l = offload_lock::lock::acquire(options_);
    if (!l) throw std::system_error(l.error().code(), l.error().context());
    held_ = std::move(*l);
  }
  bool try_lock() {
    lock_options once = options_;
    once.wait = milliseconds(0);
    auto l = offload_lock::lock::acquire(once);
    if (!l) {
      if (l.error() == errc::busy) return false;
      throw std::system_error(l.error().code(), l.error().context());
    }
    held_ = std::move(*l);
    return true;
  }
  void unlock() {
    // Only the owning thread touches held_: the lock itself serializes them.
    offload_lock::lock released = std::move(held_);
    (void)released.release();
  }

 private:
  lock_options options_;
  offload_lock::lock held_;
};

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_MUTEX_HPP
