// The heartbeat (heartbeat.hpp): refresh and loss detection for one held lock,
// and the process-wide thread that looks after all of them (doc/protocol.md B7).
#include "heartbeat.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "lease_join.hpp"
#include "meta.hpp"
#include "os/files.hpp"
#include "queue.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "os/watch.hpp"
#include "wait.hpp"

namespace offload_lock::detail {

namespace {

// A lock is watched for loss once it has been held this long: most short
// holds (a test suite's, a quick job's) end before, and never pay for the
// inotify watches. A loss inside that time is noticed at its end.
constexpr std::int64_t kWatchAfterMs = 20;

// With nothing held, the thread still wakes every kWatchAfterMs for this
// long after the last acquisition, instead of sleeping until woken: a
// process taking and releasing the lock again and again then finds it due
// to wake soon already, and wakes it for none of its acquisitions (each
// would otherwise wake it once, to find the lock released already and go
// back to sleep). An idle process's thread sleeps after a few wakes.
constexpr std::int64_t kLingerMs = 200;

// B7 and loss detection for every lock this process holds, on one thread
// that lives as long as the process: acquire and release only register and
// unregister (no thread to start or join per acquisition). The thread
// refreshes each meta.json's mtime every period and, woken by the watcher,
// calls on_lost as soon as a lock is removed or replaced.
class heartbeat_service {
 public:
  static heartbeat_service& get() {
    std::lock_guard<std::mutex> g(instance_mu());
    if (!instance()) instance() = new heartbeat_service();  // never freed: it lives as long as the process
    return *instance();
  }

  void add(const std::shared_ptr<held_state>& s) {
    std::lock_guard<std::mutex> g(mu_);
    if (!started_) {
      auto p = sys::make_pipe();
      if (!p) return;  // no heartbeat; the pid rules still hold
      wake_r_ = std::move(p->first);
      wake_w_ = std::move(p->second);
      std::thread([this] { run(); }).detach();
      started_ = true;
    }
    s->registered = true;
    s->held_since = sys::monotonic_ms();
    last_add_ = s->held_since;
    s->next_touch = s->held_since + s->period();
    entries_.push_back(s);
    // Woken only when it would otherwise sleep past this lock's first
    // deadline (its watch, kWatchAfterMs from now): a process taking the
    // lock again and again finds the thread due to wake soon already, and
    // costs it no wake of its own.
    const std::int64_t first_due = s->held_since + kWatchAfterMs;
    if (wakes_at_ < 0 || wakes_at_ > first_due) sys::notify(wake_w_.get());
  }

  void drop_later(held_state& s, std::shared_ptr<void> what) {
    std::lock_guard<std::mutex> g(mu_);
    s.waited_with = std::move(what);
  }

  void poke() {
    std::lock_guard<std::mutex> g(mu_);
    if (started_) sys::notify(wake_w_.get());
  }

  void remove(held_state* s) {
    std::lock_guard<std::mutex> g(mu_);
    if (!s->registered) return;
    s->registered = false;
    // A lock released before the thread set up anything for it is dropped
    // here and now (the thread holds its own reference while it works on
    // it): its descriptors close as the lock lets go of it, and the thread
    // is not woken. One with watches is the thread's to drop, at once.
    if (!s->watch_tried) {
      entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                    [s](const std::shared_ptr<held_state>& e) { return e.get() == s; }),
                     entries_.end());
      return;
    }
    sys::notify(wake_w_.get());
  }

  // fork() copies only the calling thread: the instance mutex is taken around
  // it, and the child (which has no service thread) starts a service of its own.
  static void install_fork_handlers() {
    sys::on_fork([] { instance_mu().lock(); }, [] { instance_mu().unlock(); },
                 [] {
                   instance() = nullptr;
                   instance_mu().unlock();
                 });
  }

 private:
  static heartbeat_service*& instance() {
    static heartbeat_service* p = nullptr;
    return p;
  }
  static std::mutex& instance_mu() {
    static std::mutex m;
    return m;
  }

