// Acquire, reclaim, heartbeat and release: the protocol of PROTOCOL part A
// with the guarantees of part B. The order of the steps is the point of this
// file; each step says which rule it keeps.
#include "offload_lock/lock.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <pthread.h>
#include <set>
#include <thread>

#include "judge.hpp"
#include "meta.hpp"
#include "offload_lock/path.hpp"
#include "posix/sys.hpp"
#include "waiters.hpp"

namespace offload_lock {

const char* version() noexcept { return OFFLOAD_LOCK_VERSION; }

std::string new_token() { return detail::sys::random_hex(16); }

std::string describe_duration(milliseconds d) {
  long long ms = d.count();
  std::string sign = ms < 0 ? "-" : "";
  if (ms < 0) ms = -ms;
  auto two = [](long long v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (ms < 1000) return sign + std::to_string(ms) + "ms";
  long long s = ms / 1000;
  if (s < 60) return sign + std::to_string(s) + "s";
  if (s < 3600) return sign + std::to_string(s / 60) + "m" + two(s % 60) + "s";
  return sign + std::to_string(s / 3600) + "h" + two(s / 60 % 60) + "m";
}

namespace detail {

namespace {

constexpr const char* kMeta = "meta.json";
// With working notifications a waiter still re-checks this rarely, in case
// the lock lives on a file system whose remote changes send no events.
constexpr std::int64_t kSafetyRecheckMs = 60'000;
// Without notifications (or without pidfd for a live holder) it re-checks
// this often, like the Node runners.
constexpr std::int64_t kFallbackPollMs = 1'000;
// How long to wait for another process that is reclaiming the same stale lock.
constexpr std::int64_t kContendedRecheckMs = 50;
// Rounds of try/reclaim in a row, each undone by someone else, before pausing.
constexpr int kRoundsBeforePause = 100;
constexpr std::int64_t kChurnPauseMs = 10;
// A waiter registers in the waiter registry once it has waited this long.
constexpr std::int64_t kRegisterAfterMs = 100;

// The lock path, split, with its parent directory open.
struct target {
  std::string path, name;
  sys::fd parent;
};

result<target> open_target(const std::string& path) {
  if (path.empty()) return error(errc::bad_input, "lock path is empty");
  target t;
  t.path = path;
  std::string parent;
  sys::split_path(path, parent, t.name);
  if (t.name.empty() || t.name == "." || t.name == "..")
    return error(errc::bad_input, "lock path '" + path + "' names no directory");
  // The staging and moved-aside names beside the lock add this much to its
  // name ("." + name + ".stage-" + pid + "-" + 12 hex digits), and a name
  // is at most 255 bytes.
  constexpr std::size_t kMaxName = 255 - 28;
  if (t.name.size() > kMaxName)
    return error(sys::errno_code(std::errc::filename_too_long),
                 "lock path " + path + ": its last component is " + std::to_string(t.name.size()) +
                     " bytes; at most " + std::to_string(kMaxName) + " leave room for the staging names beside it");
  auto p = sys::open_dir(sys::cwd, parent, false, "parent directory " + parent + " of lock " + path);
  if (!p) return p.err();
  t.parent = std::move(*p);
  return t;
}

std::string stage_prefix(const target& t) { return "." + t.name + ".stage-"; }
std::string aside_prefix(const target& t) { return "." + t.name + ".aside-"; }
std::string unique_suffix() { return std::to_string(sys::self_pid()) + "-" + sys::random_hex(6); }

// Reads meta.json and the holder's OFD lock through an open lock directory.
void read_state(int dir, const std::string& path, snapshot& s) {
  auto mb = sys::read_file_at(dir, kMeta, meta_cap, path + "/" + kMeta);
  s.meta_exists = static_cast<bool>(mb);
  s.meta = parsed_meta{};
  if (mb) {
    s.meta_mtime_ms = mb->st.mtime_ms;
    // An oversized meta.json is read as unparseable, as a bound on work.
    if (!mb->truncated) s.meta = parse_meta(mb->bytes);
  }
  s.process_locked = sys::ofd_locked_elsewhere(dir);
}

// How long one waiter has seen the lock unchanged, by its own monotonic
// clock (snapshot::unchanged_for_ms): same directory, same mtimes.
struct watch_clock {
  bool have = false;
  sys::file_id id;
  bool meta_exists = false;
  std::int64_t dir_mtime = 0, meta_mtime = 0, since = 0;

  void update(snapshot& s) {
    const std::int64_t now = sys::monotonic_ms();
    bool same = have && s.present && s.id == id && s.meta_exists == meta_exists && s.dir_mtime_ms == dir_mtime &&
                s.meta_mtime_ms == meta_mtime;
    if (!same) {
      have = s.present;
      id = s.id;
      meta_exists = s.meta_exists;
      dir_mtime = s.dir_mtime_ms;
      meta_mtime = s.meta_mtime_ms;
      since = now;
    }
    s.unchanged_for_ms = now - since;
  }
};

struct observed {
  snapshot snap;
  sys::fd dir;  // the directory judged, when it could be opened
};

// What is at the path now. Only a failure to look at all is an error.
result<observed> observe(const target& t) {
  observed o;
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st) {
    if (st.err().code() == std::errc::no_such_file_or_directory) return o;
    return st.err();
  }
  o.snap.present = true;
  o.snap.is_dir = st->is_dir;
  o.snap.is_symlink = st->is_symlink;
  o.snap.id = st->id;
  o.snap.dir_mtime_ms = st->mtime_ms;
  o.snap.owner_uid = st->uid;
  if (!st->is_dir) return o;
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    // Gone since the stat: report it absent so the caller tries again. Any
    // other failure leaves the meta unreadable, as it is for every reader.
    if (d.err().code() == std::errc::no_such_file_or_directory) o.snap.present = false;
    return o;
  }
  if (auto fst = sys::stat_fd(d->get(), t.path)) {
    o.snap.id = fst->id;
    o.snap.dir_mtime_ms = fst->mtime_ms;
    o.snap.owner_uid = fst->uid;
  }
  read_state(d->get(), t.path, o.snap);
  o.dir = std::move(*d);
  return o;
}

// Leftover staging and moved-aside directories of processes that died
// mid-step, and dead waiters' registry entries. Best effort; never touches anything but directories with our
// names whose creating process is gone.
void clean_leftovers(const target& t) {
  auto names = sys::list_dir(t.parent.get(), "parent of " + t.path);
  if (!names) return;
  for (const auto& n : *names) {
    if (n == waiters_dir_name(t.name)) {
      // Entries of waiters killed while they waited, and the registry with
      // them once it is empty.
      sweep_waiters(t.parent.get(), n, t.path);
      continue;
    }
    std::string rest;
    for (const auto& prefix : {stage_prefix(t), aside_prefix(t)})
      if (n.compare(0, prefix.size(), prefix) == 0) rest = n.substr(prefix.size());
    if (rest.empty()) continue;
    std::int64_t pid = 0;
    try {
      pid = std::stoll(rest.substr(0, rest.find('-')));
    } catch (...) {
      continue;
    }
    if (pid <= 0 || sys::probe(pid) == sys::liveness::alive) continue;
    auto st = sys::stat_at(t.parent.get(), n, n);
    sys::crash_point("cleanup.leftover");
    if (st && st->is_dir) (void)sys::remove_lock_dir_at(t.parent.get(), n, n);
  }
}

enum class take_result { taken, busy };

struct taken_dir {
  sys::fd dir;
  // cppcheck-suppress unusedStructMember ; read as taken->id, through result's operator->
  sys::file_id id;
};

// B1 fallback for file systems that refuse RENAME_NOREPLACE: plain mkdir (as
// Node does), then meta.json written under a temporary name and renamed into
// place, so readers see no meta or a complete one, never a partial one.
result<taken_dir> take_with_mkdir(const target& t, const std::string& bytes, take_result& how) {
  if (auto e = sys::mkdir_at(t.parent.get(), t.name, 0777, t.path)) {
    if (e.code() == std::errc::file_exists) {
      how = take_result::busy;
      return taken_dir{};
    }
    return e;
  }
  sys::crash_point("acquire.mkdir-made");
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) return d.err();
  (void)sys::ofd_lock(d->get(), false);
  sys::crash_point("acquire.mkdir-locked");
  std::string tmp = ".meta.json." + sys::random_hex(6);
  error e = sys::write_new_file_at(d->get(), tmp, bytes, t.path + "/" + tmp);
  sys::crash_point("acquire.mkdir-meta-staged");
  if (!e) e = sys::rename_at(d->get(), tmp, kMeta, t.path + "/" + kMeta);
  sys::crash_point("acquire.mkdir-meta-renamed");
  if (e) {
    (void)sys::remove_lock_dir_at(t.parent.get(), t.name, t.path);
    return e;
  }
  auto st = sys::stat_fd(d->get(), t.path);
  if (!st) return st.err();
  how = take_result::taken;
  return taken_dir{std::move(*d), st->id};
}

// One attempt to take the lock (PROTOCOL A2 step 1, with B1): build the
// directory and its complete meta.json under a private name, take the
// holder's OFD read lock on it, then move it into place with
// RENAME_NOREPLACE. The lock is never visible without its meta.json.
result<taken_dir> try_take(const target& t, const std::string& bytes, take_result& how) {
  std::string stage = stage_prefix(t) + unique_suffix();
  std::string shown = "staging directory for " + t.path;
  // 0777 minus the umask: the same mode a Node runner's mkdir gives.
  if (auto e = sys::mkdir_at(t.parent.get(), stage, 0777, shown)) return e;
  sys::crash_point("acquire.stage-made");
  auto cleanup = [&] { (void)sys::remove_lock_dir_at(t.parent.get(), stage, shown); };
  auto d = sys::open_dir(t.parent.get(), stage, true, shown);
  if (!d) {
    cleanup();
    return d.err();
  }
  (void)sys::ofd_lock(d->get(), false);
  sys::crash_point("acquire.stage-locked");
  if (auto e = sys::write_new_file_at(d->get(), kMeta, bytes, t.path + "/" + kMeta)) {
    cleanup();
    return e;
  }
  sys::crash_point("acquire.meta-written");
  auto st = sys::stat_fd(d->get(), shown);
  if (!st) {
    cleanup();
    return st.err();
  }
  error e = sys::rename_noreplace(t.parent.get(), stage, t.name, t.path);
  if (!e) {
    sys::crash_point("acquire.renamed");
    how = take_result::taken;
    return taken_dir{std::move(*d), st->id};
  }
  cleanup();
  int err = e.code().value();
  if (err == static_cast<int>(std::errc::file_exists) || err == static_cast<int>(std::errc::directory_not_empty)) {
    how = take_result::busy;
    return taken_dir{};
  }
  if (err == static_cast<int>(std::errc::invalid_argument) || err == static_cast<int>(std::errc::function_not_supported)) return take_with_mkdir(t, bytes, how);
  return e;
}

enum class reclaim_result { reclaimed, changed, contended };

// Removes the directory at the path only if it is the one with identity
// `id`: checks, moves it aside under a unique name, checks the moved one,
// then deletes it without following symlinks. `changed` when the path no
// longer names that directory (nothing removed).
result<reclaim_result> remove_exact(const target& t, const sys::file_id& id, const std::string& failure,
                                    const char* op) {
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st || st->id != id) return reclaim_result::changed;
  std::string aside = aside_prefix(t) + unique_suffix();
  if (auto e = sys::rename_at(t.parent.get(), t.name, aside, t.path)) {
    if (e.code() == std::errc::no_such_file_or_directory) return reclaim_result::changed;
    return error(e.code(), failure);
  }
  sys::crash_point(op, "moved-aside");
  auto moved = sys::stat_at(t.parent.get(), aside, aside);
  if (moved && moved->id != id) {
    // Another participant replaced the directory between the check and the
    // rename: that one is live. Put it back.
    if (auto e = sys::rename_noreplace(t.parent.get(), aside, t.name, t.path))
      return error(e.code(), "moved a live lock aside at " + t.path +
                                 " and could not put it back; it is at " + aside);
    return reclaim_result::changed;
  }
  // Only what a lock holds is removed. A directory that turns out to hold
  // anything else (put there since it was checked) is not a lock: it goes
  // back where it was, untouched. Any other failure leaves only our
  // moved-aside name, which the next acquisition cleans up; the lock path
  // itself is already free.
  if (auto e = sys::remove_lock_dir_at(t.parent.get(), aside, t.path, op)) {
    if (e.code() != std::errc::directory_not_empty) return reclaim_result::reclaimed;
    if (sys::rename_noreplace(t.parent.get(), aside, t.name, t.path))
      return error(e.code(), e.context() + "; it is at " + aside + " beside it now");
    return e;
  }
  return reclaim_result::reclaimed;
}

