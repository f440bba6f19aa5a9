// Who waits for the lock: the queue registry next to the lock
// (`.<name>.queue/`, one directory per user in it) where every waiting
// offload-lock process keeps one small entry, write-locked while it lives,
// until it stops waiting. Arrival is the entry's ctime, set by the kernel.
// Advisory: exclusion never depends on it (doc/protocol.md).
#ifndef OFFLOAD_LOCK_WAITERS_HPP
#define OFFLOAD_LOCK_WAITERS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"

namespace offload_lock {

// One process waiting for the lock. The strings are the waiter's own words:
// escape them before a terminal or a parser sees them.
struct waiter {
  std::int64_t pid = 0;    // the waiting process
  std::string label, host;
  std::int64_t since = 0;  // when its wait began, epoch ms
  milliseconds waited{0};  // now - since
  int gpu = -1;            // the GPU slot it asked for; -1: the first free of `gpus`
  int gpus = 1;            // how many slots it waits among
  int priority = 0;        // lock_options::priority: higher is served first
  milliseconds expected{0};  // its declared duration (lock_options::expected); 0: undeclared
  // Its place in the queue: 1 + the waiters listed before it that would
  // take a slot it would take (for a plain lock: its index + 1).
  int position = 0;
  // When it should hold the lock: the holder's expected free time (0 when
  // free) plus the declared durations of the waiters ahead that would take
  // its slot; nullopt once one of them (or the holder) declared nothing,
  // and for a wait among several slots.
  std::optional<milliseconds> eta;
};

// The processes waiting for the lock at `path` (slot 0's path when there are
// several GPU slots), in the order the lock serves them: priority (highest
// first), then arrival. An entry counts only while its process keeps it
// write-locked (which no other user can fake) and is alive; entries whose
// process is gone (dead, a zombie, its pid reused, or from before a reboot)
// are left out.
// - Never blocks; an unreadable or missing registry reads as no waiters.
// - A process is listed from the moment it starts to wait. Thread-safe.
OFFLOAD_LOCK_API std::vector<waiter> waiters(const std::string& path);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_WAITERS_HPP