  // `what`: what was lost, the lock's path when empty (else the lease's
  // claim, as lease_loss_context words it).
  void report_lost(held_state& s, const std::string& what = {}) {
    {
      std::lock_guard<std::mutex> g(mu_);
      // Released meanwhile: our own release, not a loss.
      if (!s.registered) return;
      s.registered = false;
    }
    if (s.on_lost) s.on_lost(error(errc::lost, what.empty() ? s.t.path : what));
  }

  // Watches the queue of a holder that can yield: the registry directory,
  // or while there is none its parent, where a first waiter makes it, and
  // each user's directory in it, where the entries are made. A directory
  // still watched keeps its watch (no moment unwatched); only those gone
  // are dropped, after the new ones are in place.
  static void arm_yield(sys::watcher& watches, held_state& s) {
    if (!s.yield_reader) s.yield_reader = std::make_unique<registry_reader>(s.base);
    std::string parent, name;
    sys::split_path(s.yield_reader->top_path(), parent, name);
    s.yield_on_registry = sys::stat_at(s.t.parent.get(), name, s.yield_reader->top_path()).has_value();
    const int top_id = watches.watch_entries(s.yield_on_registry ? s.yield_reader->top_path() : parent);
    if (top_id != s.yield_watch_id) watches.unwatch(s.yield_watch_id);
    s.yield_watch_id = top_id;
    std::vector<int> dir_ids;
    (void)s.yield_reader->live();
    for (const auto& d : s.yield_reader->dir_paths()) dir_ids.push_back(watches.watch_entries(d));
    for (int id : s.yield_dir_ids)
      if (id != top_id && std::find(dir_ids.begin(), dir_ids.end(), id) == dir_ids.end()) watches.unwatch(id);
    s.yield_dir_ids = std::move(dir_ids);
  }