// B4: remove exactly the directory that was judged stale. Under a flock on
// it (which serializes offload-lock reclaimers), check again that no live
// offload-lock process holds it and it is still stale, then remove exactly
// that directory (remove_exact).
result<reclaim_result> reclaim(const target& t, observed& o, const verdict& why, std::int64_t ttl,
                               std::int64_t grace, const process_view& pv) {
  std::string failure = "cannot remove stale lock " + t.path + " (" + why.reason + ")";
  if (o.snap.owner_uid != sys::effective_uid())
    failure += " owned by uid " + std::to_string(o.snap.owner_uid);
  if (o.dir.valid()) {
    if (auto e = sys::try_flock_exclusive(o.dir.get())) {
      if (e.code() == std::errc::operation_would_block) return reclaim_result::contended;
    }
    sys::crash_point("reclaim.flocked");
    const bool had_meta = o.snap.meta_exists;
    const std::int64_t had_mtime = o.snap.meta_mtime_ms;
    read_state(o.dir.get(), t.path, o.snap);
    // Refreshed since it was judged: the time seen unchanged starts again.
    if (o.snap.meta_exists != had_meta || o.snap.meta_mtime_ms != had_mtime) o.snap.unchanged_for_ms = 0;
    if (!judge(o.snap, sys::now_ms(), ttl, grace, pv).stale) return reclaim_result::changed;
    // A directory holding what a lock never holds is not a lock (a mistyped
    // GPU_LOCK naming a real directory, say): refuse, and touch nothing.
    if (auto e = sys::check_lock_contents(o.dir.get(), t.path)) return e;
  }
  return remove_exact(t, o.snap.id, failure, "reclaim");
}

