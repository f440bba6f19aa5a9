// Waiting for an etcd lock in its line, and taking it (lock.hpp).
//
// The wait: a waiter's entry is created under its lease (its create
// revision is its arrival); it reads the lock in one range and, when it is
// first in the order served and the holder key is absent, tries one
// transaction: "holder absent, no entry newer than what I read, my entry
// still there" then "put the holder key under my lease, delete my entry",
// else "read the lock again" (one round trip either way). Otherwise it
// watches exactly one key, the one ahead of it (the holder's when it is
// first, else the entry just before its own), from the revision it read,
// so no change in between is missed and a release wakes one waiter, not
// all of them (etcd's own lock recipe does the same). The entry and the
// lease are kept alive while it waits.
#include <algorithm>

#include "etcd/client.hpp"
#include "etcd/expiry.hpp"
#include "etcd/lock_parts.hpp"
#include "etcd/record.hpp"
#include "etcd/same_machine.hpp"
#include "etcd/view.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/watch.hpp"
#include "wait.hpp"

namespace offload_lock::detail::etcd {

namespace {

// An error of etcd, said with the lock it concerns.
error about(const std::string& url, const error& e) { return error(e.code(), url + ": " + e.context()); }

class acquisition {
 public:
  explicit acquisition(wanted w) : w_(std::move(w)), c_(w_.a.endpoints), report_(w_.report) {}

  result<std::shared_ptr<hold>> run();

 private:
  enum class woke { changed, timeout, cancelled, lease_gone, trouble, ahead_exited };
  // What became of the one ahead: waited for; its key removed (deleted
  // here, or changed already); or to be looked at again.
  enum class ahead_step { wait, removed, look_again };

  error begin();
  error enqueue();
  void leave();
  std::optional<std::int64_t> my_position(const lock_view& v) const;
  woke wait_for(const std::string& key, std::int64_t from, std::int64_t timeout);
  woke keep_lease();
  woke stopped() const;
  ahead_step judge_ahead(const entry& e, std::int64_t& recheck_ms, bool& kept_here);
  bool reckon_expiry(const entry& holder, std::int64_t& recheck_ms);
  bool take_from_dead(const key_value& holder);
  bool changed_already(const std::string& key);
  void trouble(const error& e);
  void report(const lock_view& v);

