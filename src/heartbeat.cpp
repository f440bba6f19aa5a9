// The heartbeat (heartbeat.hpp): refresh and loss detection for one held lock,
// and the process-wide thread that looks after all of them (PROTOCOL B7).
#include "heartbeat.hpp"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "meta.hpp"
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
    s->next_touch = s->held_since + s->period();
    entries_.push_back(s);
    sys::notify(wake_w_.get());
  }

  void remove(held_state* s) {
    std::lock_guard<std::mutex> g(mu_);
    if (!s->registered) return;
    s->registered = false;
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

  void report_lost(held_state& s) {
    {
      std::lock_guard<std::mutex> g(mu_);
      // Released meanwhile: our own release, not a loss.
      if (!s.registered) return;
      s.registered = false;
    }
    if (s.on_lost) s.on_lost(error(errc::lost, s.t.path));
  }

  // Watches the queue of a holder that can yield: the registry directory,
  // or while there is none its parent, where a first waiter makes it.
  static void arm_yield(sys::watcher& watches, held_state& s) {
    watches.unwatch(s.yield_watch_id);
    if (!s.yield_reader) s.yield_reader = std::make_unique<registry_reader>(s.registry_path);
    std::string parent, name;
    sys::split_path(s.yield_reader->dir_path(), parent, name);
    s.yield_on_registry = sys::stat_at(s.t.parent.get(), name, s.yield_reader->dir_path()).has_value();
    s.yield_watch_id = watches.watch_entries(s.yield_on_registry ? s.yield_reader->dir_path() : parent);
  }

  // Whether a waiter above the holder's priority now waits: then the holder
  // is asked, once. Re-arms the watch when the registry came or went.
  void check_yield(sys::watcher& watches, held_state& s) {
    auto req = first_above(*s.yield_reader, s.slot, s.priority);
    if (!req) {
      std::string parent, name;
      sys::split_path(s.yield_reader->dir_path(), parent, name);
      const bool on_registry = sys::stat_at(s.t.parent.get(), name, s.yield_reader->dir_path()).has_value();
      if (on_registry != s.yield_on_registry || s.yield_watch_id < 0) arm_yield(watches, s);
      return;
    }
    watches.unwatch(s.yield_watch_id);
    s.yield_watch_id = -1;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!s.registered) return;  // released meanwhile
      s.yield_asked = true;
    }
    s.on_yield(*req);
  }

  static bool wants_yield(const held_state& s) { return s.on_yield && !s.yield_asked; }

  void run() {
    sys::watcher watches;
    for (;;) {
      std::vector<std::shared_ptr<held_state>> live, check_now;
      std::int64_t timeout = -1;
      {
        std::lock_guard<std::mutex> g(mu_);
        for (auto it = entries_.begin(); it != entries_.end();) {
          held_state& s = **it;
          if (!s.registered) {
            watches.unwatch(s.watch_id);
            watches.unwatch(s.yield_watch_id);
            it = entries_.erase(it);
            continue;
          }
          const std::int64_t now = sys::monotonic_ms();
          if (!s.watch_tried && now >= s.held_since + kWatchAfterMs) {
            s.watch_tried = true;
            s.watch_id = watches.watch_lock(s.t.path, false);
            check_now.push_back(*it);  // a loss before the watch existed
            if (wants_yield(s)) arm_yield(watches, s);
          }
          std::int64_t left = std::max<std::int64_t>(0, s.next_touch - now);
          if (!s.watch_tried) left = std::min(left, std::max<std::int64_t>(0, s.held_since + kWatchAfterMs - now));
          // Without a watch, loss is noticed at the next refresh at the latest.
          // A queue that cannot be watched is looked at every second.
          if (s.watch_tried && wants_yield(s) && s.yield_watch_id < 0) left = std::min(left, fallback_poll_ms);
          timeout = timeout < 0 ? left : std::min(timeout, left);
          live.push_back(*it);
          ++it;
        }
      }
      std::vector<int> hit;
      if (check_now.empty()) {
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
        if (s.watch_tried && wants_yield(s) &&
            (newly_watched || s.yield_watch_id < 0 ||
             std::find(hit.begin(), hit.end(), s.yield_watch_id) != hit.end()))
          check_yield(watches, s);
        if (!suspect && !due) continue;
        if (!s.still_ours()) {
          report_lost(s);
          continue;
        }
        if (due) {
          s.touch();
          s.next_touch = now + s.period();
        }
      }
    }
  }

  std::mutex mu_;
  std::vector<std::shared_ptr<held_state>> entries_;
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

std::int64_t held_state::period() const { return std::clamp<std::int64_t>(ttl / 4, 100, 60'000); }

bool held_state::in_owner() const { return sys::self_pid() == owner_pid; }

bool held_state::still_ours() const {
  if (!in_owner()) return false;
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st || st->id != id) return false;
  auto mb = sys::read_file_at(dir.get(), meta_file_name, meta_cap, t.path);
  return mb && !mb->truncated && parse_meta(mb->bytes).token == token;
}

void held_state::touch() {
  sys::crash_point("heartbeat.touch");
  (void)sys::touch_at(dir.get(), meta_file_name, t.path + "/" + meta_file_name);
  sys::crash_point("heartbeat.touched");
}

held_state::kept held_state::keep_until_holder_exits() {
  sys::watcher w;
  std::int64_t touch_at = sys::monotonic_ms() + period();
  int dir_id = -1, pid_id = -1;
  for (;;) {
    w.unwatch(dir_id);
    dir_id = w.watch_lock(t.path, false);
    if (!still_ours()) return kept::lost;
    if (pid_id < 0) pid_id = w.watch_pid(pid);
    const auto alive = sys::probe(pid);
    if (alive == sys::liveness::dead || alive == sys::liveness::zombie) return kept::holder_exited;
    std::int64_t timeout = std::max<std::int64_t>(0, touch_at - sys::monotonic_ms());
    if (dir_id < 0 || pid_id < 0) timeout = std::min(timeout, fallback_poll_ms);
    std::vector<int> fired;
    const auto why = w.wait(timeout, {}, &fired);
    if (std::find(fired.begin(), fired.end(), pid_id) != fired.end()) return kept::holder_exited;
    if (why == sys::watcher::wake::timeout && sys::monotonic_ms() >= touch_at) {
      if (!still_ours()) return kept::lost;
      touch();
      touch_at = sys::monotonic_ms() + period();
    }
  }
}

void start_heartbeat(const std::shared_ptr<held_state>& s) { heartbeat_service::get().add(s); }

void held_state::stop_heartbeat() {
  if (in_owner()) heartbeat_service::get().remove(this);
}

}  // namespace offload_lock::detail