// A file, a symlink (to anything, or dangling) or any other non-directory
// at the lock path: never followed, never removed.
error not_a_lock_directory(const std::string& path, const snapshot& s) {
  return error(sys::errno_code(std::errc::not_a_directory),
               "lock path " + path + (s.is_symlink ? " is a symbolic link" : " exists and is not a directory") +
                   "; refusing to follow or remove it");
}

struct detailed {
  info i;
  verdict v;
  observed o;
};

void fill_info(const snapshot& s, std::int64_t now, info& i) {
  i.present = s.present;
  if (!s.present) return;
  i.owner_uid = s.owner_uid;
  if (!s.meta_exists) return;
  const parsed_meta& m = s.meta;
  if (m.js_pid && *m.js_pid == static_cast<double>(static_cast<std::int64_t>(*m.js_pid)))
    i.pid = static_cast<std::int64_t>(*m.js_pid);
  i.started_at = m.started_at;
  i.label = m.label;
  i.host = m.host;
  i.token = m.token;
  i.tool = m.tool;
  i.age = milliseconds(now - s.meta_mtime_ms);
  i.held_for = m.started_at ? milliseconds(now - *m.started_at) : i.age;
}

result<detailed> inspect_target(const target& t, std::int64_t ttl, std::int64_t grace,
                                const process_view& pv, watch_clock* seen = nullptr) {
  auto o = observe(t);
  if (!o) return o.err();
  detailed d;
  d.o = std::move(*o);
  if (seen) seen->update(d.o.snap);
  std::int64_t now = sys::now_ms();
  d.i.path = t.path;
  fill_info(d.o.snap, now, d.i);
  const snapshot& s = d.o.snap;
  if (!s.present) return d;
  if (!s.is_dir) {
    d.i.stale = s.is_symlink ? "a symbolic link, not a directory (never followed)" : "not a directory";
    d.i.node_stale = true;
    d.v.stale = true;
    d.v.reason = *d.i.stale;
    return d;
  }
  d.v = judge(s, now, ttl, grace, pv);
  d.i.held = !d.v.stale;
  if (d.v.stale) d.i.stale = d.v.reason;
  d.i.node_stale = node_is_stale(s, now, ttl, pv);
  d.i.go_held = go_inspect(s, now, ttl, pv).held;
  return d;
}

// What one acquisition does while it waits for another process: registers
// in the waiter registry (once, at its first wait) and reports the holders
// it waits for through on_wait and on_progress.
struct wait_report {
  const lock_options& opt;
  std::string registry_path;  // slot 0's path
  int gpu = -1, gpus = 1;
  std::int64_t began_mono = sys::monotonic_ms();
  std::int64_t began_wall = sys::now_ms();
  std::unique_ptr<waiter_registration> reg;
  bool tried_registering = false;
  std::vector<info> holders;
  std::vector<std::string> keys;
  std::int64_t seen_mono = 0, next_tick = -1;

  wait_report(const lock_options& o, std::string base, int g, int n)
      : opt(o), registry_path(std::move(base)), gpu(g), gpus(n) {}

  static std::string key_of(const info& i) {
    return i.path + "|" + i.token + "|" + std::to_string(i.pid.value_or(0)) + "|" + i.label;
  }

  // Registers in the waiter registry once the wait has lasted
  // kRegisterAfterMs: a quick handoff never touches the registry.
  void maybe_register() {
    if (tried_registering || !opt.register_waiter || sys::monotonic_ms() < began_mono + kRegisterAfterMs) return;
    tried_registering = true;
    waiter_record r;
    r.pid = sys::self_pid();
    r.label = opt.label.empty() ? sys::program_name() : opt.label;
    r.host = sys::host_name();
    r.boot_id = sys::boot_id();
    if (auto ps = sys::start_of(r.pid)) r.proc_ticks = ps->ticks;
    r.since = began_wall;
    r.gpu = gpu;
    r.gpus = gpus;
    reg = waiter_registration::add(registry_path, r);
  }

  // Before each wait, with the holders as just judged.
  void waiting(std::vector<info> now) {
    maybe_register();
    std::vector<std::string> now_keys;
    bool changed = now.size() != keys.size();
    for (std::size_t k = 0; k < now.size(); ++k) {
      now_keys.push_back(key_of(now[k]));
      if (k >= keys.size() || keys[k] != now_keys[k]) {
        changed = true;
        if (opt.on_wait) opt.on_wait(now[k]);
      }
    }
    keys = std::move(now_keys);
    holders = std::move(now);
    seen_mono = sys::monotonic_ms();
    if (next_tick < 0 && opt.progress_every.count() > 0) next_tick = seen_mono + opt.progress_every.count();
    if (changed) report(true);
  }

  void report(bool changed) {
    if (!opt.on_progress) return;
    wait_progress p;
    p.holders = holders;
    const std::int64_t now = sys::monotonic_ms();
    for (auto& h : p.holders)
      if (h.present) {
        h.held_for += milliseconds(now - seen_mono);
        h.age += milliseconds(now - seen_mono);
      }
    p.waited = milliseconds(now - began_mono);
    p.changed = changed;
    opt.on_progress(p);
  }

  // Milliseconds until the next periodic report or the registration,
  // whichever is first; -1 when neither is due.
  std::int64_t tick_in() const {
    const std::int64_t now = sys::monotonic_ms();
    std::int64_t t = -1;
    if (next_tick >= 0 && opt.on_progress) t = std::max<std::int64_t>(0, next_tick - now);
    if (!tried_registering && opt.register_waiter) {
      const std::int64_t r = std::max<std::int64_t>(0, began_mono + kRegisterAfterMs - now);
      t = t < 0 ? r : std::min(t, r);
    }
    return t;
  }