  // Whether a waiter above the holder's priority now waits: then the holder
  // is asked, once. Arms the watches before it looks, so that an entry made
  // after the look is an event and one made before it is seen by it.
  void check_yield(sys::watcher& watches, held_state& s) {
    arm_yield(watches, s);
    auto req = first_above(*s.yield_reader, s.slot, s.priority, sys::effective_uid());
    if (!req) return;
    for (int id : s.yield_dir_ids) watches.unwatch(id);
    s.yield_dir_ids.clear();
    watches.unwatch(s.yield_watch_id);
    s.yield_watch_id = -1;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!s.registered) return;  // released meanwhile
      s.yield_asked = true;
    }
    s.on_yield(*req);
  }

  static bool lease_pending(const held_state& s) { return s.lease_pending.load(std::memory_order_acquire); }
  static bool wants_yield(const held_state& s) { return s.on_yield && !s.yield_asked && !lease_pending(s); }

  // Asks the holder to make way, unless it has been asked already, for the
  // first waiter if there is one; `why` is the request's reason.
  void ask_once(held_state& s, const char* why) {
    bool ask = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!s.registered) return;  // released meanwhile
      ask = wants_yield(s);
      if (ask) s.yield_asked = true;
    }
    if (!ask) return;
    if (!s.yield_reader) s.yield_reader = std::make_unique<registry_reader>(s.base);
    // Nobody waits: the request names its reason as its label too.
    yield_request r = first_waiting(*s.yield_reader, s.slot).value_or(yield_request{0, why, 0});
    r.reason = why;
    s.on_yield(r);
  }

  // When the maximum hold passes: noted, and the holder asked to make way.
  // The caller checks max_hold_over() first.
  void reach_max_hold(held_state& s) {
    s.max_hold_reached = true;
    ask_once(s, "max hold");
  }

  // Milliseconds until `s`'s maximum hold passes (at least 0); -1 when it
  // has none, has been reached, or does not count yet (lease_pending).
  static std::int64_t max_hold_left(const held_state& s, std::int64_t now) {
    if (s.max_hold_ms <= 0 || s.max_hold_reached || lease_pending(s)) return -1;
    return std::max<std::int64_t>(0, s.taken_at + s.max_hold_ms - now);
  }

  void run() {
    sys::watcher watches;
    for (;;) {
      std::vector<std::shared_ptr<held_state>> live, check_now;
      // Let go of outside the mutex (below).
      std::vector<std::shared_ptr<void>> dropped;
      std::int64_t timeout = -1;
      {
        std::lock_guard<std::mutex> g(mu_);
        for (auto it = entries_.begin(); it != entries_.end();) {
          held_state& s = **it;
          if (s.registered && s.waited_with) dropped.push_back(std::move(s.waited_with));
          if (!s.registered) {
            watches.unwatch(s.watch_id);
            watches.unwatch(s.yield_watch_id);
            watches.unwatch(s.lease_watch_id);
            for (int id : s.yield_dir_ids) watches.unwatch(id);
            it = entries_.erase(it);
            continue;
          }
          const std::int64_t now = sys::monotonic_ms();
          if (!s.watch_tried && now >= s.held_since + kWatchAfterMs) {
            s.watch_tried = true;
            // Its contents too: a meta.json replaced in place (written,
            // renamed over) is a loss noticed at once, not at the next
            // refresh. Readers' closes and this holder's own touches
            // (attributes only) are no events here.
            s.watch_id = watches.watch_lock(s.t.path, true);
            check_now.push_back(*it);  // a loss, or a waiter above, before the watches existed
          }
          std::int64_t left = std::max<std::int64_t>(0, s.next_touch - now);
          if (!s.watch_tried) left = std::min(left, std::max<std::int64_t>(0, s.held_since + kWatchAfterMs - now));
          // Without a watch, loss is noticed at the next refresh at the latest.
          // A queue that cannot be watched is looked at every second.
          if (s.watch_tried && wants_yield(s) && s.yield_watch_id < 0) left = std::min(left, fallback_poll_ms);
          if (const std::int64_t m = max_hold_left(s, now); m >= 0) left = std::min(left, m);
          timeout = timeout < 0 ? left : std::min(timeout, left);
          live.push_back(*it);
          ++it;
        }
        const bool waits = check_now.empty();
        if (timeout < 0 && sys::monotonic_ms() - last_add_ < kLingerMs) timeout = kWatchAfterMs;
        wakes_at_ = !waits ? sys::monotonic_ms() : timeout < 0 ? -1 : sys::monotonic_ms() + timeout;
      }
      // What a new holder waited with (held_state::waited_with): its watches
      // are removed here, off the holder's way.
      dropped.clear();
      // The lease, once held (outside the service's mutex: the lease has
      // its own): its directory's entries, so that a claim replaced or
      // removed is a loss at once, not at the next renewal. Looked at once
      // when the watch is new.
      std::vector<std::shared_ptr<held_state>> lease_now;
      for (const auto& sp : live) {
        if (!sp->watch_tried || sp->lease_watch_tried) continue;
        const std::string dir = sp->lease_dir();
        if (dir.empty()) continue;
        sp->lease_watch_tried = true;
        sp->lease_watch_id = watches.watch_entries(dir);
        lease_now.push_back(sp);
      }
      std::vector<int> hit;
      if (check_now.empty() && lease_now.empty()) {
        (void)watches.wait(timeout, {wake_r_.get()}, &hit);
        sys::drain(wake_r_.get());
        // The wake pipe ends the wait before the watches are read: read them now.
        std::vector<int> more;
        if (watches.wait(0, {}, &more) == sys::watcher::wake::event) hit.insert(hit.end(), more.begin(), more.end());
      }
      const std::int64_t now = sys::monotonic_ms();
      for (const auto& sp : live) {
        held_state& s = *sp;
        const bool suspect = std::find(hit.begin(), hit.end(), s.watch_id) != hit.end() ||
                             std::find(check_now.begin(), check_now.end(), sp) != check_now.end();
        const bool due = now >= s.next_touch;
        const bool newly_watched = std::find(check_now.begin(), check_now.end(), sp) != check_now.end();
        auto hit_yield = [&] {
          if (std::find(hit.begin(), hit.end(), s.yield_watch_id) != hit.end()) return true;
          for (int id : s.yield_dir_ids)
            if (std::find(hit.begin(), hit.end(), id) != hit.end()) return true;
          return false;
        };
        if (s.watch_tried && wants_yield(s) && (newly_watched || s.yield_watch_id < 0 || hit_yield()))
          check_yield(watches, s);
        if (max_hold_left(s, now) == 0) reach_max_hold(s);
        if (!lease_pending(s) && s.idle_yield_due.exchange(false)) ask_once(s, "idle");
        const bool lease_suspect = std::find(lease_now.begin(), lease_now.end(), sp) != lease_now.end() ||
                                   std::find(hit.begin(), hit.end(), s.lease_watch_id) != hit.end();
        if (lease_suspect && s.lease_lost()) {
          report_lost(s, lease_loss_context(s.lease_claim_path()));
          continue;
        }
        if (!suspect && !due) continue;
        const auto mine = s.check_ours();
        if (mine == held_state::ownership::not_ours) {
          report_lost(s);
          continue;
        }
        if (mine == held_state::ownership::unknown) {
          // Could not look (out of descriptors, say): again soon, not lost.
          s.next_touch = std::min(s.next_touch, now + fallback_poll_ms);
          continue;
        }
        if (due) {
          s.next_touch = now + s.period();
          if (!s.touch()) report_lost(s, lease_loss_context(s.lease_claim_path()));
        }
      }
    }
  }

  std::mutex mu_;
  std::vector<std::shared_ptr<held_state>> entries_;
  // When the thread's current wait ends (monotonic ms; -1: it waits for a
  // wake). Under mu_.
  std::int64_t wakes_at_ = -1;
  // When the last lock was added (monotonic ms). Under mu_.
  std::int64_t last_add_ = -kLingerMs;
  sys::fd wake_r_, wake_w_;
  bool started_ = false;
};

