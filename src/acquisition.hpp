// One acquisition of a lock, or of the first free of several GPU slots: the
// one loop of doc/protocol.md A2 with offload-lock's rules on top.
//
// It owns the slots it may take (one for a plain lock), its place in the
// queue, one watcher and one deadline, and runs one loop: look at each slot
// once; claim the one that is free and this waiter's turn; reclaim what is
// provably stale (exactly it); otherwise wait once for any change (a
// release, a holder's death, the queue moving, a swap that hands it the
// lock, the grace of a waiter ahead running out, the deadline, a cancel
// descriptor). Unknown judgments are waited for and looked at again, never
// reclaimed. Every exit path leaves no file of this acquisition behind.
#ifndef OFFLOAD_LOCK_SRC_ACQUISITION_HPP
#define OFFLOAD_LOCK_SRC_ACQUISITION_HPP

#include <memory>
#include <optional>
#include <vector>

#include "claim.hpp"
#include "handoff.hpp"
#include "heartbeat.hpp"
#include "inspect.hpp"
#include "local_gate.hpp"
#include "os/watch.hpp"
#include "plan.hpp"
#include "queue.hpp"
#include "shared_dir.hpp"
#include "wait.hpp"

namespace offload_lock::detail {

class acquisition {
 public:
  // `p` must outlive the acquisition.
  explicit acquisition(const plan& p);
  ~acquisition();
  acquisition(const acquisition&) = delete;
  acquisition& operator=(const acquisition&) = delete;

  // Runs the loop to its end: the held lock; errc::busy (a single try, held),
  // errc::timed_out, errc::cancelled; errc::bad_input; or a system error
  // naming the call and the path (the parent cannot be opened, a claim on a
  // free lock fails, a directory that is not a lock, or at the deadline a
  // lock that could not be looked at).
  result<std::shared_ptr<held_state>> run();

  // A wait among several slots by a thread of a process whose other threads
  // may hold some of them: each slot's in-process gate (local_gate.hpp) is
  // tried before the slot is claimed, and one another thread owns counts as
  // held. After run(), the gate of the slot taken (if any) is this
  // thread's; the others are left.
  void use_gates(std::vector<std::shared_ptr<local_gate>> gates);

  // The slots' lock paths, already opened by the caller (the first of them,
  // or all, in the plan's order): run() opens only those not given.
  void use_targets(std::vector<target> targets) { targets_ = std::move(targets); }

  // The caller takes the gpulease lease once the lock is held (acquire.cpp):
  // the lock is held from run()'s end with its lease still pending
  // (held_state::lease_pending), so nothing asks its holder to make way
  // before it holds both.
  void lease_follows() { lease_follows_ = true; }

  // The lock directory is gpulease's lease directory too (shared_dir.hpp):
  // it is judged, claimed and taken over by the rules of both, its one
  // meta.json holds the lease as well, and no waiter stages for a handoff.
  void share_with(shared_lease lease) { shared_ = std::move(lease); }

 private:
  struct slot {
    int k = 0;
    target t;
    watch_clock seen;
    armed_lock armed;
    pass_over_clock clock;
    std::unique_ptr<staged_lock> staged;
    int staged_watch = -1;
    std::int64_t staged_touch_at = 0;
    std::int64_t staged_at = 0;  // the staged meta.json's startedAt
    sys::file_id contended_id;
    std::int64_t contended_since = -1;
    info last;
    std::shared_ptr<local_gate> gate;  // with use_gates()
    bool gate_owned = false;
  };
  // What one round of looks found.
  struct round {
    bool changed = false;              // look again at once
    std::int64_t timeout = -1;         // the soonest a re-look is due (-1: none)
    std::int64_t grace_left = -1;      // a free slot is someone else's for this long
    std::optional<error> unknown;      // a look that failed, as it would be reported
    std::string waited_on;             // what the wait is for, when not a lock's holder
    std::vector<info> holders;
  };

  result<std::shared_ptr<held_state>> step(slot& s, round& r, bool active);
  // `written`: what the claim wrote into meta.json (a claim; a staged lock
  // is rewritten here).
  result<std::shared_ptr<held_state>> take(slot& s, bool claimed_by_staged, claim* c,
                                           const std::string* written = nullptr);
  void arm(slot& s, const detailed& d, round& r, bool active);
  result<detailed> look(slot& s);
  // Stages this waiter's lock for slot `s` (handoff.hpp): published where a
  // releaser looks, or (without `publish`) made only, under a private name.
  void stage(slot& s, bool publish);
  result<std::shared_ptr<held_state>> withdraw_all();
  meta_record record_for(const slot& s);
  bool queue_seen() const { return queue_read_; }
  void read_queue();

  std::vector<std::shared_ptr<local_gate>> gates_;
  std::vector<target> targets_;
  const plan& p_;
  const process_view pv_;
  std::string token_;
  std::vector<slot> slots_;
  queue_place place_;
  bool queue_read_ = false;
  bool join_failed_ = false;  // the registry could not be written: waiting unqueued
  sys::watcher w_;
  int wake_watch_ = -1, pred_watch_ = -1;
  std::int64_t pred_pid_ = 0;
  int last_own_ahead_ = -1;
  // Whether the queue may have moved since it was last read (not after a
  // wake by the lock's watches alone), whether this waiter was active then,
  // and what it saw.
  bool queue_news_ = true;
  bool last_active_ = false;
  std::optional<queue_view> last_primary_;
  std::vector<info> last_holders_;
  churn_guard churn_;
  std::int64_t unknown_backoff_ = unknown_retry_ms;
  wait_report report_;
  bool lease_follows_ = false;
  std::optional<shared_lease> shared_;
};

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_ACQUISITION_HPP