  // Waits with `wait_fn(timeout)` for at most `timeout` (negative: no
  // limit), reporting progress at each tick on the way.
  template <typename F>
  sys::watcher::wake wait_ticking(std::int64_t timeout, F wait_fn) {
    const std::int64_t end = timeout < 0 ? -1 : sys::monotonic_ms() + timeout;
    for (;;) {
      std::int64_t t = end < 0 ? -1 : std::max<std::int64_t>(0, end - sys::monotonic_ms());
      const std::int64_t tick = tick_in();
      const bool ticking = tick >= 0 && (t < 0 || tick < t);
      if (ticking) t = tick;
      auto why = wait_fn(t);
      if (why != sys::watcher::wake::timeout || !ticking) return why;
      maybe_register();
      if (next_tick >= 0 && opt.on_progress && sys::monotonic_ms() >= next_tick) {
        next_tick = sys::monotonic_ms() + opt.progress_every.count();
        report(false);
      }
    }
  }
};

// Prepares `w` to wake when the judged state of the lock may change: the
// directory removed or moved, its meta.json written (when incomplete), the
// holder's death. Returns how long a wait may last before a re-check is
// due (the verdict's own expiry, or the fallback period where something
// cannot be watched), or nullopt when the state has changed already.
std::optional<std::int64_t> arm(sys::watcher& w, const target& t, const snapshot& s, const verdict& v,
                                const std::set<std::int64_t>& dead_seen, std::int64_t poll_ms) {
  bool dir_watched = w.watch_dir(t.path, v.incomplete);
  // The directory may have been replaced between the look and the watch.
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st || st->id != s.id) return std::nullopt;
  bool pid_watched = false;
  if (v.holder_pid > 0 && !dead_seen.count(v.holder_pid)) {
    pid_watched = w.watch_pid(v.holder_pid);
    // pidfd_open fails with ESRCH when the holder died just now.
    if (!pid_watched && w.has_pidfd() && sys::probe(v.holder_pid) == sys::liveness::dead) return std::nullopt;
  } else {
    w.unwatch_pid();
  }
  // A holder that cannot be watched, including one seen to exit that still
  // looks like the holder (its lock not yet released), is re-checked at the
  // fallback period rather than the long safety one.
  std::int64_t timeout = kSafetyRecheckMs;
  if (!dir_watched || (v.holder_pid > 0 && !pid_watched)) timeout = poll_ms;
  if (v.changes_at_ms > 0) timeout = std::min(timeout, std::max<std::int64_t>(1, v.changes_at_ms - sys::now_ms()));
  return timeout;
}

// Sleeps until the judged state of the lock may have changed (see arm) or
// the deadline. Never a busy loop: every path out of here is an event or a
// timer of at least the fallback period, except expiries the verdict itself
// named. False when one of cancel_fds woke it.
bool wait_for_change(sys::watcher& w, const target& t, const snapshot& s, const verdict& v,
                     std::set<std::int64_t>& dead_seen, std::int64_t deadline_mono, std::int64_t poll_ms,
                     const std::vector<int>& cancel_fds = {}, wait_report* rep = nullptr) {
  auto armed = arm(w, t, s, v, dead_seen, poll_ms);
  if (!armed) return true;
  std::int64_t timeout = *armed;
  if (deadline_mono >= 0) timeout = std::min(timeout, std::max<std::int64_t>(0, deadline_mono - sys::monotonic_ms()));
  auto why = rep ? rep->wait_ticking(timeout, [&](std::int64_t ms) { return w.wait(ms, cancel_fds); })
                 : w.wait(timeout, cancel_fds);
  if (why == sys::watcher::wake::pid_exit) dead_seen.insert(v.holder_pid);
  return why != sys::watcher::wake::extra_fd;
}

}  // namespace

// The state of one held acquisition of the lock directory.
struct held_state {
  target t;
  sys::fd dir;  // keeps the OFD read lock: proof of life for other offload-lock processes
  sys::file_id id;
  std::string token, meta;
  std::int64_t pid = 0;
  std::int64_t ttl = 0;
  std::function<void(const error&)> on_lost;
  bool released = false;

  // Kept by the process's heartbeat service (under its mutex).
  bool registered = false;
  int watch_id = -1;
  bool watch_tried = false;
  std::int64_t next_touch = 0;

  std::int64_t period() const { return std::clamp<std::int64_t>(ttl / 4, 100, 60'000); }

  // Same directory at the path, with our token in its meta.json.
  bool still_ours() const {
    auto st = sys::stat_at(t.parent.get(), t.name, t.path);
    if (!st || st->id != id) return false;
    auto mb = sys::read_file_at(dir.get(), kMeta, meta_cap, t.path);
    return mb && !mb->truncated && parse_meta(mb->bytes).token == token;
  }

  enum class kept { lost, holder_exited };

  // B7 and loss detection: refresh meta.json's mtime well inside the TTL
  // while the lock is still ours, and notice at once (inotify on the lock
  // and its name in the parent) when it is removed or replaced. With
  // watch_holder, also end when the recorded holder process exits.
  kept keep(bool watch_holder) {
    sys::watcher w;
    // cppcheck-suppress shadowVariable ; this loop's own deadline; the member is the heartbeat service's
    std::int64_t next_touch = sys::monotonic_ms() + period();
    for (;;) {
      bool dir_watched = w.watch_dir(t.path, false);
      if (!still_ours()) return kept::lost;
      bool pid_watched = false;
      if (watch_holder) {
        pid_watched = w.watch_pid(pid);
        auto alive = sys::probe(pid);
        if (alive == sys::liveness::dead || alive == sys::liveness::zombie) return kept::holder_exited;
      }
      std::int64_t timeout = std::max<std::int64_t>(0, next_touch - sys::monotonic_ms());
      if (!dir_watched || (watch_holder && !pid_watched)) timeout = std::min(timeout, kFallbackPollMs);
      switch (w.wait(timeout)) {
        case sys::watcher::wake::pid_exit: return kept::holder_exited;
        case sys::watcher::wake::extra_fd:  // none are watched here
        case sys::watcher::wake::dir_event: break;  // re-checked at the top
        case sys::watcher::wake::timeout:
          if (sys::monotonic_ms() >= next_touch) {
            if (!still_ours()) return kept::lost;
            sys::crash_point("heartbeat.touch");
            (void)sys::touch_at(dir.get(), kMeta, t.path + "/" + kMeta);
            sys::crash_point("heartbeat.touched");
            next_touch = sys::monotonic_ms() + period();
          }
          break;
      }
    }
  }

  void stop_heartbeat();

  // B5: remove the directory only if it is still ours.
  error release() {
    stop_heartbeat();
    if (released) return {};
    released = true;
    if (!still_ours()) return error(errc::lost, t.path);
    sys::crash_point("release.checked");
    auto r = remove_exact(t, id, "cannot release lock " + t.path, "release");
    if (!r) return r.err();
    return *r == reclaim_result::reclaimed ? error{} : error(errc::lost, t.path);
  }
};

// B7 and loss detection for every lock this process holds, on one thread
// that lives as long as the process: acquire and release only register and
// unregister (no thread to start or join per acquisition). The thread
// refreshes each meta.json's mtime every TTL/4 (at most every 60 s) and,
// woken by inotify, calls on_lost as soon as a lock is removed or replaced.
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
    s->next_touch = sys::monotonic_ms() + s->period();
    entries_.push_back(s);
    sys::notify(wake_w_.get());
  }

