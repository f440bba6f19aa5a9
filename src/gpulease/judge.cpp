// The gpulease judgment. See judge.hpp.
#include "gpulease/judge.hpp"

#include <algorithm>

#include "os/process.hpp"

namespace offload_lock::detail::gpulease {

lease_process_view lease_process_view::real() {
  lease_process_view pv;
  pv.probe = [](std::int64_t pid) { return sys::probe(pid); };
  pv.start_ticks = [](std::int64_t pid) -> std::optional<std::uint64_t> {
    auto s = sys::start_of(pid);
    if (!s) return std::nullopt;
    return s->ticks;
  };
  return pv;
}

const char* to_string(lease_state s) noexcept {
  switch (s) {
    case lease_state::free: return "free";
    case lease_state::alive: return "held";
    case lease_state::dead: return "stale";
    case lease_state::unknown: return "unknown";
  }
  return "?";
}

std::string describe_holder(const record& r) {
  std::string s = (r.lease_class.empty() ? std::string("unclassed") : r.lease_class) + " lease (pid " +
                  std::to_string(r.pid) + ", epoch " + std::to_string(r.epoch);
  if (!r.reason.empty()) s += ", reason \"" + r.reason + "\"";
  if (!r.origin.empty()) s += ", origin \"" + r.origin + "\"";
  return s + ")";
}

namespace {

std::string seconds(std::int64_t ms) { return std::to_string(ms / 1000) + " s"; }

// The heartbeat that counts (gpulease's lastHeartbeat): the per-epoch file
// when it parses and is not older than the claim's stamp.
std::int64_t effective_heartbeat(const record& r, const file_read& hb) {
  if (hb.st != file_read::state::present) return r.renewed_at_ms;
  auto v = parse_go_int(hb.bytes);
  if (!v || *v < r.renewed_at_ms) return r.renewed_at_ms;
  return *v;
}

void judge_parsed(lease_verdict& v, const lease_snapshot& s, std::int64_t now, const lease_process_view& pv) {
  const record& r = *v.rec;
  v.renewed_at_ms = effective_heartbeat(r, s.heartbeat);
  const bool window_over = now > r.expires_at_ms;
  const std::string who = describe_holder(r);
  auto dead = [&](const std::string& why, bool gpulease_too) {
    v.state = lease_state::dead;
    v.why = why;
    v.gpulease_reclaims = gpulease_too;
  };
  // Rule 4: nobody to ask about; the declared window alone decides.
  if (r.pid <= 0) {
    if (window_over) return dead(who + ": no holder pid, and its window ended", true);
    v.state = lease_state::alive;
    v.why = who + ": no holder pid; held until its window ends";
    v.changes_at_ms = r.expires_at_ms + 1;
    return;
  }
  bool check_start = true;
  if (sys::valid_pid(r.pid)) {
    const sys::liveness l = pv.probe(r.pid);
    // Rule 5.
    if (l == sys::liveness::dead || l == sys::liveness::invalid)
      return dead(who + ": holder pid " + std::to_string(r.pid) + " is gone", true);
    if (l == sys::liveness::zombie) {
      // kill(pid, 0) succeeds on a zombie, so gpulease waits for its
      // heartbeat and window; the process has exited and holds nothing.
      dead(who + ": holder pid " + std::to_string(r.pid) + " has exited (a zombie)", false);
    } else {
      v.holder_pid = r.pid;
    }
  } else {
    check_start = false;  // rule 5 note: not a pid of this kernel; rule 7 decides
  }
  // Rule 6.
  if (check_start && r.start_ticks != 0) {
    auto now_start = pv.start_ticks(r.pid);
    if (now_start && static_cast<std::int64_t>(*now_start) != r.start_ticks) {
      v.holder_pid = 0;
      return dead(who + ": pid " + std::to_string(r.pid) + " now names another process (started at tick " +
                      std::to_string(*now_start) + ", not " + std::to_string(r.start_ticks) + ")",
                  true);
    }
  }
  // Rule 7.
  const bool stale_heartbeat = v.renewed_at_ms > 0 && now - v.renewed_at_ms > heartbeat_ttl_ms;
  const bool gpulease_reclaims = stale_heartbeat && window_over;
  if (v.state == lease_state::dead) {  // the zombie
    v.gpulease_reclaims = gpulease_reclaims;
    return;
  }
  if (gpulease_reclaims) {
    if (s.heartbeat.st == file_read::state::unreadable) {
      v.state = lease_state::unknown;
      v.why = who + ": its heartbeat file cannot be read (" + s.heartbeat.error +
              "), and without it the lease would be stale: left alone";
      v.gpulease_reclaims = true;
      return;
    }
    return dead(who + ": heartbeat " + seconds(now - v.renewed_at_ms) + " old and its window ended", true);
  }
  v.state = lease_state::alive;
  v.why = who;
  if (v.renewed_at_ms > 0) v.changes_at_ms = std::max(v.renewed_at_ms + heartbeat_ttl_ms, r.expires_at_ms) + 1;
}

}  // namespace

lease_verdict judge_lease(const lease_snapshot& s, std::int64_t now_ms, const lease_process_view& pv) {
  lease_verdict v;
  if (!s.dir_present || s.claim.st == file_read::state::absent) {
    v.why = "no claim";
    return v;
  }
  // Rule 2.
  if (s.claim.st == file_read::state::unreadable) {
    v.state = lease_state::unknown;
    v.why = "its claim cannot be read (" + s.claim.error + "): left alone";
    return v;
  }
  v.rec = parse_record(s.claim.bytes);
  if (!v.rec) {
    // Rule 3. gpulease's readers call such a claim free; its acquirers
    // leave it for the grace.
    const std::int64_t age = now_ms - s.claim.mtime_ms;
    if (age < claim_grace_ms) {
      v.state = lease_state::alive;
      v.in_progress = true;
      v.why = "a claim being written (unparseable, " + std::to_string(age) + " ms old)";
      v.changes_at_ms = s.claim.mtime_ms + claim_grace_ms;
    } else {
      v.state = lease_state::dead;
      v.why = "an unparseable claim, " + seconds(age) + " old";
      v.gpulease_reclaims = true;
    }
    return v;
  }
  judge_parsed(v, s, now_ms, pv);
  v.gpulease_readers_held = !v.gpulease_reclaims;
  return v;
}

}  // namespace offload_lock::detail::gpulease