  wanted w_;
  client c_;
  wait_report report_;
  std::int64_t lease_ = 0, ttl_s_ = 0, valid_until_ = 0, next_ka_ = 0;
  std::string my_key_;
  std::int64_t my_rev_ = 0;
  std::unique_ptr<watch_stream> watch_;
  std::string watched_key_;
  bool said_trouble_ = false, said_requeue_ = false;
  int position_ = 0;
  lock_view last_;
  // The one ahead on this machine: its key's create revision, the process
  // watched for its exit (the one ahead, or the keeper of one that has
  // exited) and a pidfd readable once it exits, the last one whose pidfd
  // fired, and the key whose deletion failed (tried once).
  std::int64_t judged_rev_ = 0, watched_pid_ = 0, fired_pid_ = 0, take_failed_rev_ = 0;
  sys::fd ahead_exit_;
  // The holder's lease, when no process here is seen to keep it: revoked
  // once it has surely expired (expiry.hpp), once.
  std::optional<expiry_reckoner> expiry_;
  std::int64_t revoked_lease_ = 0;
  // What ends a wait early: the caller's cancel descriptors, and that pidfd.
  std::vector<int> wake_fds_;
};

error acquisition::begin() {
  const std::int64_t sent = sys::monotonic_ms();
  auto g = c_.grant(w_.ttl_s, call_bounds(c_, w_.cancel));
  if (!g) return g.error();
  lease_ = g->id;
  ttl_s_ = g->ttl_s;
  valid_until_ = sent + ttl_s_ * 1000;
  next_ka_ = sent + ttl_s_ * 1000 / 3;
  my_key_ = w_.a.queue_prefix() + lease_name(lease_);
  return w_.queue ? enqueue() : error{};
}

error acquisition::enqueue() {
  record r = w_.waiting;
  r.since = sys::now_ms();
  auto t = c_.txn({{my_key_, compare::field::create, compare::op::equal, 0}},
                  {{txn_op::kind::put, my_key_, encode(r), lease_, false}}, {}, call_bounds(c_, w_.cancel));
  if (!t) return t.error();
  if (!t->succeeded) return error(std::make_error_code(std::errc::file_exists), w_.a.url() + ": queue entry " + my_key_);
  my_rev_ = t->revision;
  return {};
}

// Gives up the place and the lease (bounded, best effort: the lease lapses
// by itself within its TTL anyway).
void acquisition::leave() {
  watch_.reset();
  if (lease_) (void)c_.revoke(lease_, call_bounds(c_));
  lease_ = 0;
}

std::optional<std::int64_t> acquisition::my_position(const lock_view& v) const {
  for (std::size_t k = 0; k < v.queue.size(); ++k)
    if (v.queue[k].kv.key == my_key_) return static_cast<std::int64_t>(k);
  return std::nullopt;
}

void acquisition::report(const lock_view& v) {
  info i = to_info(w_.a, v, sys::now_ms());
  report_.waiting({i}, position_);
}

// A failed call while waiting: said once (through the progress report, as
// the lock's problem), then tried again until the wait ends.
void acquisition::trouble(const error& e) {
  if (said_trouble_) return;
  said_trouble_ = true;
  info i;
  i.path = w_.a.url();
  i.problem = "etcd cannot be reached (" + e.message() + "); still trying until the wait ends";
  report_.waiting({i}, position_);
}

acquisition::woke acquisition::keep_lease() {
  const std::int64_t sent = sys::monotonic_ms();
  if (sent < next_ka_) return woke::timeout;
  auto r = c_.keep_alive(lease_, call_bounds(c_, w_.cancel));
  if (!r) {
    if (r.error() == errc::cancelled) return woke::cancelled;
    trouble(r.error());
    next_ka_ = sys::monotonic_ms() + retry_ms;
    return woke::trouble;
  }
  if (*r == 0) return woke::lease_gone;
  said_trouble_ = false;
  valid_until_ = sent + *r * 1000;
  next_ka_ = sent + *r * 1000 / 3;
  return woke::timeout;
}

// A wait ended by one of wake_fds_: the caller's cancel, or else the exit
// of the process watched on this machine.
acquisition::woke acquisition::stopped() const {
  return sys::wait_any(w_.cancel, 0) >= 0 || !ahead_exit_.valid() ? woke::cancelled : woke::ahead_exited;
}

// The one ahead (the holder, or the waiter just before) when it runs on
// this machine (same_machine.hpp): judged by its pid, its exit watched with
// a pidfd, and its key deleted once it is gone. An exited one is looked at
// again after recheck_ms.
acquisition::ahead_step acquisition::judge_ahead(const entry& e, std::int64_t& recheck_ms, bool& kept_here) {
  if (e.kv.create_revision != judged_rev_) {
    judged_rev_ = e.kv.create_revision;
    watched_pid_ = fired_pid_ = 0;
    ahead_exit_.reset();
  }
  judgment j = judge_here(e.rec);
  // A pidfd that fired is not opened again for the same process, should
  // the judgment not have moved on: never a spin.
  if (j.watch == fired_pid_) j.watch = 0;
  if (j.watch != 0 && j.watch != watched_pid_) {
    // Opened, then judged again: the pidfd is surely of the process
    // judged, not of one that took its pid since.
    ahead_exit_ = sys::open_pid(j.watch);
    watched_pid_ = ahead_exit_.valid() ? j.watch : 0;
    j = judge_here(e.rec);
  }
  if (j.watch == 0 || j.watch != watched_pid_) {
    watched_pid_ = 0;
    ahead_exit_.reset();
  }
  // An exited one is looked at again: its reaping makes no event.
  if (j.f == fate::exited) recheck_ms = exited_look_ms;
  // Alive here, or exited with a process here watched that keeps it.
  kept_here = j.f == fate::alive || (j.f == fate::exited && ahead_exit_.valid());
  if (j.f != fate::gone || take_failed_rev_ == judged_rev_) return ahead_step::wait;
  // Its keeper may have released it already (`run` releases, then reaps
  // CMD): a change waiting on the watch is that release, and no deletion
  // of this waiter's own is needed.
  if (changed_already(e.kv.key)) return ahead_step::removed;
  // Deleted if it is still that key: a holder's then claimed as a released
  // one, a waiter's leaves the line; else (changed, or etcd not answering)
  // looked at again, and waited for as any other if it is still there:
  // tried once per key, never a spin.
  if (take_from_dead(e.kv)) return ahead_step::removed;
  take_failed_rev_ = judged_rev_;
  return ahead_step::look_again;
}

// The holder's lease, kept by no process watched here: its remaining
// time read as it nears its end, and the lease revoked once it has surely
// expired (expiry.hpp), so the lock is free then and not when etcd next
// looks for expired leases. True when it was revoked (the caller looks
// again); else recheck_ms is set to when the next reading is due.
bool acquisition::reckon_expiry(const entry& holder, std::int64_t& recheck_ms) {
  const std::int64_t lease = holder.kv.lease;
  if (lease == 0 || lease == revoked_lease_) return false;
  if (!expiry_ || expiry_->lease() != lease) expiry_.emplace(lease);
  const std::int64_t sent = sys::monotonic_ms();
  if (sent >= expiry_->next_reading()) {
    auto l = c_.time_to_live(lease, call_bounds(c_, w_.cancel));
    if (l) expiry_->saw(sent, sys::monotonic_ms(), l->remaining_s, l->granted_s);
    else expiry_->missed(sys::monotonic_ms() + retry_ms);  // the chain starts again
  }
  if (expiry_->expired()) {
    revoked_lease_ = lease;
    return !c_.revoke(lease, call_bounds(c_, w_.cancel));
  }
  const std::int64_t due = std::max<std::int64_t>(0, expiry_->next_reading() - sys::monotonic_ms());
  recheck_ms = recheck_ms < 0 ? due : std::min(recheck_ms, due);
  return false;
}

// The one ahead judged gone: its key is deleted if it is still that very
// key, with the value judged. The lease is left to lapse (it held nothing
// else). False when the key changed meanwhile or etcd could not be asked.
bool acquisition::take_from_dead(const key_value& holder) {
  auto t = c_.txn({{holder.key, compare::field::create, compare::op::equal, holder.create_revision},
                   {holder.key, compare::field::mod, compare::op::equal, holder.mod_revision}},
                  {{txn_op::kind::del, holder.key, "", 0, false}}, {}, call_bounds(c_, w_.cancel));
  return t && t->succeeded;
}

// Whether the watch on `key` holds a change already, read without waiting.
bool acquisition::changed_already(const std::string& key) {
  if (!watch_ || watched_key_ != key) return false;
  auto ev = watch_->next({sys::monotonic_ms(), {}});
  if (!ev) {
    watch_.reset();
    return false;
  }
  if (!*ev) return false;
  for (const auto& e : **ev)
    if (e.kv.key == key) {
      watch_.reset();
      return true;
    }
  return false;
}

// Waits up to `timeout` ms (-1: none) for `key` to change after revision
// `from - 1`, keeping the lease alive meanwhile.
acquisition::woke acquisition::wait_for(const std::string& key, std::int64_t from, std::int64_t timeout) {
  const std::int64_t end = timeout < 0 ? -1 : sys::monotonic_ms() + timeout;
  auto left = [&](std::int64_t until) {
    const std::int64_t now = sys::monotonic_ms();
    std::int64_t t = until - now;
    if (end >= 0) t = std::min(t, end - now);
    return std::max<std::int64_t>(0, t);
  };
  if (watched_key_ != key) watch_.reset();
  for (;;) {
    if (end >= 0 && sys::monotonic_ms() >= end) return woke::timeout;
    if (lease_) {
      const woke k = keep_lease();
      if (k == woke::cancelled || k == woke::lease_gone) return k;
      if (k == woke::trouble) {
        // Paused a little: the member may be back by then.
        if (sys::wait_any(wake_fds_, left(next_ka_)) >= 0) return stopped();
        if (sys::monotonic_ms() >= valid_until_) return woke::lease_gone;
        continue;
      }
    }
    const std::int64_t until = lease_ ? next_ka_ : sys::monotonic_ms() + 60'000;
    if (!watch_) {
      auto made = c_.watch(key, false, from, {sys::monotonic_ms() + left(until) + per_member_ms, wake_fds_});
      if (!made) {
        if (made.error() == errc::cancelled) return stopped();
        // A start revision compacted away: something changed; look again.
        if (made.error().code() == std::errc::no_such_file_or_directory) return woke::changed;
        trouble(made.error());
        if (sys::wait_any(wake_fds_, std::min<std::int64_t>(retry_ms, left(until))) >= 0) return stopped();
        return woke::trouble;
      }
      said_trouble_ = false;
      watch_ = std::move(*made);
      watched_key_ = key;
    }
    auto ev = watch_->next({sys::monotonic_ms() + left(until), wake_fds_});
    if (!ev) {
      // Woken by a descriptor: the stream stays as it was (what was read
      // of it stays buffered) and is kept, so the next wait needs no new
      // watch.
      if (ev.error() == errc::cancelled) return stopped();
      watch_.reset();
      trouble(ev.error());
      return woke::trouble;
    }
    if (!*ev) continue;  // a keep-alive is due, or the time is up
    for (const auto& e : **ev)
      if (e.kv.key == key) {
        watch_.reset();
        return woke::changed;
      }
  }
}

result<std::shared_ptr<hold>> acquisition::run() {
  if (error e = begin()) return about(w_.a.url(), e);
  churn_guard churn;
  bool look_again = true;
  bool holder_gone = false;  // the holder key was seen deleted since last_ was read
  for (;;) {
    if (look_again) {
      auto v = look(c_, w_.a, call_bounds(c_, w_.cancel));
      if (!v) {
        if (v.error() == errc::cancelled) break;
        trouble(v.error());
        if (w_.until.expired() || w_.until.trying()) {
          leave();
          return about(w_.a.url(), v.error());
        }
        if (sys::wait_any(w_.cancel, w_.until.clamp(retry_ms)) >= 0) break;
        // Cut off for longer than the TTL: the lease, and the place with
        // it, are gone; a new one once etcd answers (the look above does
        // not find the entry then, and queues again).
        if (sys::monotonic_ms() >= valid_until_) lease_ = 0, last_.queue.clear();
        continue;
      }
      said_trouble_ = false;
      last_ = std::move(*v);
      look_again = false;
      holder_gone = false;
    }
    std::optional<std::int64_t> at;
    if (w_.queue) {
      at = my_position(last_);
      if (!at) {
        // The entry is gone: the lease lapsed while etcd could not be
        // reached (or someone deleted it). A new lease and a new place,
        // behind everyone who came meanwhile.
        if (!said_requeue_) {
          said_requeue_ = true;
          info i;
          i.path = w_.a.url();
          i.problem = "the place in line was lost with its etcd lease; queued again";
          report_.waiting({i}, 0);
        }
        if (lease_) (void)c_.revoke(lease_, call_bounds(c_));
        lease_ = 0;
        if (error e = begin()) {
          if (e == errc::cancelled) break;
          trouble(e);
          if (sys::wait_any(w_.cancel, w_.until.clamp(retry_ms)) >= 0) break;
          if (w_.until.expired()) {
            leave();
            return error(errc::timed_out, w_.a.url());
          }
        }
        look_again = true;
        continue;
      }
    }
    const bool first = !w_.queue || *at == 0;
    const bool free = !last_.holder || holder_gone;
    position_ = w_.queue ? static_cast<int>(*at) + 1 : 0;
    if (first && free) {
      record mine = w_.holder;
      mine.since = sys::now_ms();
      std::vector<compare> cmp{{w_.a.holder_key(), compare::field::create, compare::op::equal, 0}};
      std::vector<txn_op> then{{txn_op::kind::put, w_.a.holder_key(), encode(mine), lease_, false}};
      if (w_.queue) {
        // No entry came (or changed) since the look that put this waiter
        // first: a compare over the whole queue prefix.
        compare newer{w_.a.queue_prefix(), compare::field::mod, compare::op::less, last_.revision + 1, true};
        cmp.push_back(newer);
        cmp.push_back({my_key_, compare::field::create, compare::op::equal, my_rev_});
        then.push_back({txn_op::kind::del, my_key_, "", 0, false});
      }
      auto t = c_.txn(cmp, then, {{txn_op::kind::range, w_.a.lock_prefix(), "", 0, true}}, call_bounds(c_, w_.cancel));
      if (!t) {
        if (t.error() == errc::cancelled) break;
        trouble(t.error());
        if (sys::wait_any(w_.cancel, w_.until.clamp(retry_ms)) >= 0) break;
        look_again = true;
        continue;
      }
      if (t->succeeded) {
        hold::made m;
        m.addr = w_.a;
        m.token = mine.token;
        m.record_json = encode(mine);
        m.fence = static_cast<std::uint64_t>(t->revision);
        m.lease = lease_;
        m.ttl_ms = ttl_s_ * 1000;
        m.pid = mine.pid;
        m.valid_until = valid_until_;
        m.gpu = w_.gpu;
        m.priority = mine.priority;
        m.on_lost = w_.on_lost;
        m.on_yield = w_.on_yield;
        m.max_hold_ms = w_.max_hold_ms;
        return std::make_shared<hold>(std::move(m));
      }
      if (t->ranges.size() != 1) {
        look_again = true;
        continue;
      }
      last_ = read_view(w_.a, t->ranges.front());
      holder_gone = false;
      churn.round_without_wait();
      // Still first with nobody holding: someone came or left meanwhile; try again.
      continue;
    }
    // The one ahead (the holder when first, else the waiter just before)
    // on this machine: its exit is seen at once, not when its lease lapses.
    std::int64_t recheck_ms = -1;
    const entry* ahead_of_me = nullptr;
    if (!first) ahead_of_me = &last_.queue[static_cast<std::size_t>(*at) - 1];
    else if (last_.holder && !holder_gone) ahead_of_me = &*last_.holder;
    if (ahead_of_me) {
      bool kept_here = false;
      const ahead_step step = judge_ahead(*ahead_of_me, recheck_ms, kept_here);
      if (step != ahead_step::wait) {
        if (step == ahead_step::removed && first) holder_gone = true;
        else look_again = true;
        continue;
      }
      // The holder, kept by no process watched here: its lease's end.
      if (first && !kept_here && !w_.until.trying() && reckon_expiry(*ahead_of_me, recheck_ms)) {
        look_again = true;
        continue;
      }
    }
    if (w_.until.trying() || w_.until.expired()) {
      leave();
      return error(w_.until.trying() ? errc::busy : errc::timed_out, w_.a.url());
    }
    // Wait for the one key ahead.
    std::string ahead = w_.a.holder_key();
    if (!first) ahead = last_.queue[static_cast<std::size_t>(*at) - 1].kv.key;
    report(last_);
    wake_fds_ = w_.cancel;
    if (ahead_exit_.valid()) wake_fds_.push_back(ahead_exit_.get());
    woke why = woke::timeout;
    const auto wake = report_.wait_ticking(recheck_ms >= 0 ? w_.until.clamp(recheck_ms) : w_.until.left(),
                                           [&](std::int64_t t) {
      why = wait_for(ahead, last_.revision + 1, t);
      switch (why) {
        case woke::timeout: return sys::watcher::wake::timeout;
        case woke::cancelled: return sys::watcher::wake::extra_fd;
        default: return sys::watcher::wake::event;
      }
    });
    churn.waited();
    if (wake == sys::watcher::wake::extra_fd) break;
    if (why == woke::ahead_exited) {
      // Judged again at once, on what was read: no look needed.
      fired_pid_ = watched_pid_;
      watched_pid_ = 0;
      ahead_exit_.reset();
      continue;
    }
    // A look or a reading due (recheck_ms): what is read stays good (the
    // watch kept its place).
    if (why == woke::timeout && recheck_ms >= 0 && !w_.until.expired()) continue;
    if (why == woke::changed && first && ahead == w_.a.holder_key()) {
      // Released (or replaced): try at once; the transaction's own reply
      // says whether to look again.
      holder_gone = true;
      continue;
    }
    if (why == woke::lease_gone) {
      // Cut off from etcd for longer than the TTL: this lease, and the
      // place with it, are taken as gone (revoked in case they are not).
      if (lease_) (void)c_.revoke(lease_, call_bounds(c_));
      lease_ = 0;
      last_.queue.clear();
    }
    look_again = true;
  }
  // Cancelled.
  leave();
  return error(errc::cancelled, w_.a.url());
}

}  // namespace

result<std::shared_ptr<hold>> wait_and_take(wanted w) {
  acquisition a(std::move(w));
  return a.run();
}

}  // namespace offload_lock::detail::etcd
