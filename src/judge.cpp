// The staleness judgment. See judge.hpp; every branch here has a row in
// tests/unit/judge_test.cpp.
#include "judge.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "offload_lock/inspect.hpp"

namespace offload_lock::detail {


namespace {

// A JavaScript number that Node's process.kill() takes as a pid: an integer
// in the int32 range (anything else makes it throw).
bool js_int32(double p) { return std::isfinite(p) && std::floor(p) == p && p <= INT_MAX && p >= INT_MIN; }

// A JSON number as JavaScript prints it, near enough for a message.
std::string describe_number(double v) {
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

std::string dur(std::int64_t ms) { return describe_duration(milliseconds(ms)); }

// Node's process.kill(pid, 0) inside isAlive(): a non-integer or a number
// outside int32 makes Node throw (counted dead); 0 and negative numbers
// address process groups and count as alive; EPERM is alive. A zombie still
// answers kill(), so it is alive here.
bool node_alive(double pid, const process_view& pv) {
  if (!js_int32(pid)) return false;
  if (pid <= 0) return true;
  return pv.signal0(static_cast<std::int64_t>(pid)) != sys::liveness::dead;
}

// Why the recorded pid no longer names the holder of a lock without a proof
// of life (B6): dead, a zombie, under another boot, or reused by a process
// started after the lock was taken. `seen`: what pv.probe(pid) answered.
std::optional<std::string> pid_gone(const parsed_meta& m, std::int64_t pid, sys::liveness seen,
                                    const process_view& pv) {
  const std::string p = "holder pid " + std::to_string(pid);
  switch (seen) {
    case sys::liveness::dead:
    case sys::liveness::invalid: return p + " is dead";
    case sys::liveness::zombie: return p + " has exited (zombie)";
    case sys::liveness::alive:
    case sys::liveness::unknown: break;
  }
  const bool same_boot = !m.boot_id.empty() && m.boot_id == pv.boot_id;
  if (!m.boot_id.empty() && !pv.boot_id.empty() && !same_boot) return std::string("recorded under another boot");
  if (auto st = pv.start_of(pid)) {
    bool recycled = false;
    if (m.proc_ticks && same_boot) recycled = st->ticks != *m.proc_ticks;
    else if (m.proc_start) recycled = st->epoch_ms > sat_add(*m.proc_start, recycle_slack_ms);
    else if (m.started_at) recycled = st->epoch_ms > sat_add(*m.started_at, recycle_slack_ms);
    if (recycled) return p + " now belongs to a process started after the lock was taken (pid reused)";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> node_stale_reason(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms,
                                             const process_view& pv) {
  if (!s.meta_exists) return std::string("meta.json is missing");
  if (s.meta.node_null) return std::string("meta.json does not parse as a JSON object");
  if (s.meta.js_pid && !node_alive(*s.meta.js_pid, pv))
    return "kill(" + describe_number(*s.meta.js_pid) + ", 0) fails for them";
  const std::int64_t age = sat_sub(now_ms, s.meta_mtime_ms);
  if (age > ttl_ms) return "meta.json not refreshed for " + dur(age) + " (their TTL " + dur(ttl_ms) + ")";
  return std::nullopt;
}

bool node_is_stale(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv) {
  return node_stale_reason(s, now_ms, ttl_ms, pv).has_value();
}

std::optional<std::string> not_made_by_mkdir(const snapshot& s) {
  char mode[8];
  (void)std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(s.dir_mode & 07777));
  const std::string shown = std::string("mode ") + mode;
  if (s.dir_mode & 01000) return "a directory with the sticky bit (" + shown + "), which no lock has";
  if (s.dir_mode & 04000) return "a directory with the setuid bit (" + shown + "), which no lock has";
  if ((s.dir_mode & 02000) && !(s.parent_mode & 02000))
    return "a setgid directory (" + shown + ") in a parent that is not setgid, which no lock is";
  return std::nullopt;
}

go_view go_inspect(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv) {
  go_view g;
  if (!s.present || !s.is_dir || !s.meta_exists || !s.meta.go_ok) return g;
  std::int64_t pid = s.meta.go_pid;
  if (pid > 0) {
    // syscall.Kill truncates to the kernel's pid_t; a pid that does not fit
    // names no process.
    if (pid > sys::max_pid || pv.signal0(pid) == sys::liveness::dead) return g;
  }
  std::int64_t age = sat_sub(now_ms, s.meta_mtime_ms);
  if (age > ttl_ms) return g;
  g.held = true;
  g.pid = pid;
  g.age_ms = age;
  return g;
}

std::int64_t sat_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? INT64_MAX : INT64_MIN;
  return r;
}

std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

namespace {

verdict with(judgment state, std::string reason) {
  verdict v;
  v.state = state;
  v.reason = std::move(reason);
  return v;
}

}  // namespace

verdict judge(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, std::int64_t grace_ms,
              const process_view& pv) {
  if (!s.present) return with(judgment::absent, "absent");
  const parsed_meta& m = s.meta;

  // A look that failed (meta.json unreadable for EACCES, out of descriptors,
  // an I/O error) says nothing about the holder: unknown, never stale.
  if (s.look_errno) {
    verdict v = with(judgment::unknown, "cannot tell whether it is held: " + s.look_failed + " failed (" +
                                            std::error_code(s.look_errno, std::generic_category()).message() + ")");
    v.error = s.look_errno;
    v.watch_contents = true;
    return v;
  }

  std::int64_t pid = 0;
  if (s.meta_exists && !m.node_null && m.js_pid) {
    double p = *m.js_pid;
    if (js_int32(p)) pid = static_cast<std::int64_t>(p);
  }
  // B6 judges a recorded pid only where the number means the same process
  // to this reader: recorded on this host, in this pid namespace (or with no
  // namespace recorded: v1 runners, offload-lock before 0.2).
  const bool other_host = !m.host.empty() && !pv.host.empty() && m.host != pv.host;
  const bool other_ns = m.pid_ns && pv.pid_ns && *m.pid_ns != *pv.pid_ns;
  const bool judge_pid = pid > 0 && !other_host && !other_ns;

  // The proof of life first (doc/protocol.md B6). A live offload-lock holder
  // keeps an OFD write lock on its meta.json, which only a process that can
  // open that file for writing can take, and which no forked child keeps: a
  // proof no other user can forge and no stray child can prolong. It
  // outranks every other sign: the recorded pid (a zombie CMD of `run`, a
  // pid in another namespace), its start time (shifted in a time
  // namespace), the boot id (another in a sandbox), /proc (hidepid) and
  // the TTL. (tests/multiprocess/trust_test.cpp)
  if (s.proof_of_life) {
    verdict v = with(judgment::held, other_ns ? "held by a live offload-lock process in another pid namespace"
                                              : "held by a live offload-lock process");
    v.holder_pid = judge_pid ? pid : 0;
    v.watch_contents = true;  // its death closes meta.json: IN_CLOSE_WRITE, in any namespace
    return v;
  }
  if (s.proof_unknown) {
    verdict v = with(judgment::unknown, "cannot tell whether its holder lives: the probe of its meta.json's lock failed");
    v.holder_pid = judge_pid ? pid : 0;
    v.watch_contents = true;
    return v;
  }

  // B3: a missing or unparseable meta.json may be a Node runner between its
  // mkdir and its write. Leave it alone for the grace period; unless no
  // runner's mkdir could have made the directory, or it holds what no lock
  // holds, or it was an empty directory already older than the grace when
  // this observer first saw it: a directory a person made, not a claim in
  // progress (a claim interrupted between mkdir and write is seen young by
  // whoever waits for it; doc/protocol.md B3).
  if (!s.meta_exists || m.node_null) {
    if (s.is_dir) {
      if (auto why = not_made_by_mkdir(s)) return with(judgment::not_a_lock, *why);
      if (!s.foreign_entry.empty()) {
        verdict v = with(judgment::not_a_lock, "a directory holding '" + s.foreign_entry + "', which is not part of a lock");
        v.error = static_cast<int>(std::errc::directory_not_empty);  // as removing it would say
        return v;
      }
      if (!s.meta_exists && s.listed_empty && s.first_seen_age_ms > grace_ms)
        return with(judgment::not_a_lock, "an empty directory that was already " + dur(s.first_seen_age_ms) +
                                              " old, longer than the " + dur(grace_ms) +
                                              " grace, when first looked at: made by hand, not by a claim");
    }
    const std::int64_t newest = std::max(s.dir_mtime_ms, s.meta_exists ? s.meta_mtime_ms : 0);
    const std::string what = !s.meta_exists ? "meta.json is missing"
                             : !m.parsed    ? "meta.json is not valid JSON"
                                            : "meta.json holds a falsy JSON value";
    const std::int64_t quiet = std::max(sat_sub(now_ms, newest), s.unchanged_for_ms);
    verdict v;
    v.incomplete = true;
    v.watch_contents = true;
    if (quiet < grace_ms) {
      v.state = judgment::held;
      v.reason = what + " (within the " + dur(grace_ms) + " grace)";
      v.changes_at_ms = sat_add(now_ms, grace_ms - quiet);
      return v;
    }
    v.state = judgment::stale;
    v.reason = what;
    return v;
  }

  if (m.js_pid && !js_int32(*m.js_pid)) return with(judgment::stale, "pid is not a valid process id");

  verdict v;
  // pid <= 0 is never signalled (it would address a process group).
  if (judge_pid) {
    const sys::liveness seen = pv.probe(pid);
    if (seen == sys::liveness::unknown) {
      v = with(judgment::unknown, "cannot tell whether holder pid " + std::to_string(pid) + " lives (kill failed)");
      v.holder_pid = pid;
      return v;
    }
    if (auto gone = pid_gone(m, pid, seen, pv)) return with(judgment::stale, *gone);
    v.holder_pid = pid;
  } else if (other_ns && !other_host) {
    // An offload-lock holder of another pid namespace lives exactly as long
    // as its proof of life: without it, it has gone.
    return with(judgment::stale, "holder of another pid namespace no longer holds its meta.json (it has exited)");
  }

  // Node's rule (A3), on the wall clock; but never younger than the time
  // this observer has itself watched the meta unchanged (see snapshot).
  const std::int64_t age = std::max(sat_sub(now_ms, s.meta_mtime_ms), s.unchanged_for_ms);
  if (age > ttl_ms) {
    verdict t = with(judgment::stale, "meta.json not refreshed for " + dur(age) + " (TTL " + dur(ttl_ms) + ")");
    return t;
  }
  v.state = judgment::held;
  v.reason = "held";
  v.changes_at_ms = sat_add(sat_add(now_ms, ttl_ms - age), 1);
  return v;
}

}  // namespace offload_lock::detail
