// An etcd lock taken and held (doc/etcd.md): the acquisition's wait in the
// queue the keys keep, and the held lock's lease kept alive on a thread of
// its own, which also watches the lock for a loss and for waiters that ask
// the holder to make way.
//
// The keys, under /offload-lock/lock/NAME/: `holder`, the one holder's
// record, and `queue/<lease>`, one entry per waiter; each attached to the
// lease of the process that wrote it, so that a process that dies leaves
// nothing once its lease lapses. Exclusion is the holder key alone, made
// only by a transaction that finds it absent; the queue only decides who
// tries.
#ifndef OFFLOAD_LOCK_SRC_ETCD_LOCK_HPP
#define OFFLOAD_LOCK_SRC_ETCD_LOCK_HPP

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "etcd/address.hpp"
#include "offload_lock/lock.hpp"
#include "os/files.hpp"

namespace offload_lock::detail::etcd {

// The timings of an etcd lock, each with why.
//
// The lease TTL when lock_options::ttl is left at default_ttl: a crashed
// holder's lock is taken over within 10 s, and a holder that is paused (a
// stop, a swap storm, a VM migrated) or cut off from etcd for less than
// that keeps it: keep-alives go every third of the TTL, so two may be lost
// in a row. etcd counts leases in whole seconds, and raises a TTL below its
// minimum (about 2 s with its default election timeout).
inline constexpr std::int64_t default_ttl_ms = 10'000;
// How long one call to etcd may take on one member before the next member
// is tried: a member cut off from the quorum answers nothing until etcd's
// own request timeout (7 s), so waiting for it is waiting for nothing.
inline constexpr std::int64_t per_member_ms = 2'000;
// After a failed call, how long before the next try, while waiting or
// holding (not a spin; a member back up is seen within this).
inline constexpr std::int64_t retry_ms = 500;

// The lock held by this process, as `lock` holds it (lock.cpp).
class hold : public std::enable_shared_from_this<hold> {
 public:
  ~hold();
  hold(const hold&) = delete;
  hold& operator=(const hold&) = delete;

  const std::string& url() const { return url_; }
  const std::string& token() const { return token_; }
  std::uint64_t fence() const { return fence_; }
  std::int64_t pid() const { return pid_; }
  int gpu() const { return gpu_; }
  const std::string& record_json() const { return record_json_; }
  // Passed down by the process that started this one (its `run`): nothing
  // of it is this process's to keep or release.
  bool inherited() const { return inherited_; }

  // Asks etcd whether the holder key is still the one this acquisition
  // made (within a bounded call); when etcd cannot be asked, whether the
  // lease is still good by this process's own reckoning.
  bool still_held();
  bool yield_requested() const { return yield_asked_; }
  bool max_hold_passed() const;
  // Deletes the holder key if it is still ours and revokes the lease. No
  // error when released; errc::lost when the lock had been lost (its lease
  // lapsed, or someone removed the key); a system error naming etcd when it
  // could not be reached (the lock then frees itself when the lease lapses,
  // within the TTL). Stops the thread first, so no callback runs after it
  // returns.
  error release();
  // Stops keeping the lease without releasing anything: the lock frees when
  // the lease lapses, unless a forked keeper keeps it (keep_until_holder_exits).
  void detach();
  // In a forked child (the keeper `offload-lock acquire` leaves): keeps
  // the lease alive while the recorded holder lives, releases the lock
  // when it exits. errc::lost when the lock was lost meanwhile.
  error keep_until_holder_exits();
  std::vector<std::pair<std::string, std::string>> child_environment() const;

  // Made by acquire() below, which then starts its thread.
  struct made;
  explicit hold(made m);
  void start();

 private:
  void run();
  void lose(const std::string& why);
  error finish();  // the release's etcd calls
  void stop_thread();

  address addr_;
  std::string url_, token_, record_json_;
  std::uint64_t fence_ = 0;
  std::int64_t lease_ = 0, ttl_ms_ = 0, pid_ = 0;
  int gpu_ = 0, priority_ = 0;
  bool inherited_ = false;
  std::function<void(const error&)> on_lost_;
  std::function<void(const yield_request&)> on_yield_;
  std::int64_t max_hold_ms_ = 0;
  std::int64_t taken_mono_ = 0;
  std::int64_t owner_pid_ = 0;  // the process whose thread keeps the lease

  // The thread keeping the lease; a forked child's copy is never joined.
  std::unique_ptr<std::thread> thread_;
  sys::fd stop_r_, stop_w_;
  std::atomic<bool> stopping_{false}, lost_{false}, yield_asked_{false}, max_hold_reached_{false}, done_{false};
  std::atomic<std::int64_t> valid_until_{0};  // monotonic ms: the lease is surely good before this
};

// Takes the etcd lock named by `o.path` (an etcd URL; with o.gpu = K >= 0,
// its slot K: the lock NAME.gpuK). Blocks up to o.wait. Outcomes as
// lock::acquire: busy, timed_out, cancelled, bad_input (a bad URL or
// option, several slots to choose among), a system error naming etcd
// when no member can be reached at the start. `nested` is set when this
// thread held the lock already (the same hold is returned).
result<std::shared_ptr<hold>> acquire(const lock_options& o, bool& nested);
// The outermost acquisition of this thread ended: the next one waits again.
void forget_nesting(const hold& h);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_LOCK_HPP