#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
struct fork_guard {
  fork_guard() noexcept { heartbeat_service::install_fork_handlers(); }
};
const fork_guard installed_fork_guard;
#endif

}  // namespace

held_state::~held_state() { sys::unguard_from_fork(meta_fd.get()); }

std::int64_t held_state::period() const { return std::clamp<std::int64_t>(ttl / 4, 100, 60'000); }

bool held_state::max_hold_over() const {
  return max_hold_reached || (max_hold_ms > 0 && sys::monotonic_ms() >= taken_at + max_hold_ms);
}

bool held_state::in_owner() const { return sys::self_pid() == owner_pid; }

held_state::ownership held_state::check_ours(error* why) const {
  if (!in_owner()) return ownership::not_ours;
  auto failed = [why](const error& e) {
    if (e.code() == std::errc::no_such_file_or_directory || e.code() == std::errc::not_a_directory)
      return ownership::not_ours;
    if (why) *why = e;
    return ownership::unknown;
  };
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st) return failed(st.error());
  if (st->id != id) return ownership::not_ours;
  // meta.json still the file this holder wrote (and write-locks): its
  // contents are this holder's own, so they need no reading. Only a file
  // that is not (replaced, or a holder without its descriptor) is read for
  // the token.
  {
    std::lock_guard<std::mutex> g(meta_mu);
    if (meta_fd.valid()) {
      auto named = sys::stat_at(dir.get(), meta_file_name, t.path);
      if (!named) return failed(named.error());
      if (!meta_id) {
        auto mine = sys::stat_fd(meta_fd.get(), t.path);
        if (!mine) return failed(mine.error());
        meta_id = mine->id;
      }
      if (named->id == *meta_id) return ownership::ours;
    }
  }
  auto mb = sys::read_file_at(dir.get(), meta_file_name, meta_cap, t.path);
  if (!mb) return failed(mb.error());
  return !mb->truncated && parse_meta(mb->bytes).token == token ? ownership::ours : ownership::not_ours;
}

void held_state::drop_proof() {
  std::lock_guard<std::mutex> g(meta_mu);
  sys::unguard_from_fork(meta_fd.get());
  meta_fd.reset();
  meta_id.reset();
}

bool held_state::touch() {
  sys::crash_point("heartbeat.touch");
  (void)sys::touch_at(dir.get(), meta_file_name, t.path + "/" + meta_file_name);
  sys::crash_point("heartbeat.touched");
  std::lock_guard<std::mutex> g(lease_mu);
  // A renewal that fails for another reason is retried at the next one:
  // gpulease waits 120 s and the end of the window before it takes over.
  return !lease || lease->renew() != errc::lost;
}

std::string held_state::lease_claim_path() {
  std::lock_guard<std::mutex> g(lease_mu);
  return lease ? lease->claim_path() : std::string();
}

std::string held_state::lease_dir() {
  std::lock_guard<std::mutex> g(lease_mu);
  return lease && !lease->released() ? lease->dir() : std::string();
}

bool held_state::lease_lost() {
  std::lock_guard<std::mutex> g(lease_mu);
  return lease && !lease->released() && lease->check() == errc::lost;
}

std::uint64_t held_state::lease_epoch() {
  std::lock_guard<std::mutex> g(lease_mu);
  return lease ? lease->epoch() : 0;
}

std::vector<std::pair<std::string, std::string>> held_state::lease_environment() {
  std::lock_guard<std::mutex> g(lease_mu);
  if (!lease) return {};
  return lease->child_environment();
}

void held_state::abandon_lease() {
  std::lock_guard<std::mutex> g(lease_mu);
  if (lease) lease->abandon();
}

void held_state::adopt_lease() {
  std::lock_guard<std::mutex> g(lease_mu);
  if (lease) lease->adopt();
}

error held_state::release_lease() {
  std::lock_guard<std::mutex> g(lease_mu);
  if (!lease) return {};
  error e = lease->release();
  if (e == errc::lost) e = error(errc::lost, lease_loss_context(lease->claim_path()));
  lease.reset();
  return e;
}

held_state::kept held_state::keep_until_holder_exits() {
  sys::watcher w;
  std::int64_t touch_at = sys::monotonic_ms() + period();
  int dir_id = -1, pid_id = -1;
  bool proof = false;
  for (;;) {
    w.unwatch(dir_id);
    dir_id = w.watch_lock(t.path, false);
    if (!still_ours()) return kept::lost;
    // The proof of life: the process that made the claim may still hold it
    // for a moment (until it exits); taken over as soon as it lets go.
    if (!proof)
      if (auto f = sys::open_write(dir.get(), meta_file_name, t.path)) {
        if (!sys::ofd_lock(f->get(), true)) {
          std::lock_guard<std::mutex> g(meta_mu);
          sys::unguard_from_fork(meta_fd.get());
          meta_fd = std::move(*f);
          meta_id = sys::guard_from_fork(meta_fd.get());
          proof = true;
        }
      }
    if (pid_id < 0) pid_id = w.watch_pid(pid);
    // A zombie whose main thread ended while others work still holds: its
    // pidfd turns readable once every thread is gone.
    if (sys::has_ended(pid)) return kept::holder_exited;
    std::int64_t timeout = std::max<std::int64_t>(0, touch_at - sys::monotonic_ms());
    if (dir_id < 0 || pid_id < 0) timeout = std::min(timeout, fallback_poll_ms);
    if (!proof) timeout = std::min<std::int64_t>(timeout, 20);
    std::vector<int> fired;
    const auto why = w.wait(timeout, {}, &fired);
    if (std::find(fired.begin(), fired.end(), pid_id) != fired.end()) return kept::holder_exited;
    if (why == sys::watcher::wake::timeout && sys::monotonic_ms() >= touch_at) {
      if (!still_ours() || !touch()) return kept::lost;
      touch_at = sys::monotonic_ms() + period();
    }
  }
}

void start_heartbeat(const std::shared_ptr<held_state>& s) { heartbeat_service::get().add(s); }

void watch_lease(held_state&) { heartbeat_service::get().poke(); }

void ask_idle_yield(held_state& s) {
  s.idle_yield_due = true;
  heartbeat_service::get().poke();
}

void drop_later(held_state& s, std::shared_ptr<void> what) {
  heartbeat_service::get().drop_later(s, std::move(what));
}

void held_state::stop_heartbeat() {
  held_on = false;
  if (in_owner()) heartbeat_service::get().remove(this);
}

}  // namespace offload_lock::detail
