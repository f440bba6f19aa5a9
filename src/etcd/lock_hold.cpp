// An etcd lock held (lock.hpp): its lease kept alive on a thread of its
// own, which watches the lock for a loss and for waiters that ask the
// holder to make way; its release; and the keeper a forked child becomes.
#include <algorithm>

#include "etcd/client.hpp"
#include "etcd/lock_parts.hpp"
#include "etcd/record.hpp"
#include "etcd/view.hpp"
#include "inherit.hpp"
#include "offload_lock/describe.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/watch.hpp"

namespace offload_lock::detail::etcd {

// cppcheck-suppress passedByValue ; its members are moved into the hold
hold::hold(made m)
    : addr_(std::move(m.addr)),
      url_(addr_.url()),
      token_(std::move(m.token)),
      record_json_(std::move(m.record_json)),
      fence_(m.fence),
      lease_(m.lease),
      ttl_ms_(m.ttl_ms),
      pid_(m.pid),
      gpu_(m.gpu),
      priority_(m.priority),
      inherited_(m.inherited),
      on_lost_(std::move(m.on_lost)),
      on_yield_(std::move(m.on_yield)),
      max_hold_ms_(m.max_hold_ms),
      taken_mono_(sys::monotonic_ms()),
      owner_pid_(sys::self_pid()),
      valid_until_(m.valid_until) {}

hold::~hold() { stop_thread(); }

void hold::start() {
  if (inherited_) return;
  auto pipe = sys::make_pipe();
  if (pipe) {
    stop_r_ = std::move(pipe->first);
    stop_w_ = std::move(pipe->second);
  }
  // The thread keeps the hold alive while it runs; release() and detach()
  // end it.
  thread_ = std::make_unique<std::thread>([self = shared_from_this()] { self->run(); });
}

void hold::stop_thread() {
  if (!thread_) return;
  if (owner_pid_ != sys::self_pid()) {
    // A forked child's copy of the parent's thread: nothing to join here,
    // and a std::thread must not be destroyed joinable.
    (void)thread_.release();
    return;
  }
  stopping_ = true;
  if (stop_w_.valid()) sys::notify(stop_w_.get());
  if (thread_->get_id() == std::this_thread::get_id()) {
    thread_->detach();  // released from its own on_lost: it ends after the callback
  } else if (thread_->joinable()) {
    thread_->join();
  }
  thread_.reset();
}

bool hold::max_hold_passed() const {
  return max_hold_reached_ || (max_hold_ms_ > 0 && sys::monotonic_ms() - taken_mono_ >= max_hold_ms_);
}

void hold::lose(const std::string& why) {
  if (lost_.exchange(true)) return;
  if (!stopping_ && on_lost_) on_lost_(error(errc::lost, why));
}

void hold::run() {
  client c(addr_.endpoints);
  const std::vector<int> stop{stop_r_.get()};
  const std::int64_t period = std::max<std::int64_t>(ttl_ms_ / 3, 100);
  std::int64_t next_ka = taken_mono_ + period;
  std::int64_t watch_from = static_cast<std::int64_t>(fence_) + 1;
  std::unique_ptr<watch_stream> w;
  std::string last_trouble;
  const std::string holder = addr_.holder_key(), queue = addr_.queue_prefix();
  auto ask = [&](const yield_request& r) {
    if (!on_yield_ || yield_asked_.exchange(true) || stopping_) return;
    on_yield_(r);
  };
  // Waiters of a higher priority that queued before this holder took it
  // ask at once.
  if (on_yield_)
    if (auto v = look(c, addr_, call_bounds(c, stop)); v)
      for (const auto& e : v->queue)
        if (e.rec.priority > priority_) {
          ask({e.rec.pid, e.rec.label, e.rec.priority, "priority"});
          break;
        }
  while (!stopping_) {
    const std::int64_t now = sys::monotonic_ms();
    if (now >= valid_until_) {
      lose(url_ + " lost its etcd lease: no etcd member renewed it within its TTL of " +
           describe_duration(milliseconds(ttl_ms_)) + (last_trouble.empty() ? "" : " (" + last_trouble + ")"));
      return;
    }
    std::int64_t max_hold_at = -1;
    if (max_hold_ms_ > 0 && !max_hold_reached_) {
      max_hold_at = taken_mono_ + max_hold_ms_;
      if (now >= max_hold_at) {
        max_hold_reached_ = true;
        yield_request r{0, "max hold", 0, "max hold"};
        if (auto v = look(c, addr_, call_bounds(c, stop)); v && !v->queue.empty())
          r = {v->queue.front().rec.pid, v->queue.front().rec.label, v->queue.front().rec.priority, "max hold"};
        ask(r);
        continue;
      }
    }
    if (now >= next_ka) {
      // The lease is good until TTL after the renewal was sent, at the
      // least: etcd counts from when it got it, which is later.
      const std::int64_t sent = sys::monotonic_ms();
      // Until the lease could lapse: a member that does not answer leaves
      // time to ask the others (client::on_some_member shares it out).
      auto r = c.keep_alive(lease_, {valid_until_, stop});
      if (r && *r > 0) {
        valid_until_ = sent + *r * 1000;
        next_ka = sent + period;
        last_trouble.clear();
      } else if (r) {
        lose(url_ + " lost its etcd lease: etcd says it has expired");
        return;
      } else if (r.error() != errc::cancelled) {
        last_trouble = r.error().message();
        next_ka = sys::monotonic_ms() + retry_ms;
      }
      continue;
    }
    std::int64_t until = std::min<std::int64_t>(next_ka, valid_until_);
    if (max_hold_at >= 0) until = std::min(until, max_hold_at);
    if (!w) {
      auto made = c.watch(addr_.lock_prefix(), true, watch_from, {until, stop});
      if (!made) {
        if (made.error() == errc::cancelled) continue;
        if (made.error().code() == std::errc::no_such_file_or_directory) {
          // Compacted past: is the key still ours? Then watch from now.
          auto v = look(c, addr_, call_bounds(c, stop));
          if (v && (!v->holder || v->holder->kv.create_revision != static_cast<std::int64_t>(fence_) ||
                    v->holder->kv.lease != lease_)) {
            lose(url_);
            return;
          }
          if (v) watch_from = v->revision + 1;
          continue;
        }
        last_trouble = made.error().message();
        (void)sys::wait_any(stop, std::max<std::int64_t>(0, std::min(until, sys::monotonic_ms() + retry_ms) -
                                                                  sys::monotonic_ms()));
        continue;
      }
      w = std::move(*made);
    }
    auto ev = w->next({until, stop});
    if (!ev) {
      if (ev.error() != errc::cancelled) {
        last_trouble = ev.error().message();
        w.reset();
      }
      continue;
    }
    if (!*ev) continue;
    for (const auto& e : **ev) {
      watch_from = std::max(watch_from, e.kv.mod_revision + 1);
      if (e.kv.key == holder) {
        // Deleted, or put by anyone but this acquisition: not ours.
        lose(url_);
        return;
      }
      if (!e.deleted && e.kv.key.compare(0, queue.size(), queue) == 0 && on_yield_) {
        const record r = decode(e.kv.value);
        if (r.problem.empty() && r.priority > priority_) ask({r.pid, r.label, r.priority, "priority"});
      }
    }
  }
}

bool hold::still_held() {
  if (inherited_) return true;
  if (lost_ || done_ || owner_pid_ != sys::self_pid()) return false;
  client c(addr_.endpoints);
  auto v = look(c, addr_, call_bounds(c));
  if (!v) return sys::monotonic_ms() < valid_until_;
  return v->holder && v->holder->kv.create_revision == static_cast<std::int64_t>(fence_) &&
         v->holder->kv.lease == lease_;
}

error hold::finish() {
  client c(addr_.endpoints);
  // Deleted only while it is this acquisition's key under its lease: one
  // put over it in place by anyone else keeps its create revision.
  auto t = c.txn({{addr_.holder_key(), compare::field::create, compare::op::equal, static_cast<std::int64_t>(fence_)},
                  {addr_.holder_key(), compare::field::lease, compare::op::equal, lease_}},
                 {{txn_op::kind::del, addr_.holder_key(), "", 0, false}}, {}, call_bounds(c));
  // Whatever the outcome, the lease goes: nothing of this acquisition is
  // to stay (a keeper elsewhere would have it no longer).
  (void)c.revoke(lease_, call_bounds(c));
  if (!t)
    return error(t.error().code(), url_ + ": release: " + t.error().context() +
                                       "; the lock frees itself when its lease lapses, within " +
                                       describe_duration(milliseconds(ttl_ms_)));
  if (lost_ || !t->succeeded) return error(errc::lost, url_);
  return {};
}

error hold::release() {
  if (inherited_ || done_.exchange(true)) return {};
  stop_thread();
  forget_nesting(*this);
  if (owner_pid_ != sys::self_pid()) return error(errc::lost, url_);
  return finish();
}

void hold::detach() {
  if (done_.exchange(true)) return;
  stop_thread();
  forget_nesting(*this);
}

error hold::keep_until_holder_exits() {
  if (inherited_) return {};
  // The forked keeper: its parent's thread is not here (stop_thread()
  // knows), and it keeps the lease from now on.
  stop_thread();
  owner_pid_ = sys::self_pid();
  client c(addr_.endpoints);
  sys::watcher w;
  const int pid_id = w.watch_pid(pid_);
  const std::int64_t period = std::max<std::int64_t>(ttl_ms_ / 3, 100);
  std::int64_t next = sys::monotonic_ms();
  for (;;) {
    const std::int64_t now = sys::monotonic_ms();
    if (now >= valid_until_) {
      done_ = true;
      (void)c.revoke(lease_, call_bounds(c));
      return error(errc::lost, url_);
    }
    if (now >= next) {
      const std::int64_t sent = now;
      auto r = c.keep_alive(lease_, {valid_until_, {}});
      if (r && *r == 0) {
        done_ = true;
        return error(errc::lost, url_);
      }
      if (r) valid_until_ = sent + *r * 1000;
      // And whether the key is still ours (a release by token elsewhere).
      auto v = look(c, addr_, call_bounds(c));
      if (v && (!v->holder || v->holder->kv.create_revision != static_cast<std::int64_t>(fence_))) {
        done_ = true;
        (void)c.revoke(lease_, call_bounds(c));
        return error(errc::lost, url_);
      }
      next = sys::monotonic_ms() + (r && v ? period : retry_ms);
      continue;
    }
    std::int64_t t = std::min<std::int64_t>(next, valid_until_) - now;
    if (pid_id < 0) t = std::min<std::int64_t>(t, 1000);  // no pidfd: a look every second
    // Ended: dead, or a zombie with nothing left running, or its pidfd
    // readable (every thread of it gone). A zombie whose main thread ended
    // while others work still holds.
    std::vector<int> fired;
    (void)w.wait(std::max<std::int64_t>(0, t), {}, &fired);
    if (sys::has_ended(pid_) || (pid_id >= 0 && std::find(fired.begin(), fired.end(), pid_id) != fired.end())) {
      done_ = true;
      return finish();
    }
  }
}

std::vector<std::pair<std::string, std::string>> hold::child_environment() const {
  return {{env_lock_path, url_}, {env_lock_token, token_}, {"OFFLOAD_LOCK_FENCE", std::to_string(fence_)}};
}

}  // namespace offload_lock::detail::etcd
