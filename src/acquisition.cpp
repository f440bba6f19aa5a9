// One acquisition (acquisition.hpp): the one loop.
#include "acquisition.hpp"

#include <algorithm>
#include <mutex>

#include "claim.hpp"
#include "gpulease/location.hpp"
#include "lease_join.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "reclaim.hpp"

namespace offload_lock::detail {

namespace {

std::int64_t refresh_period(std::int64_t ttl) { return std::clamp<std::int64_t>(ttl / 4, 100, 60'000); }

// How soon a claim in a directory shared with gpulease is tried again while
// gpulease's counter lock stays taken.
constexpr std::int64_t shared_counter_retry_ms = 200;

}  // namespace

acquisition::acquisition(const plan& p)
    : p_(p),
      pv_(process_view::real()),
      token_(p.record.token.empty() ? new_token() : p.record.token),
      place_(p),
      report_(p.report) {}

acquisition::~acquisition() {
  // Every way out has withdrawn already; this covers an exception.
  for (auto& s : slots_) {
    if (s.staged) (void)s.staged->withdraw(s.t);
    if (s.gate && s.gate_owned) s.gate->leave();
  }
}

void acquisition::use_gates(std::vector<std::shared_ptr<local_gate>> gates) { gates_ = std::move(gates); }

meta_record acquisition::record_for(const slot& s) {
  meta_record rec = p_.record;
  rec.token = token_;
  rec.started_at = sys::now_ms();
  rec.gpu = p_.slotted ? s.k : -1;
  return rec;
}

void acquisition::read_queue() {
  place_.refresh();
  queue_read_ = true;
}

void acquisition::stage(slot& s, bool publish) {
  // A directory shared with gpulease is never swapped for another: it is
  // gpulease's container, holding its files.
  if (!place_.me() || shared_) return;
  if (s.staged && (s.staged->published() || !publish)) return;
  meta_record rec = record_for(s);
  if (s.staged) {
    // Made as this waiter joined, far back in line: put where the releaser
    // looks, its record as of now.
    if (s.staged->publish(s.t, serialize(rec))) {
      // Left private: out of the handoff (the releaser then releases
      // plainly). A withdrawal that finds it at the lock path leaves it for
      // the next look to take.
      if (!s.staged->withdraw(s.t)) s.staged.reset();
      return;
    }
  } else {
    s.staged = staged_lock::make(s.t, place_.me()->stem(), serialize(rec), publish);
    if (!s.staged || !publish) return;
  }
  s.staged_at = rec.started_at;
  s.staged_watch = w_.watch_lock(s.staged->path(), false);
  s.staged_touch_at = sys::monotonic_ms() + refresh_period(p_.judge.ttl_ms);
}

void acquisition::arm(slot& s, const detailed& d, round& r, bool active) {
  if (!active) {
    s.armed.disarm(w_);
    return;
  }
  auto a = s.armed.arm(w_, s.t, d.o.snap, d.v, queue_poll_ms);
  if (!a) {
    r.changed = true;
    return;
  }
  r.timeout = sooner(r.timeout, *a);
}

result<detailed> acquisition::look(slot& s) {
  if (shared_) return inspect_shared(s.t, p_.judge.ttl_ms, p_.judge.grace_ms, pv_, shared_->pv, &s.seen, false);
  return inspect_target(s.t, p_.judge.ttl_ms, p_.judge.grace_ms, pv_, &s.seen, false);
}

result<std::shared_ptr<held_state>> acquisition::step(slot& s, round& r, bool active) {
  // Handed over: the releasing holder swapped the staged lock in. One stat
  // says so, before any look (the way to holding after a handoff).
  if (s.staged && s.staged->published() && s.staged->at_lock_path(s.t)) return take(s, true, nullptr);
  auto d = look(s);
  if (!d) {
    // Not even a stat of the lock path: unknown, looked at again.
    r.unknown = d.error();
    r.timeout = sooner(r.timeout, unknown_backoff_);
    return std::shared_ptr<held_state>();
  }
  d->o.dir.reset();  // an open directory holds back IN_DELETE_SELF
  // Handed over while it looked: the directory it looked at is the staged
  // one. (A swap after the look renames the staged directory, which its
  // watch reports: looked at again then.)
  if (s.staged && d->o.snap.present && s.staged->is(d->o.snap.id)) return take(s, true, nullptr);
  const snapshot& snap = d->o.snap;
  const verdict& v = d->v;
  if (snap.present && !snap.is_dir) return not_a_lock_directory(s.t.path, snap);
  if (v.not_a_lock()) return not_a_lock_error(s.t.path, v);
  s.last = d->i;

  if (!v.free()) {
    s.clock.held();
    if (v.unknown()) {
      r.unknown = error(std::error_code(v.error ? v.error : EIO, std::system_category()),
                        s.t.path + ": " + v.reason);
      r.timeout = sooner(r.timeout, unknown_backoff_);
    }
    // Whom the holder passed over are passed over here too; a waiter that
    // finds itself among them queues again, at the back of its priority
    // (passed over is not out).
    if (place_.joined() && snap.meta_exists && !snap.meta.passed_over.empty() &&
        place_.learn_passed(snap.meta.passed_over)) {
      auto h = withdraw_all();
      if (!h || *h) return h;
      place_.rejoin();
      r.changed = true;
      return std::shared_ptr<held_state>();
    }
    r.holders.push_back(d->i);
    arm(s, *d, r, active);
    return std::shared_ptr<held_state>();
  }

  // Free (absent) or stale: this waiter's only when nobody is ahead for it
  // as the queue stands after this look. A queue read before it may still
  // list one that has since taken the lock and let it go (a waiter leaves
  // the queue as it takes the lock, before it can release): waiting for it
  // would leave the free lock unclaimed until those behind this waiter pass
  // it over, and serve them first.
  const bool read_before_look = queue_read_;
  if (!read_before_look) read_queue();
  queue_view view = place_.view(s.k);
  if (read_before_look && !view.ahead.empty()) {
    read_queue();
    view = place_.view(s.k);
  }
  if (!view.ahead.empty()) {
    const std::uint32_t my_uid = place_.me() ? place_.me()->uid : sys::effective_uid();
    const queue_entry& front = view.ahead.front();
    const std::int64_t left = place_.stopped(front) ? 0 : s.clock.available(view.ahead, my_uid);
    if (left == 0) {
      place_.pass_over(front);
      // Another user's budget for this free period is spent: all of its
      // entries at the front go at once.
      if (front.uid != my_uid)
        for (std::size_t i = 1; i < view.ahead.size() && view.ahead[i].uid != my_uid; ++i)
          place_.pass_over(view.ahead[i]);
      r.changed = true;
      return std::shared_ptr<held_state>();
    }
    r.grace_left = sooner(r.grace_left, left);
    sys::crash_point("acquisition.grace");
    r.holders.push_back(d->i);
    if (snap.present) arm(s, *d, r, active);
    return std::shared_ptr<held_state>();
  }
  s.clock.held();

  if (v.stale()) {
    const bool waited_out = s.contended_since >= 0 && s.contended_id == snap.id &&
                            sys::monotonic_ms() - s.contended_since >= contended_giveup_ms;
    // The directory again (closed after the look, for the watch): the
    // reclaim serializes on its flock and judges it again under it.
    auto again = sys::open_dir(s.t.parent.get(), s.t.name, true, s.t.path);
    const result<sys::stat_info> again_st =
        again ? sys::stat_fd(again->get(), s.t.path) : result<sys::stat_info>(again.error());
    if (!again_st || again_st->id != snap.id) {
      if (!again_st && again_st.error().code() != std::errc::no_such_file_or_directory) {
        r.unknown = again_st.error();
        r.timeout = sooner(r.timeout, unknown_backoff_);
        return std::shared_ptr<held_state>();
      }
      r.changed = true;  // replaced or gone since the look
      return std::shared_ptr<held_state>();
    }
    d->o.dir = std::move(*again);
    auto rem = shared_ ? take_over_shared(s.t, d->o, p_.judge.ttl_ms, p_.judge.grace_ms, pv_, shared_->pv, !waited_out)
                       : reclaim(s.t, d->o, d->v, p_.judge.ttl_ms, p_.judge.grace_ms, pv_, !waited_out);
    if (!rem) return rem.error();
    if (*rem != removal::contended) {
      s.contended_since = -1;
      r.changed = true;
      return std::shared_ptr<held_state>();
    }
    if (s.contended_since < 0 || s.contended_id != snap.id) {
      s.contended_id = snap.id;
      s.contended_since = sys::monotonic_ms();
    }
    // Another reclaimer is at work: its rename wakes us, this timer bounds it.
    r.timeout = sooner(r.timeout, contended_recheck_ms);
    info i = d->i;
    i.stale_reason = i.stale = std::string("being reclaimed by another process");
    r.holders.push_back(i);
    return std::shared_ptr<held_state>();
  }

  // Absent: claim it, unless another thread of this process is about to.
  if (s.gate && !s.gate_owned) {
    const auto e = s.gate->enter(p_.entry.priority, deadline::in_ms(0), {});
    if (e != local_gate::entered::owner) {
      if (e == local_gate::entered::nested) {
        std::lock_guard<std::mutex> g(s.gate->mu);
        --s.gate->depth;
      }
      r.timeout = sooner(r.timeout, queue_poll_ms);
      return std::shared_ptr<held_state>();
    }
    s.gate_owned = true;
  }
  // A private one (made far back in line) says who holds as of now before it
  // is renamed in.
  if (s.staged && !s.staged->published()) stage(s, true);
  if (s.staged) {
    auto c = s.staged->claim(s.t);
    if (c && *c) return take(s, true, nullptr);
    if (c) {
      r.changed = true;
      return std::shared_ptr<held_state>();
    }
    // The staged lock cannot be renamed in (RENAME_NOREPLACE refused, say):
    // out of the handoff, and claimed the plain way.
    w_.unwatch(s.staged_watch);
    s.staged_watch = -1;
    if (s.staged->withdraw(s.t)) return take(s, true, nullptr);
    s.staged.reset();
  }
  // The record as the claim writes it is the one the holder keeps
  // (lock::meta_json() is what meta.json says, byte for byte).
  meta_record claimed = record_for(s);
  claimed.passed_over = place_.passed_still_queued();
  const std::string bytes = serialize(claimed);
  auto c = shared_ ? claim_shared(s.t, snap, bytes, *shared_) : try_claim(s.t, bytes);
  if (c && c->taken) return take(s, false, &*c, shared_ ? &c->written : &bytes);
  if (!c && shared_ && c.error().code() == sys::errno_code(std::errc::resource_unavailable_try_again)) {
    // gpulease's counter lock stayed taken (a gpulease acquirer killed
    // inside it, cleared by gpulease's 30 s rule): waited for, as
    // take_lease() waits for it, never an answer, and a wait that ends
    // there ends busy or timed out, naming it as take_lease() does.
    r.waited_on = std::string(lease_wait_context) + "epoch counter " + shared_->loc.gpu_dir + "/" +
                  gpulease::counter_lock_name + " is locked";
    r.timeout = sooner(r.timeout, shared_counter_retry_ms);
    return std::shared_ptr<held_state>();
  }
  if (!c) {
    // The claim failed (out of space or descriptors, say). While someone
    // else took the lock meanwhile, that is no reason to stop waiting;
    // on a free lock it is the answer, naming the file.
    auto again = look(s);
    if (!again || !again->o.snap.present || again->v.free()) return c.error();
    r.unknown = c.error();
  }
  r.changed = true;
  return std::shared_ptr<held_state>();
}

result<std::shared_ptr<held_state>> acquisition::run() {
  for (std::size_t i = 0; i < p_.slots.size(); ++i) {
    const int k = p_.slots[i];
    slot s;
    s.k = k;
    if (i < targets_.size()) {
      s.t = std::move(targets_[i]);
    } else {
      auto t = open_target(gpu_slot_path(p_.base, k));
      if (!t) return t.error();
      s.t = std::move(*t);
    }
    if (i < gates_.size()) s.gate = gates_[i];
    slots_.push_back(std::move(s));
  }
  for (const auto& s : slots_) clean_leftovers_once(s.t);
  // Every slot's lock lies beside the base path, where the registry is.
  place_.reader().borrow_parent(slots_.front().t.parent.get());

  // Every way out: a staged lock swapped in at the last moment is this
  // waiter's after all (a success for a timeout, released for a cancel).
  auto finish = [&](error e) -> result<std::shared_ptr<held_state>> {
    auto h = withdraw_all();
    if (h && *h) {
      if (e != errc::cancelled) return h;
      (void)(*h)->release();
    }
    return e;
  };
  const bool trying = p_.until.trying();
  bool reread_after_follow = false;  // this round reads the queue again after a follow()
  for (;;) {
    round r;
    queue_read_ = false;
    const bool queueing = p_.entry.queue && !join_failed_;
    bool active = !queueing || (!place_.joined() && !trying);
    // Handed over while asleep: one stat per staged slot says so, before
    // anything is read (the way from the swap to holding).
    // (A private one is never swapped in.)
    for (auto& s : slots_)
      if (s.staged && s.staged->published() && s.staged->at_lock_path(s.t)) return take(s, true, nullptr);
    std::optional<queue_view> primary;
    if (place_.joined() && !queue_news_) {
      // Woken only by the lock (a holder came or went) or by a follower
      // announcing itself: the queue ahead has not moved for this waiter
      // (an active one stays active, one far back stays asleep). Whether
      // someone is ahead of a free lock is read again after the look that
      // finds it free (step()).
      active = last_active_;
      primary = last_primary_;
    } else if (place_.joined()) {
      read_queue();
      sys::crash_point("acquisition.queue-read");
      int own = -1;
      active = false;
      for (const auto& s : slots_) {
        queue_view v = place_.view(s.k);
        own = own < 0 ? v.own_ahead : std::min(own, v.own_ahead);
        if (v.active()) active = true;
        if (!primary) primary = std::move(v);
      }
      // Moved up far enough that the one following it is now active too:
      // it must start to watch the lock and stage (those further back
      // stay asleep).
      bool told = false;
      if (last_own_ahead_ >= 0 && own < last_own_ahead_ && own + 1 < active_waiters) {
        // Followers that announced themselves since the channel was last
        // read are among them (follow()).
        const int told_before = place_.wakes_told();
        place_.read_wake();
        told = place_.wakes_told() != told_before;
        place_.wake_followers();
      }
      last_own_ahead_ = own;
      last_primary_ = primary;
      // That read of the channel took a wake meant for the next round.
      if (told) continue;
    }
    last_active_ = place_.joined() && active;
    queue_news_ = false;
    // Not queued yet: look without watching (the queue decides the role).
    const bool watching = active && (place_.joined() || !queueing);
    if (place_.joined() && !active) {
      // Far back in line: the lock is the active waiters' to watch, claim
      // and pass over. Nothing is looked at until this waiter is active; the
      // holders shown are the last ones it saw.
      r.holders = last_holders_;
    } else {
      for (auto& s : slots_) {
        auto res = step(s, r, watching);
        if (!res) return finish(res.error());
        if (*res) return res;
      }
      last_holders_ = r.holders;
    }
    if (r.changed) {
      queue_news_ = true;
      churn_.round_without_wait();
      continue;
    }
    if (!r.unknown) unknown_backoff_ = unknown_retry_ms;
    const std::string& waited_on = r.waited_on.empty() ? p_.base : r.waited_on;
    if (trying && r.grace_left < 0) return finish(r.unknown ? *r.unknown : error(errc::busy, waited_on));
    if (!trying && p_.until.expired()) return finish(r.unknown ? *r.unknown : error(errc::timed_out, waited_on));
    // Starting to wait: into the queue, and look again from there.
    if (!trying && queueing && !place_.joined()) {
      queue_news_ = true;
      place_.join();
      if (place_.joined())
        for (const auto& s : slots_) clean_leftovers_again(s.t);
      else
        join_failed_ = true;
      continue;
    }

    std::int64_t timeout = sooner(r.timeout, r.grace_left);
    if (place_.joined()) {
      if (active) {
        if (p_.one_slot) {
          slot& s = slots_.front();
          stage(s, true);
          if (s.staged) {
            const std::int64_t now = sys::monotonic_ms();
            if (now >= s.staged_touch_at) {
              s.staged->touch();
              s.staged_touch_at = now + refresh_period(p_.judge.ttl_ms);
            }
            timeout = sooner(timeout, s.staged_touch_at - now);
            // No watch on it (no inotify instance left): look for the swap often.
            if (s.staged_watch < 0) timeout = sooner(timeout, queue_poll_ms);
          }
        }
        w_.unwatch(pred_watch_);
        pred_watch_ = -1;
        pred_pid_ = 0;
        // Told by the one ahead when it leaves, so that this waiter learns
        // it moved up (and wakes its own follower) without reading the
        // queue at each change of the lock.
        if (primary && primary->own_pred && place_.follow(*primary->own_pred) == queue_place::following::no)
          queue_news_ = true;
      } else {
        // Far back: no lock watch and no published staged lock; asleep on
        // the exit of this user's waiter just ahead and on the wake
        // channel. Its staged lock is made now, privately, so that moving
        // up makes no file.
        for (auto& s : slots_)
          if (s.staged && s.staged->published()) {
            w_.unwatch(s.staged_watch);
            s.staged_watch = -1;
            if (s.staged->withdraw(s.t)) return take(s, true, nullptr);
            s.staged.reset();
          }
        if (p_.one_slot) stage(slots_.front(), false);
        auto followed = queue_place::following::known;
        if (primary && primary->own_pred) {
          const queue_entry& pred = *primary->own_pred;
          sys::crash_point("acquisition.follow");
          followed = place_.follow(pred);
          if (pred.rec.pid != pred_pid_) {
            w_.unwatch(pred_watch_);
            pred_pid_ = pred.rec.pid;
            pred_watch_ = w_.watch_pid(pred_pid_);
          }
        }
        // Told now: the one ahead may have moved up (and woken the followers
        // it knew) between this waiter's read of the queue and its line, so
        // the queue is read once more; a move after that read finds the line
        // (the one moving up reads its channel first).
        // (Told again right after that read, the one ahead changed again:
        // looked at soon, not at once, so that it never spins.)
        if (followed == queue_place::following::told && !reread_after_follow) {
          reread_after_follow = true;
          queue_news_ = true;
          continue;
        }
        // Not followed (the one ahead left as this waiter announced itself):
        // nobody will wake it, so it looks again soon.
        timeout = sooner(timeout, followed != queue_place::following::known ? queue_poll_ms
                                  : pred_watch_ >= 0                        ? safety_recheck_ms
                                                                            : fallback_poll_ms);
      }
      if (wake_watch_ < 0) wake_watch_ = w_.watch_readable(place_.wake_fd());
    } else if (!watching) {
      // A single try waiting out the grace of those ahead.
      timeout = sooner(timeout, queue_poll_ms);
    }
    if (!trying) {
      const int position = place_.joined() && p_.one_slot && primary ? static_cast<int>(primary->ahead.size()) + 1 : 0;
      report_.waiting(r.holders, position);
      timeout = p_.until.clamp(timeout);
    }
    reread_after_follow = false;
    std::vector<int> fired;
    const auto why = report_.wait_ticking(timeout, [&](std::int64_t ms) { return w_.wait(ms, p_.cancel_fds, &fired); });
    if (why == sys::watcher::wake::extra_fd) return finish(error(errc::cancelled, p_.base));
    for (auto& s : slots_) s.armed.woken(fired, w_);
    const int told_before = place_.wakes_told();
    place_.read_wake();
    // Anything but the lock's own watches and a follower's announcement
    // (a "w" in the wake channel, the one ahead exiting, a staged lock, a
    // timer): the queue may have moved.
    queue_news_ = queue_news_ || fired.empty() || place_.wakes_told() != told_before ||
                  std::any_of(fired.begin(), fired.end(), [&](int id) {
                    return id != wake_watch_ && std::none_of(slots_.begin(), slots_.end(), [&](const slot& s) {
                             return id == s.armed.dir_id || id == s.armed.pid_id;
                           });
                  });
    if (std::find(fired.begin(), fired.end(), pred_watch_) != fired.end()) {
      w_.unwatch(pred_watch_);
      pred_watch_ = -1;
      pred_pid_ = 0;
    }
    if (!r.unknown) churn_.waited();
    else unknown_backoff_ = std::min<std::int64_t>(unknown_backoff_ * 2, fallback_poll_ms);
  }
}

}  // namespace offload_lock::detail