  void remove(held_state* s) {
    std::lock_guard<std::mutex> g(mu_);
    if (!s->registered) return;
    s->registered = false;
    sys::notify(wake_w_.get());
  }

 private:
  static heartbeat_service*& instance() {
    static heartbeat_service* p = nullptr;
    return p;
  }
  friend struct fork_guard;
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

  void run() {
    sys::lock_watches watches;
    for (;;) {
      std::vector<std::shared_ptr<held_state>> live, check_now;
      std::int64_t timeout = -1;
      {
        std::lock_guard<std::mutex> g(mu_);
        for (auto it = entries_.begin(); it != entries_.end();) {
          held_state& s = **it;
          if (!s.registered) {
            if (s.watch_id >= 0) watches.remove(s.watch_id);
            it = entries_.erase(it);
            continue;
          }
          if (!s.watch_tried) {
            s.watch_tried = true;
            s.watch_id = watches.add(s.t.path);
            check_now.push_back(*it);  // a loss before the watch existed
          }
          std::int64_t left = std::max<std::int64_t>(0, s.next_touch - sys::monotonic_ms());
          // Without a watch, loss is noticed at the next refresh at the latest.
          timeout = timeout < 0 ? left : std::min(timeout, left);
          live.push_back(*it);
          ++it;
        }
      }
      std::vector<int> hit;
      if (check_now.empty()) {
        sys::wait_readable({wake_r_.get(), watches.fd()}, timeout);
        sys::drain(wake_r_.get());
        hit = watches.take_events();
      }
      const std::int64_t now = sys::monotonic_ms();
      for (const auto& sp : live) {
        held_state& s = *sp;
        bool suspect = std::find(hit.begin(), hit.end(), s.watch_id) != hit.end() ||
                       std::find(check_now.begin(), check_now.end(), sp) != check_now.end();
        bool due = now >= s.next_touch;
        if (!suspect && !due) continue;
        if (!s.still_ours()) {
          report_lost(s);
          continue;
        }
        if (due) {
          sys::crash_point("heartbeat.touch");
          (void)sys::touch_at(s.dir.get(), kMeta, s.t.path + "/" + kMeta);
          sys::crash_point("heartbeat.touched");
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

void held_state::stop_heartbeat() { heartbeat_service::get().remove(this); }

// A number for the calling thread that no other thread of this process ever
// had. std::thread::id values are reused once a thread ends, and a new
// thread that inherited an ended holder's id must not pass through as a
// nested acquisition.
std::uint64_t this_thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t mine = next.fetch_add(1);
  return mine;
}

// B10: the threads of one process that want the same lock queue here, in
// arrival order, and only the thread at the front makes the file claim. One
// gate per lock directory (parent device and inode, and name).
struct local_gate {
  std::mutex mu;
  std::condition_variable cv;
  // cppcheck-suppress unusedStructMember ; used as gate->queue, through a shared_ptr
  std::deque<std::uint64_t> queue;  // tickets of waiting threads, oldest first
  std::uint64_t next_ticket = 0;
  bool owned = false;
  std::uint64_t owner = 0;          // this_thread_serial() of the owning thread
  int depth = 0;                    // acquisitions by the owner thread, nested ones included
  std::shared_ptr<held_state> held;
  std::string inherited_token;      // set when the claim is the parent process's (B11)
};

std::mutex& gate_registry_mu() {
  static std::mutex m;
  return m;
}

// fork() copies only the calling thread. A mutex another thread held at that
// moment would stay locked in the child forever, and the child's first
// acquisition would hang on it: so the process-wide mutexes are taken
// around fork, and the child starts a heartbeat service of its own (it has
// no service thread).
struct fork_guard {
  fork_guard() noexcept { ::pthread_atfork(&prepare, &parent, &child); }
  static void prepare() {
    gate_registry_mu().lock();
    heartbeat_service::instance_mu().lock();
  }
  static void parent() {
    heartbeat_service::instance_mu().unlock();
    gate_registry_mu().unlock();
  }
  static void child() {
    heartbeat_service::instance() = nullptr;
    parent();
  }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif

std::shared_ptr<local_gate> gate_for(const target& t) {
  std::mutex& registry_mu = gate_registry_mu();
  static std::map<std::string, std::weak_ptr<local_gate>> registry;
  std::string key = t.name;
  if (auto st = sys::stat_fd(t.parent.get(), t.path))
    key = std::to_string(st->id.dev) + ":" + std::to_string(st->id.ino) + "/" + t.name;
  std::lock_guard<std::mutex> g(registry_mu);
  auto& slot = registry[key];
  auto gate = slot.lock();
  if (!gate) {
    gate = std::make_shared<local_gate>();
    slot = gate;
  }
  return gate;
}

// B11: the lock this process was started under (OFFLOAD_LOCK_PATH and
// OFFLOAD_LOCK_TOKEN, exported by `offload-lock run` and
// lock::child_environment()), when it is this lock and still held with that
// token.
std::optional<std::string> inherited_token(const target& t, std::int64_t ttl, std::int64_t grace) {
  auto token = sys::get_env("OFFLOAD_LOCK_TOKEN");
  if (!token || token->empty()) return std::nullopt;
  if (auto env_path = sys::get_env("OFFLOAD_LOCK_PATH"); env_path && !env_path->empty()) {
    auto other = open_target(*env_path);
    if (!other || other->name != t.name) return std::nullopt;
    auto a = sys::stat_fd(other->parent.get(), *env_path), b = sys::stat_fd(t.parent.get(), t.path);
    if (!a || !b || a->id != b->id) return std::nullopt;
  }
  auto d = inspect_target(t, ttl, grace, process_view::real());
  if (!d || !d->i.held || d->i.token != *token) return std::nullopt;
  return *token;
}

// One acquisition as a `lock` sees it: the owner of the process's claim, a
// nested acquisition on the owner thread, or a claim passed down by a parent.
struct handle {
  std::shared_ptr<local_gate> gate;
  bool outermost = false;
  bool released = false;
  int gpu = 0;
};

// `slot_seen`: the watch clock of a caller that judges this lock across
// several calls (a wait among GPU slots); each call has its own otherwise.
result<std::shared_ptr<held_state>> acquire_file(target t, const lock_options& opt, meta_record rec,
                                                  std::int64_t deadline, wait_report* rep,
                                                  watch_clock* slot_seen = nullptr) {
  const std::string path = t.path;
  const process_view pv = process_view::real();
  const std::int64_t ttl = opt.ttl.count(), grace = opt.grace.count();
  clean_leftovers(t);

  std::unique_ptr<sys::watcher> w;
  std::set<std::int64_t> dead_seen;
  watch_clock own_seen{};
  watch_clock& seen = slot_seen ? *slot_seen : own_seen;
  int rounds_without_wait = 0;
  for (;;) {
    // Every round that ends without a wait means another participant changed
    // the lock meanwhile. Should that go on and on, pause between rounds
    // rather than spin.
    if (rounds_without_wait >= kRoundsBeforePause) {
      std::this_thread::sleep_for(milliseconds(kChurnPauseMs));
      rounds_without_wait = 0;
    }
    rec.started_at = sys::now_ms();
    std::string bytes = serialize(rec);
    take_result how = take_result::busy;
    auto taken = try_take(t, bytes, how);
    if (!taken) return taken.err();
    if (how == take_result::taken) {
      auto s = std::make_shared<held_state>();
      s->t = std::move(t);
      s->dir = std::move(taken->dir);
      s->id = taken->id;
      s->token = rec.token;
      s->meta = bytes;
      s->pid = rec.pid;
      s->ttl = ttl;
      s->on_lost = opt.on_lost;
      if (opt.heartbeat) heartbeat_service::get().add(s);
      return s;
    }

    auto d = inspect_target(t, ttl, grace, pv, &seen);
    if (!d) return d.err();
    if (!d->o.snap.present) {  // released in the meantime: try again at once
      ++rounds_without_wait;
      continue;
    }
    if (!d->o.snap.is_dir) return not_a_lock_directory(path, d->o.snap);
    verdict v = d->v;
    if (v.stale) {
      auto r = reclaim(t, d->o, d->v, ttl, grace, pv);
      if (!r) return r.err();
      if (*r != reclaim_result::contended) {
        ++rounds_without_wait;
        continue;
      }
      // Another reclaimer is at work: its rename wakes us, this timer bounds it.
      v.reason = "being reclaimed by another process";
      v.stale = false;
      v.holder_pid = 0;
      v.incomplete = false;
      v.changes_at_ms = sys::now_ms() + kContendedRecheckMs;
    }
    rounds_without_wait = 0;
    if (opt.wait.count() <= 0) return error(errc::busy, path);
    if (deadline >= 0 && sys::monotonic_ms() >= deadline) return error(errc::timed_out, path);
    if (rep) rep->waiting({d->i});
    if (!w) w = std::make_unique<sys::watcher>();
    d->o.dir.reset();
    if (!wait_for_change(*w, t, d->o.snap, v, dead_seen, deadline, kFallbackPollMs, opt.cancel_fds, rep))
      return error(errc::cancelled, path);
  }
}


}  // namespace detail

using namespace detail;

lock::lock() noexcept = default;
lock::lock(std::unique_ptr<handle> h) noexcept : h_(std::move(h)) {}
lock::lock(lock&&) noexcept = default;
// NOLINTNEXTLINE(bugprone-exception-escape): release() calls std::get and result::err() only after checking which alternative is held
lock& lock::operator=(lock&& o) noexcept {
  if (this != &o) {
    if (h_) (void)release();
    h_ = std::move(o.h_);
  }
  return *this;
}
// NOLINTNEXTLINE(bugprone-exception-escape): as operator= above
lock::~lock() {
  if (h_) (void)release();
}

bool lock::owns() const noexcept { return static_cast<bool>(h_); }

namespace {
const std::string kEmpty;
}

bool lock::still_held() const {
  if (!h_) return false;
  std::lock_guard<std::mutex> g(h_->gate->mu);
  if (h_->gate->held) return h_->gate->held->still_ours();
  return !h_->gate->inherited_token.empty();
}

const std::string& lock::path() const { return h_ && h_->gate->held ? h_->gate->held->t.path : kEmpty; }
const std::string& lock::token() const {
  if (!h_) return kEmpty;
  return h_->gate->held ? h_->gate->held->token : h_->gate->inherited_token;
}
const std::string& lock::meta_json() const { return h_ && h_->gate->held ? h_->gate->held->meta : kEmpty; }
int lock::gpu() const noexcept { return h_ ? h_->gpu : 0; }
std::int64_t lock::pid() const { return h_ && h_->gate->held ? h_->gate->held->pid : 0; }
bool lock::nested() const noexcept { return h_ && !h_->outermost; }
bool lock::inherited() const noexcept { return h_ && h_->outermost && !h_->gate->held && !h_->gate->inherited_token.empty(); }

std::vector<std::pair<std::string, std::string>> lock::child_environment() const {
  if (!h_) return {};
  std::lock_guard<std::mutex> g(h_->gate->mu);
  std::string path = h_->gate->held ? h_->gate->held->t.path : sys::get_env("OFFLOAD_LOCK_PATH").value_or("");
  return {{"OFFLOAD_LOCK_PATH", path}, {"OFFLOAD_LOCK_TOKEN", token()}};
}

error lock::release() {
  if (!h_) return error(errc::lost, "release of a lock that is not held");
  std::unique_ptr<handle> h = std::move(h_);
  local_gate& g = *h->gate;
  std::unique_lock<std::mutex> guard(g.mu);
  // A nested acquisition only counts down; the outermost one releases.
  if (g.depth > 0) --g.depth;
  if (!h->outermost) return {};
  std::shared_ptr<held_state> held = std::move(g.held);
  g.inherited_token.clear();
  g.owned = false;
  g.depth = 0;
  guard.unlock();
  error e = held ? held->release() : error{};  // an inherited claim stays the parent's
  g.cv.notify_all();
  return e;
}

void lock::detach() noexcept {
  if (!h_) return;
  std::unique_ptr<handle> h = std::move(h_);
  std::lock_guard<std::mutex> guard(h->gate->mu);
  if (!h->outermost) {
    if (h->gate->depth > 0) --h->gate->depth;
    return;
  }
  if (h->gate->held) {
    h->gate->held->stop_heartbeat();
    h->gate->held->released = true;
  }
  h->gate->held.reset();
  h->gate->inherited_token.clear();
  h->gate->owned = false;
  h->gate->depth = 0;
  h->gate->cv.notify_all();
}

error lock::hold_for_holder() {
  if (!h_ || !h_->outermost || !h_->gate->held) return error(errc::lost, "hold of a lock that is not held here");
  std::shared_ptr<held_state> held = h_->gate->held;
  held->stop_heartbeat();
  auto why = held->keep(true);
  if (why == held_state::kept::lost) {
    held->released = true;
    detach();
    return error(errc::lost, held->t.path);
  }
  return release();
}

result<lock> lock::acquire(const std::string& path, milliseconds wait) {
  lock_options o;
  o.path = path;
  o.wait = wait;
  return acquire(o);
}

namespace detail {
struct acquirer {
  static result<lock> acquire_slot(const lock_options& opt, const std::string& path, int gpu, wait_report* rep,
                                   watch_clock* seen = nullptr);
  static result<lock> acquire_any(const lock_options& opt, const std::string& base);
};
}  // namespace detail

// One slot's lock: the in-process queue (B10), a claim passed down (B11),
// then the file claim.
result<lock> acquirer::acquire_slot(const lock_options& opt, const std::string& path, int gpu, wait_report* rep,
                                    watch_clock* seen) {
  auto tr = open_target(path);
  if (!tr) return tr.err();
  if (opt.pid < 0) return error(errc::bad_input, "holder pid " + std::to_string(opt.pid));

  meta_record rec;
  rec.pid = opt.pid ? opt.pid : sys::self_pid();
  rec.token = opt.token.empty() ? new_token() : opt.token;
  if (rec.token.size() > 128 ||
      rec.token.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
          std::string::npos)
    return error(errc::bad_input, "token '" + rec.token + "'");
  rec.label = opt.label.empty() ? sys::program_name() : opt.label;
  rec.host = sys::host_name();
  rec.boot_id = sys::boot_id();
  if (auto ps = sys::start_of(rec.pid)) {
    rec.proc_start = ps->epoch_ms;
    rec.proc_ticks = ps->ticks;
  } else if (opt.pid) {
    return error(sys::errno_code(std::errc::no_such_process), "holder pid " + std::to_string(opt.pid));
  }
  const std::int64_t deadline =
      opt.wait == wait_forever ? -1 : sys::monotonic_ms() + std::max<std::int64_t>(0, opt.wait.count());

  auto gate = gate_for(*tr);
  std::unique_lock<std::mutex> g(gate->mu);
  // B10: a nested acquisition on the thread that holds the lock passes straight through.
  if (gate->owned && gate->owner == this_thread_serial()) {
    ++gate->depth;
    return lock(std::make_unique<handle>(handle{gate, false, false, gpu}));
  }
  // Otherwise queue behind the other threads of this process, in arrival order.
  const std::uint64_t ticket = gate->next_ticket++;
  gate->queue.push_back(ticket);
  auto my_turn = [&] { return !gate->owned && gate->queue.front() == ticket; };
  auto leave_queue = [&] {
    gate->queue.erase(std::find(gate->queue.begin(), gate->queue.end(), ticket));
    gate->cv.notify_all();
  };
  if (deadline < 0) {
    gate->cv.wait(g, my_turn);
  } else if (!gate->cv.wait_until(g, std::chrono::steady_clock::now() +
                                        milliseconds(std::max<std::int64_t>(0, deadline - sys::monotonic_ms())),
                                  my_turn)) {
    leave_queue();
    return error(opt.wait.count() <= 0 ? errc::busy : errc::timed_out, path);
  }
  leave_queue();
  gate->owned = true;
  gate->owner = this_thread_serial();
  gate->depth = 1;
  g.unlock();

  auto give_up = [&](error e) -> result<lock> {
    std::lock_guard<std::mutex> guard(gate->mu);
    gate->owned = false;
    gate->depth = 0;
    gate->cv.notify_all();
    return e;
  };
  // B11: a claim passed down by the process that started us passes straight through.
  if (opt.inherit) {
    if (auto token = inherited_token(*tr, opt.ttl.count(), opt.grace.count())) {
      std::lock_guard<std::mutex> guard(gate->mu);
      gate->inherited_token = *token;
      return lock(std::make_unique<handle>(handle{gate, true, false, gpu}));
    }
  }
  auto held = acquire_file(std::move(*tr), opt, std::move(rec), deadline, rep, seen);
  if (!held) return give_up(held.err());
  std::lock_guard<std::mutex> guard(gate->mu);
  gate->held = std::move(*held);
  return lock(std::make_unique<handle>(handle{gate, true, false, gpu}));
}

result<lock> lock::acquire(const lock_options& opt) {
  const std::string base = opt.path.empty() ? resolve_path().path : opt.path;
  if (opt.gpus < 1 || opt.gpus > max_gpus)
    return error(errc::bad_input, "GPU count " + std::to_string(opt.gpus) + " (1 to " + std::to_string(max_gpus) + ")");
  if (opt.gpu >= max_gpus || (opt.gpus > 1 && opt.gpu >= opt.gpus))
    return error(errc::bad_input, "GPU slot " + std::to_string(opt.gpu) + " of " + std::to_string(opt.gpus));
  if (opt.gpus == 1 || opt.gpu >= 0) {
    const int k = std::max(0, opt.gpu);
    wait_report rep(opt, base, opt.gpu, opt.gpus);
    return acquirer::acquire_slot(opt, gpu_slot_path(base, k), k, &rep);
  }
  return acquirer::acquire_any(opt, base);
}

// The first free of N slots: each round tries every slot once (wait 0),
// then waits for a change at any of them, on one poll over a watcher per slot.
result<lock> acquirer::acquire_any(const lock_options& opt, const std::string& base) {
  const int n = opt.gpus;
  const std::int64_t deadline =
      opt.wait == wait_forever ? -1 : sys::monotonic_ms() + std::max<std::int64_t>(0, opt.wait.count());
  // Started under one of these slots (B11): try that one first, so the
  // claim passes through rather than taking a second GPU.
  std::vector<int> order;
  if (auto env_path = sys::get_env("OFFLOAD_LOCK_PATH"); env_path && opt.inherit)
    for (int k = 0; k < n; ++k)
      if (clean_path(*env_path) == clean_path(gpu_slot_path(base, k))) order.push_back(k);
  for (int k = 0; k < n; ++k)
    if (order.empty() || order.front() != k) order.push_back(k);

  wait_report rep(opt, base, -1, n);
  std::vector<std::unique_ptr<sys::watcher>> ws(static_cast<std::size_t>(n));
  std::vector<std::set<std::int64_t>> dead_seen(static_cast<std::size_t>(n));
  // Each slot's watch clock lives across the rounds, so a clock that reads
  // a holder's mtime as in the future cannot stretch its TTL here either.
  std::vector<watch_clock> seen(static_cast<std::size_t>(n));
  const process_view pv = process_view::real();
  int rounds_without_wait = 0;
  for (;;) {
    lock_options once = opt;
    once.wait = milliseconds(0);
    for (int k : order) {
      auto l = acquire_slot(once, gpu_slot_path(base, k), k, nullptr, &seen[static_cast<std::size_t>(k)]);
      if (l) return l;
      if (l.err() != errc::busy) return l.err();
    }
    if (opt.wait.count() <= 0) return error(errc::busy, base);
    if (deadline >= 0 && sys::monotonic_ms() >= deadline) return error(errc::timed_out, base);

    // Judge every slot and arm its watcher; any slot that changed meanwhile
    // means another round at once.
    std::vector<info> holders;
    std::vector<std::int64_t> holder_pids(static_cast<std::size_t>(n), 0);
    std::int64_t timeout = -1;
    bool changed = false;
    for (int k = 0; k < n && !changed; ++k) {
      auto t = open_target(gpu_slot_path(base, k));
      if (!t) return t.err();
      auto d = inspect_target(*t, opt.ttl.count(), opt.grace.count(), pv, &seen[static_cast<std::size_t>(k)]);
      if (!d) return d.err();
      if (!d->o.snap.present) {
        changed = true;
        break;
      }
      auto& w = ws[static_cast<std::size_t>(k)];
      if (!w) w = std::make_unique<sys::watcher>();
      d->o.dir.reset();
      auto armed = arm(*w, *t, d->o.snap, d->v, dead_seen[static_cast<std::size_t>(k)], kFallbackPollMs);
      if (!armed) {
        changed = true;
        break;
      }
      holder_pids[static_cast<std::size_t>(k)] = d->v.holder_pid;
      timeout = timeout < 0 ? *armed : std::min(timeout, *armed);
      holders.push_back(d->i);
    }
    if (changed) {
      // As in acquire_file: rounds that keep being undone pause rather than spin.
      if (++rounds_without_wait >= kRoundsBeforePause) {
        std::this_thread::sleep_for(milliseconds(kChurnPauseMs));
        rounds_without_wait = 0;
      }
      continue;
    }
    rounds_without_wait = 0;
    rep.waiting(std::move(holders));
    if (deadline >= 0) timeout = std::min(timeout, std::max<std::int64_t>(0, deadline - sys::monotonic_ms()));
    std::vector<sys::watcher*> ptrs;
    ptrs.reserve(ws.size());
    for (auto& w : ws) ptrs.push_back(w.get());
    std::size_t which = 0;
    auto why = rep.wait_ticking(timeout, [&](std::int64_t ms) {
      return sys::watcher::wait_any(ptrs, ms, opt.cancel_fds, which);
    });
    if (why == sys::watcher::wake::extra_fd) return error(errc::cancelled, base);
    if (why == sys::watcher::wake::pid_exit) dead_seen[which].insert(holder_pids[which]);
  }
}

std::vector<waiter> waiters(const std::string& path) { return read_waiters(path, sys::now_ms()); }

std::string gpu_slot_path(const std::string& path, int gpu) {
  return gpu <= 0 ? path : path + ".gpu" + std::to_string(gpu);
}

info inspect(const std::string& path, milliseconds ttl, milliseconds grace) {
  info i;
  i.path = path;
  auto t = open_target(path);
  if (!t) {
    // A missing parent means no lock; anything else is reported, not thrown.
    if (t.err().code() != std::errc::no_such_file_or_directory) i.problem = t.err().message();
    return i;
  }
  auto d = inspect_target(*t, ttl.count(), grace.count(), process_view::real());
  if (!d) {
    i.problem = d.err().message();
    return i;
  }
  return d->i;
}

result<release_outcome> release_lock(const std::string& path, const release_request& req, milliseconds ttl) {
  auto t = open_target(path);
  if (!t) {
    if (t.err().code() == std::errc::no_such_file_or_directory) return release_outcome{};
    return t.err();
  }
  for (int attempt = 0;; ++attempt) {
    auto d = inspect_target(*t, ttl.count(), default_grace.count(), process_view::real());
    if (!d) return d.err();
    release_outcome out;
    out.before = d->i;
    const snapshot& s = d->o.snap;
    if (!s.present) return out;
    if (!s.is_dir) return not_a_lock_directory(path, s);
    bool matches = req.force || (!req.token.empty() && req.token == d->i.token) ||
                   (req.pid > 0 && d->i.pid && *d->i.pid == req.pid);
    if (!matches) {
      out.status = d->i.held ? release_status::not_owner : release_status::already_free;
      return out;
    }
    if (d->o.dir.valid())
      if (auto e = sys::check_lock_contents(d->o.dir.get(), path)) return e;
    d->o.dir.reset();
    auto r = remove_exact(*t, s.id, "cannot release lock " + path, "release");
    if (!r) return r.err();
    if (*r == reclaim_result::reclaimed) {
      out.status = release_status::released;
      return out;
    }
    // Replaced while we looked: judge the new one. Bounded, since each round
    // means another participant took or released the lock meanwhile.
    if (attempt >= 100) return error(errc::busy, path);
  }
}

info wait_free(const std::string& path, milliseconds wait, milliseconds poll, milliseconds ttl) {
  const std::int64_t deadline = wait == wait_forever ? -1 : sys::monotonic_ms() + std::max<std::int64_t>(0, wait.count());
  const std::int64_t poll_ms = std::max<std::int64_t>(1, poll.count());
  const process_view pv = process_view::real();
  std::unique_ptr<sys::watcher> w;
  std::set<std::int64_t> dead_seen;
  watch_clock seen;
  for (;;) {
    auto t = open_target(path);
    if (!t) return inspect(path, ttl);
    auto d = inspect_target(*t, ttl.count(), default_grace.count(), pv, &seen);
    if (!d || !d->i.held) return d ? d->i : inspect(path, ttl);
    if (deadline >= 0 && sys::monotonic_ms() >= deadline) return d->i;
    if (!w) w = std::make_unique<sys::watcher>();
    d->o.dir.reset();
    wait_for_change(*w, *t, d->o.snap, d->v, dead_seen, deadline, poll_ms);
  }
}

}  // namespace offload_lock
