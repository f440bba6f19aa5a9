// Waiting for a held lock (wait.hpp): arming the watcher, sleeping until a
// change, the churn guard and the reports of a waiting acquisition (B9).
#include "wait.hpp"

#include <algorithm>
#include <thread>

#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

constexpr int kRoundsBeforePause = 100;
constexpr std::int64_t kChurnPauseMs = 10;

std::string key_of(const info& i) {
  return i.path + "|" + i.token + "|" + std::to_string(i.pid.value_or(0)) + "|" + i.label;
}

}  // namespace

deadline deadline_for(milliseconds wait) {
  return wait == wait_forever ? deadline::forever() : deadline::in_ms(wait.count());
}

void churn_guard::round_without_wait() {
  if (++rounds_ < kRoundsBeforePause) return;
  std::this_thread::sleep_for(milliseconds(kChurnPauseMs));
  rounds_ = 0;
}

std::optional<std::int64_t> armed_lock::arm(sys::watcher& w, const target& t, const snapshot& s, const verdict& v,
                                            std::int64_t poll_ms) {
  if (dir_id < 0 || dir_watched != s.id || contents_watched != v.watch_contents) {
    w.unwatch(dir_id);
    dir_id = w.watch_lock(t.path, v.watch_contents);
    dir_watched = sys::file_id{};
    // The directory may have been replaced between the look and the watch.
    auto st = sys::stat_at(t.parent.get(), t.name, t.path);
    if (!st || st->id != s.id) return std::nullopt;
    if (dir_id >= 0) {
      dir_watched = s.id;
      contents_watched = v.watch_contents;
    }
  }
  if (v.holder_pid != pid || pid_id < 0 || dead_seen.count(v.holder_pid)) {
    w.unwatch(pid_id);
    pid_id = -1;
    pid = v.holder_pid;
    if (v.holder_pid > 0 && !dead_seen.count(v.holder_pid)) {
      pid_id = w.watch_pid(v.holder_pid);
      // pidfd_open fails with ESRCH when the holder died just now.
      if (pid_id < 0 && w.has_pidfd() && sys::probe(v.holder_pid) == sys::liveness::dead) return std::nullopt;
    }
  }
  // A holder that cannot be watched, including one seen to exit that still
  // looks like the holder (its lock not yet released), is re-checked at the
  // fallback period rather than the long safety one.
  std::int64_t timeout = safety_recheck_ms;
  if (dir_id < 0 || (v.holder_pid > 0 && pid_id < 0)) timeout = poll_ms;
  if (v.changes_at_ms > 0) timeout = std::min(timeout, std::max<std::int64_t>(1, v.changes_at_ms - sys::now_ms()));
  return timeout;
}

void armed_lock::disarm(sys::watcher& w) {
  w.unwatch(dir_id);
  w.unwatch(pid_id);
  dir_id = pid_id = -1;
  dir_watched = sys::file_id{};
  pid = 0;
}

void armed_lock::woken(const std::vector<int>& fired, const sys::watcher& w) {
  if (pid_id >= 0 && std::find(fired.begin(), fired.end(), pid_id) != fired.end()) dead_seen.insert(pid);
  // The directory may have left the lock path (removed, its watch gone with
  // it, and its inode number given to the next one made): watched afresh at
  // the next arm. One whose contents alone changed (its holder's meta.json
  // written) is still the one watched.
  if (dir_id >= 0 && std::find(fired.begin(), fired.end(), dir_id) != fired.end() && w.left_path(dir_id))
    dir_watched = sys::file_id{};
}

bool lock_watch::wait_for_change(const target& t, const snapshot& s, const verdict& v, const deadline& until,
                                 std::int64_t poll_ms) {
  if (!w_) w_ = std::make_unique<sys::watcher>();
  auto armed = armed_.arm(*w_, t, s, v, poll_ms);
  if (!armed) return true;
  std::vector<int> fired;
  const auto why = w_->wait(until.clamp(*armed), {}, &fired);
  armed_.woken(fired, *w_);
  return why != sys::watcher::wake::extra_fd;
}

wait_report::wait_report(const reporting& r) : opt_(r), began_mono_(sys::monotonic_ms()) {}

void wait_report::waiting(std::vector<info> now, int position) {
  std::vector<std::string> now_keys;
  now_keys.reserve(now.size());
  bool changed = now.size() != keys_.size() || position != position_;
  position_ = position;
  for (std::size_t k = 0; k < now.size(); ++k) {
    now_keys.push_back(key_of(now[k]));
    if (k >= keys_.size() || keys_[k] != now_keys[k]) {
      changed = true;
      if (opt_.on_wait) opt_.on_wait(now[k]);
    }
  }
  keys_ = std::move(now_keys);
  holders_ = std::move(now);
  seen_mono_ = sys::monotonic_ms();
  if (next_tick_ < 0 && opt_.progress_every_ms > 0) next_tick_ = seen_mono_ + opt_.progress_every_ms;
  if (changed) report(true);
}

void wait_report::report(bool changed) {
  if (!opt_.on_progress) return;
  wait_progress p;
  p.holders = holders_;
  const std::int64_t now = sys::monotonic_ms();
  for (auto& h : p.holders)
    if (h.present) {
      const milliseconds since(now - seen_mono_);
      h.held_for += since;
      h.age += since;
      // The countdown runs as the hold does, down to 0 (overdue).
      if (h.expected_free_in) h.expected_free_in = std::max(milliseconds(0), *h.expected_free_in - since);
    }
  p.waited = milliseconds(now - began_mono_);
  p.changed = changed;
  p.position = position_;
  opt_.on_progress(p);
}

// Milliseconds until the next periodic report; -1 when none is due.
std::int64_t wait_report::tick_in() const {
  if (next_tick_ < 0 || !opt_.on_progress) return -1;
  return std::max<std::int64_t>(0, next_tick_ - sys::monotonic_ms());
}

void wait_report::tick() {
  if (next_tick_ >= 0 && opt_.on_progress && sys::monotonic_ms() >= next_tick_) {
    next_tick_ = sys::monotonic_ms() + opt_.progress_every_ms;
    report(false);
  }
}

}  // namespace offload_lock::detail
