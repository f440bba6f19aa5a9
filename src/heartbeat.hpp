// One held lock and its heartbeat (PROTOCOL B7): checking that the lock is
// still ours, refreshing meta.json's mtime well inside the TTL, noticing at
// once when someone else removes or replaces it, and the one process-wide
// thread that does this for every lock the process holds.
#ifndef OFFLOAD_LOCK_SRC_HEARTBEAT_HPP
#define OFFLOAD_LOCK_SRC_HEARTBEAT_HPP

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "lock_dir.hpp"
#include "offload_lock/error.hpp"
#include "offload_lock/inspect.hpp"
#include "waiters.hpp"

namespace offload_lock::detail {

// The state of one held acquisition of the lock directory.
struct held_state {
  target t;
  sys::fd dir;   // the lock directory
  sys::fd meta_fd;  // its meta.json, holding the OFD write lock: proof of life
  sys::file_id id;
  std::int64_t owner_pid = 0;  // the process that took it: a forked child's copy does nothing
  std::string token, meta;
  std::int64_t pid = 0;
  std::int64_t ttl = 0;
  std::function<void(const error&)> on_lost;
  bool released = false;

  // Cooperative yield (lock_options::on_yield_request): asked once, when a
  // live waiter of a higher priority than `priority` queues for slot
  // `slot` of the lock whose registry is next to `registry_path`.
  std::function<void(const yield_request&)> on_yield;
  int priority = 0;
  int slot = 0;
  std::string registry_path;
  std::atomic<bool> yield_asked{false};
  std::unique_ptr<registry_reader> yield_reader;  // the heartbeat thread's

  // Kept by the heartbeat service (under its mutex).
  bool registered = false;
  int watch_id = -1;
  bool watch_tried = false;
  int yield_watch_id = -1;        // the registry (or, while it is missing, its parent)
  bool yield_on_registry = false;  // yield_watch_id watches the registry itself
  std::int64_t held_since = 0;  // monotonic ms, when the service took it
  std::int64_t next_touch = 0;

  // The refresh period: TTL/4, between 100 ms and 60 s.
  std::int64_t period() const;
  // Same directory at the path, with our token in its meta.json, and this
  // the process that took it.
  bool still_ours() const;
  // This is the process that took the lock (not a forked child of it).
  bool in_owner() const;
  // Refreshes meta.json's mtime (errors ignored: the next refresh retries,
  // and the OFD lock and the pid rule keep the lock held meanwhile).
  void touch();

  enum class kept { lost, holder_exited };
  // For a lock held on behalf of another process: blocks, refreshing the
  // mtime, until the lock is lost or the recorded holder exits.
  kept keep_until_holder_exits();

  // Leaves the heartbeat thread (a no-op when not registered).
  void stop_heartbeat();
  // B5: removes the directory only if it is still ours (release.cpp).
  error release();
};

// Hands `s` to the process's heartbeat thread, which refreshes it every
// period() and calls its on_lost when it is removed or replaced.
void start_heartbeat(const std::shared_ptr<held_state>& s);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_HEARTBEAT_HPP
