// The queue section's machinery: many short-lived waiter processes writing
// their lines into one shared pipe (a fleet), and the scenarios measured on
// them (order, wakeups, junk entries, v1 runners barging, handoff behind a
// queue). bench.cpp prints and judges what these return.
#ifndef OFFLOAD_LOCK_BENCH_QUEUE_BENCH_HPP
#define OFFLOAD_LOCK_BENCH_QUEUE_BENCH_HPP

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "util.hpp"

namespace bench::qbench {

// One line of a fleet member: "ID KIND VALUES..." (KIND w, a, ready, e, ...).
struct event {
  std::string id, kind, text;
  std::vector<std::int64_t> v;
};

// Processes whose stdout is one pipe (lines below PIPE_BUF arrive whole);
// stdin and stderr are /dev/null. The destructor kills and reaps whatever
// is left.
class fleet {
 public:
  fleet();
  ~fleet();
  fleet(const fleet&) = delete;
  fleet& operator=(const fleet&) = delete;
  pid_t spawn(const std::string& id, const std::vector<std::string>& argv);
  // The next line of anyone (backlog first); nullopt on timeout.
  std::optional<event> next(int timeout_ms);
  // The next line of `id` with `kind`; the others go to the backlog. Throws
  // on timeout or on an "e" line of `id`.
  event expect(const std::string& id, const std::string& kind, int timeout_ms);
  pid_t pid(const std::string& id) const;
  void kill(const std::string& id);                  // SIGKILL and reap
  bool wait_exit(const std::string& id, int timeout_ms);  // reaps; false on timeout
  void kill_all();

 private:
  int r_ = -1, w_ = -1;
  line_reader in_;
  std::map<std::string, pid_t> live_;
  std::deque<event> backlog_;
};

// A waiter that held the lock (or was killed) as the scenarios record it.
struct waiter_run {
  std::string id;
  int arrival = 0;  // rank of arrival (each joined before the next started)
  int priority = 0;
  // Calling acquire, waiting (joined), held, about to release (ns); the
  // queue's own arrival stamp lies between s and w.
  std::int64_t s = 0, w = 0, a = 0, r = 0;
  std::int64_t vol_end = 0, cpu_end = 0;    // voluntary switches and CPU ns of the whole process at the end
  std::int64_t vol_held = 0, cpu_held = 0;  // the same right after it held
  bool served = false, killed = false, nowait = false;
};

struct order_result {
  int inversions = 0;          // served before an earlier arrival of the same priority
  int priority_violations = 0; // served before a higher priority that was already waiting
  int overlaps = 0;            // a hold that began before the previous one ended
};
// An inversion: i served before j of the same priority although j had
// joined (w) before i even called acquire (s), so that i arrived later
// whatever the moment between s and w the queue stamped as its arrival.
order_result check_order(const std::vector<waiter_run>& runs);

struct fifo_result {
  int handoffs = 0, waiters = 0, batches = 0, killed_queued = 0, killed_draining = 0, high_priority = 0;
  double min_arrival_gap_ms = 0;
  order_result order;
  double seconds = 0;
  std::string error;
};
// Batches of `batch` waiters queue behind this process (arrivals at least
// `gap_ms` apart, every 5th with priority 10); about one in eight is
// SIGKILLed while queued, one more right after the release, until
// `handoffs` waiters have held the lock.
fifo_result fifo(const std::string& self, const std::string& lock, int handoffs, int batch, int gap_ms,
                 std::mt19937& rng);

struct drain_result {
  int waiters = 0;
  int with_inotify = 0;           // waiters holding an inotify instance while queued
  std::int64_t voluntary = 0;     // summed over the waiters, from just before the release to their exit
  std::int64_t cpu_ns = 0;        // the same for CPU time
  std::int64_t voluntary_waiting = 0, cpu_waiting_ns = 0;  // the same up to the moment each held
  std::vector<double> whole_cpu_ms;  // each waiter's CPU time over its whole life
  double drain_ms = 0;            // release -> last waiter held
  // Each handoff (previous holder's r -> next one's a), split by whether the
  // next one had an inotify descriptor while queued.
  std::vector<double> handoff_watching_ms, handoff_polling_ms;
  order_result order;
  std::string error;
};
// `n` waiters queue behind this process one after another, then it
// releases and they drain (each holds and releases at once).
drain_result drain(const std::string& self, const std::string& lock, int n);

struct plant_result {
  int planted = 0;
  uid_t uid = 0;
  bool other_user = false;
  std::string error;
};
// Plants `count` junk entries in the registry of `lock` (made world-writable
// and sticky, as in /tmp), as uid `as_uid` when this process is root.
// `kind`: mix (half 60 KiB garbage, half forged entries), big or forged.
plant_result plant_junk(const std::string& self, const std::string& lock, int count, uid_t as_uid,
                        const std::string& kind);

struct barging_result {
  int v1_runners = 0, queued_depth = 0;
  // Releases inside the window with an offload-lock waiter queued, by who
  // took the lock next; and releases with nobody queued (open to anyone).
  int lib_acquisitions = 0, v1_acquisitions = 0, releases_unqueued = 0;
  // Offload-lock holds whose lock a v1 runner removed (v1 judges a lock
  // without a readable meta.json stale and rm -rf's the path).
  int lost = 0;
  order_result order;  // overlaps across both kinds; inversions among the queue's waiters
  double seconds = 0;
  std::string error;
};
// `runners` v1 runners (Node, the reference runner) loop acquire -> hold
// `hold_ms` -> release -> pause on the lock while offload-lock waiters keep
// a queue of `depth` (each holding `hold_ms`), for `ms`.
barging_result v1_barging(const std::string& self, const std::string& node, const std::string& helper,
                          const std::string& lock, int runners, int depth, int hold_ms, int ms);

struct queued_handoff_result {
  std::vector<double> ms;        // handoffs with at least `depth` waiters queued at the release
  std::vector<double> all_ms;    // every handoff
  std::vector<int> depths;       // waiters queued at each release
  order_result order;
  std::string error;
};
// Waiters hold 5-25 ms each and the queue is topped up as it moves, so that
// about `depth` wait at each release; `rounds` handoffs (holder's stamp
// just before release() -> next waiter's stamp right after it holds).
queued_handoff_result queued_handoff(const std::string& self, const std::string& lock, int depth, int rounds);

// The per-user inotify instance limit (/proc/sys/fs/inotify/max_user_instances); -1 unknown.
int inotify_instance_limit();

}  // namespace bench::qbench

#endif  // OFFLOAD_LOCK_BENCH_QUEUE_BENCH_HPP
