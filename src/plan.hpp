// A plan made once: lock_options validated and turned into the narrow inputs
// each step of an acquisition reads (judging, waiting, the queue entry, the
// meta.json record, holding, reporting). Nothing after make_plan() checks an
// option again, and nothing before it patches one (the C API and the CLI
// pass what their callers gave; the CLI asks with_site_policy() first, to
// tell its user, and that applied again here changes nothing more).
#ifndef OFFLOAD_LOCK_SRC_PLAN_HPP
#define OFFLOAD_LOCK_SRC_PLAN_HPP

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "meta.hpp"
#include "offload_lock/lock.hpp"
#include "timing.hpp"

namespace offload_lock::detail {

// What a judgment needs (judge.hpp).
struct judging {
  std::int64_t ttl_ms = 0;
  std::int64_t grace_ms = 0;
};

// What the queue entry says of this waiter (registry.hpp).
struct entry_plan {
  bool queue = true;      // lock_options::register_waiter: a waiter that does not register does not queue
  std::string label;      // within the entry's cap whatever the caller gave
  int priority = 0;
  std::int64_t expect_ms = 0;
  int gpu = -1;           // the one slot asked for; -1 for a wait among several
  int gpus = 1;           // how many slots it waits among
  std::vector<int> slots; // a wait among some of the slots: those (at most max_listed_slots)
};

// What a held lock needs (heartbeat.hpp).
struct holding {
  bool heartbeat = true;
  std::function<void(const error&)> on_lost;
  std::function<void(const yield_request&)> on_yield;
  std::int64_t max_hold_ms = 0;  // 0: none
  // The site policy's idle rule (idle.hpp); idle_after_ms 0: none.
  std::int64_t idle_after_ms = 0;
  int idle_percent = 0;
  bool idle_yield = false;
};

// What a waiting acquisition reports (wait.hpp).
struct reporting {
  std::function<void(const info&)> on_wait;
  std::function<void(const wait_progress&)> on_progress;
  std::int64_t progress_every_ms = 0;
};

struct plan {
  std::string base;        // slot 0's lock path: the queue's registry lives beside it
  std::vector<int> slots;  // the slots this acquisition may take, the one to try first first
  bool one_slot = true;    // a plain lock, or one named slot (it stages for the handoff)
  bool slotted = false;    // GPU slots are in use: meta.json records the slot taken
  judging judge;
  deadline until = deadline::forever();
  std::vector<int> cancel_fds;
  bool inherit = true;
  std::string lease_class = "media";  // the gpulease lease taken with the lock (lease_join.hpp)
  entry_plan entry;
  // The meta.json record, all but what each claim fills in (startedAt, the
  // slot, those passed over).
  meta_record record;
  holding hold;
  reporting report;
};

// Priority bounds (lock_options::priority).
inline constexpr int lowest_priority = -100, highest_priority = 100;

// Applies the site policy of the lock (policy.hpp), validates `asked` and makes
// the plan for an acquisition of the lock at `base` (the resolved path, slot
// 0's). errc::bad_input naming the option for any option out of range, or
// naming an invalid site policy; ESRCH for a holder pid that is not alive. The
// deadline starts now.
result<plan> make_plan(const lock_options& asked, const std::string& base);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_PLAN_HPP
