// One acquisition (acquisition.hpp): taking the lock, claimed or swapped in,
// and the held state it becomes; a staged lock swapped in as the waiter
// gives up is taken all the same.
#include "acquisition.hpp"

#include "claim.hpp"
#include "heartbeat.hpp"
#include "idle.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

// How far meta.json's startedAt may lag the moment a staged lock is taken
// before it is written again (see take()).
constexpr std::int64_t kRestampMs = 1'000;

}  // namespace

result<std::shared_ptr<held_state>> acquisition::take(slot& s, bool staged, claim* c, const std::string* written) {
  if (staged && place_.joined() && !place_.view(s.k).ahead.empty()) {
    // Handed over past a stopped waiter still ahead in line (a releasing
    // holder skips those, handoff.cpp): it was passed over, and the record
    // says so as for any pass-over. One that joined ahead after the
    // releaser chose (of a higher priority, say) did nothing wrong: it is
    // next, not passed over. (Nobody ahead at the last read: nobody
    // skipped, and the queue is not read again on the way to holding.)
    read_queue();
    for (const auto& e : place_.view(s.k).ahead)
      if (place_.stopped(e)) place_.pass_over(e);
  }
  meta_record rec = record_for(s);
  rec.passed_over = place_.passed_still_queued();
  // Swapped in by the releasing holder, or renamed in by this waiter: the
  // record now says when it was taken, unless it was staged so recently
  // that it says so already (to within kRestampMs) and has nobody passed
  // over to name: then it stands as written (not even serialized again),
  // and the handoff costs no file made on the way to holding.
  const bool recent = staged && rec.passed_over.empty() && rec.started_at - s.staged_at < kRestampMs;
  std::string bytes = written ? *written : recent ? std::string() : serialize(rec);
  auto held = std::make_shared<held_state>();
  if (staged) {
    if (recent || s.staged->rewrite_meta(bytes)) bytes = s.staged->meta_bytes();
    // Its watch goes with the watcher, after the caller holds (acquire.cpp).
    s.staged_watch = -1;
    held->dir = s.staged->take_dir();
    held->meta_id = s.staged->meta_id();
    held->meta_fd = s.staged->take_meta();
    held->id = s.staged->id();
    s.staged.reset();
  } else {
    held->dir = std::move(c->dir);
    held->meta_fd = std::move(c->meta);
    held->id = c->id;
    held->meta_id = sys::guard_from_fork(held->meta_fd.get());
    // In a directory shared with gpulease the same meta.json is the lease.
    if (c->lease) {
      held->lease = std::move(c->lease);
      held->shared = true;
    }
  }
  held->owner_pid = sys::self_pid();
  held->token = token_;
  held->meta = bytes;
  held->pid = rec.pid;
  held->ttl = p_.judge.ttl_ms;
  held->on_lost = p_.hold.on_lost;
  held->base = p_.base;
  held->slot = s.k;
  held->passed = place_.passed();
  held->max_hold_ms = p_.hold.max_hold_ms;
  held->idle_after_ms = p_.hold.idle_after_ms;
  held->idle_percent = p_.hold.idle_percent;
  held->idle_yield = p_.hold.idle_yield;
  held->taken_at = sys::monotonic_ms();
  held->lease_pending = lease_follows_;
  if (p_.hold.on_yield) {
    held->on_yield = p_.hold.on_yield;
    held->priority = rec.priority;
  }
  // The registry was read through slot 0's parent, which may now go with
  // the held lock, and be closed by its release: any read from here on
  // opens the parent itself.
  place_.reader().borrow_parent(-1);
  held->t = std::move(s.t);
  s.gate_owned = false;  // the gate of the slot taken stays this thread's
  if (const queue_entry* me = place_.me()) held->queue_dir = me->dir;
  // Out of the queue before anyone is told (its followers move up).
  if (auto entry = place_.leave(/*taking=*/true)) held->left_behind = std::shared_ptr<registration>(std::move(entry));
  for (auto& other : slots_)
    if (other.staged) (void)other.staged->withdraw(other.t);
  if (p_.hold.heartbeat) start_heartbeat(held);
  if (held->idle_after_ms > 0) watch_idle(held, p_.base);
  return held;
}

result<std::shared_ptr<held_state>> acquisition::withdraw_all() {
  for (auto& s : slots_) {
    if (!s.staged) continue;
    if (s.staged->withdraw(s.t)) return take(s, true, nullptr);
    // Gone: staged again when this waiter is active again.
    w_.unwatch(s.staged_watch);
    s.staged_watch = -1;
    s.staged.reset();
  }
  return std::shared_ptr<held_state>();
}

}  // namespace offload_lock::detail
