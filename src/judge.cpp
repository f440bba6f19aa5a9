// The staleness judgment. See judge.hpp; every branch here has a row in
// tests/unit/judge_test.cpp.
#include "judge.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "offload_lock/inspect.hpp"

namespace offload_lock::detail {


namespace {

// A JavaScript number that Node's process.kill() takes as a pid: an integer
// in the int32 range (anything else makes it throw).
bool js_int32(double p) { return std::isfinite(p) && std::floor(p) == p && p <= INT_MAX && p >= INT_MIN; }

std::string dur(std::int64_t ms) { return describe_duration(milliseconds(ms)); }

// Node's process.kill(pid, 0) inside isAlive(): a non-integer or a number
// outside int32 makes Node throw (counted dead); 0 and negative numbers
// address process groups and count as alive; EPERM is alive. A zombie still
// answers kill(), so it is alive here.
bool node_alive(double pid, const process_view& pv) {
  if (!js_int32(pid)) return false;
  if (pid <= 0) return true;
  return pv.probe(static_cast<std::int64_t>(pid)) != sys::liveness::dead;
}

}  // namespace

bool node_is_stale(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv) {
  if (!s.meta_exists || s.meta.node_null) return true;
  if (s.meta.js_pid && !node_alive(*s.meta.js_pid, pv)) return true;
  return now_ms - s.meta_mtime_ms > ttl_ms;
}

bool recorded_process_alive(const recorded_process& r, const process_view& pv) {
  if (!sys::valid_pid(r.pid)) return false;
  if (!r.host.empty() && r.host != pv.host) return true;
  if (!r.boot_id.empty() && !pv.boot_id.empty() && r.boot_id != pv.boot_id) return false;
  if (pv.probe(r.pid) != sys::liveness::alive) return false;
  if (r.start_ticks) {
    auto st = pv.start_of(r.pid);
    if (st && st->ticks != r.start_ticks) return false;  // the pid was reused
  }
  return true;
}

go_view go_inspect(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv) {
  go_view g;
  if (!s.present || !s.is_dir || !s.meta_exists || !s.meta.go_ok) return g;
  std::int64_t pid = s.meta.go_pid;
  if (pid > 0) {
    // syscall.Kill truncates to the kernel's pid_t; a pid that does not fit
    // names no process.
    if (pid > sys::max_pid || pv.probe(pid) == sys::liveness::dead) return g;
  }
  std::int64_t age = now_ms - s.meta_mtime_ms;
  if (age > ttl_ms) return g;
  g.held = true;
  g.pid = pid;
  g.age_ms = age;
  return g;
}

verdict judge(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, std::int64_t grace_ms,
              const process_view& pv) {
  verdict v;
  if (!s.present) {
    v.stale = true;
    v.reason = "absent";
    return v;
  }
  const parsed_meta& m = s.meta;
  std::int64_t pid = 0;
  if (s.meta_exists && !m.node_null && m.js_pid) {
    double p = *m.js_pid;
    if (js_int32(p)) pid = static_cast<std::int64_t>(p);
  }

  // A live offload-lock process keeps an OFD read lock on its lock directory:
  // proof of life that no clock or pid rule can contradict. Its recorded pid
  // is still watched, so a crash of that process is noticed at once.
  if (s.process_locked) {
    v.reason = "held by a live offload-lock process";
    v.holder_pid = pid;
    return v;
  }

  // B3: a missing, unreadable or unparseable meta.json may be a Node runner
  // between its mkdir and its write. Leave it alone for the grace period.
  if (!s.meta_exists || m.node_null) {
    std::int64_t newest = std::max(s.dir_mtime_ms, s.meta_exists ? s.meta_mtime_ms : 0);
    std::string what = !s.meta_exists ? "meta.json is missing"
                       : !m.parsed    ? "meta.json is not valid JSON"
                                      : "meta.json holds a falsy JSON value";
    v.incomplete = true;
    std::int64_t quiet = std::max(now_ms - newest, s.unchanged_for_ms);
    if (quiet < grace_ms) {
      v.reason = what + " (within the " + dur(grace_ms) + " grace)";
      v.changes_at_ms = now_ms + (grace_ms - quiet);
      return v;
    }
    v.stale = true;
    v.reason = what;
    return v;
  }

  if (m.js_pid) {
    double p = *m.js_pid;
    if (!js_int32(p)) {
      v.stale = true;
      v.reason = "pid is not a valid process id";
      return v;
    }
  }

  // B6: pid <= 0 is never signalled (it would address a process group), and
  // a pid recorded on another host cannot be checked from here.
  bool other_host = !m.host.empty() && !pv.host.empty() && m.host != pv.host;
  if (pid > 0 && !other_host) {
    std::string p = "holder pid " + std::to_string(pid);
    switch (pv.probe(pid)) {
      case sys::liveness::dead:
      case sys::liveness::invalid:
        v.stale = true;
        v.reason = p + " is dead";
        return v;
      case sys::liveness::zombie:
        v.stale = true;
        v.reason = p + " has exited (zombie)";
        return v;
      case sys::liveness::alive:
        break;
    }
    bool same_boot = !m.boot_id.empty() && m.boot_id == pv.boot_id;
    if (!m.boot_id.empty() && !pv.boot_id.empty() && !same_boot) {
      v.stale = true;
      v.reason = "recorded under another boot";
      return v;
    }
    if (auto st = pv.start_of(pid)) {
      bool recycled = false;
      if (m.proc_ticks && same_boot) recycled = st->ticks != *m.proc_ticks;
      else if (m.proc_start) recycled = st->epoch_ms > *m.proc_start + recycle_slack_ms;
      else if (m.started_at) recycled = st->epoch_ms > *m.started_at + recycle_slack_ms;
      if (recycled) {
        v.stale = true;
        v.reason = p + " now belongs to a process started after the lock was taken (pid reused)";
        return v;
      }
    }
    v.holder_pid = pid;
  }

  // Node's rule (A3), on the wall clock; but never younger than the time
  // this observer has itself watched the meta unchanged (see snapshot).
  std::int64_t age = std::max(now_ms - s.meta_mtime_ms, s.unchanged_for_ms);
  if (age > ttl_ms) {
    v.stale = true;
    v.reason = "meta.json not refreshed for " + dur(age) + " (TTL " + dur(ttl_ms) + ")";
    return v;
  }
  v.reason = "held";
  v.changes_at_ms = now_ms + (ttl_ms - age) + 1;
  return v;
}

}  // namespace offload_lock::detail
