// A holder on the same machine (same_machine.hpp).
#include "etcd/same_machine.hpp"

#include "os/process.hpp"

namespace offload_lock::detail::etcd {

namespace {

// This process's own boot and namespaces, all or nothing.
struct here {
  // cppcheck-suppress unusedStructMember ; read through the optional below
  std::string boot;
  std::int64_t pid_ns = 0, time_ns = 0;
};

std::optional<here> this_machine() {
  const auto pns = sys::pid_namespace();
  const auto tns = sys::time_namespace();
  if (sys::boot_id().empty() || !pns || !tns || !sys::proc_is_own()) return std::nullopt;
  return here{sys::boot_id(), static_cast<std::int64_t>(*pns), static_cast<std::int64_t>(*tns)};
}

// What is known of one process of this machine, by its pid and start.
enum class state {
  alive,
  working_zombie,  // exited main thread, other threads at work (or not known)
  ended,           // exited, nothing left running, not yet reaped
  gone,            // dead and reaped, or the pid reused
  unknown,
};

state judge_pid(std::int64_t pid, std::int64_t ticks) {
  switch (sys::probe(pid)) {
    case sys::liveness::dead: return state::gone;
    case sys::liveness::alive:
    case sys::liveness::zombie: break;
    case sys::liveness::invalid:
    case sys::liveness::unknown: return state::unknown;
  }
  const auto s = sys::start_of(pid);
  if (!s) return sys::probe(pid) == sys::liveness::dead ? state::gone : state::unknown;
  if (static_cast<std::int64_t>(s->ticks) != ticks) return state::gone;  // the pid reused
  // Asked again after the start matched: the state of that very process
  // (one started since under the pid answers alive: never taken for gone).
  switch (sys::probe(pid)) {
    case sys::liveness::dead: return state::gone;
    case sys::liveness::zombie: {
      // A zombie's main thread has ended; others may still work. Its start
      // is read once more after the count: the count is of that process.
      const auto threads = sys::thread_count(pid);
      const auto again = sys::start_of(pid);
      if (!again || static_cast<std::int64_t>(again->ticks) != ticks)
        return sys::probe(pid) == sys::liveness::dead || again ? state::gone : state::unknown;
      return threads == 1 ? state::ended : state::working_zombie;
    }
    case sys::liveness::alive: return state::alive;
    case sys::liveness::invalid:
    case sys::liveness::unknown: break;
  }
  return state::unknown;
}

}  // namespace

void stamp_here(record& r) {
  const auto h = this_machine();
  if (!h) return;
  const auto s = sys::start_of(r.pid);
  if (!s || s->ticks == 0) return;
  r.boot_id = h->boot;
  r.pid_ns = h->pid_ns;
  r.time_ns = h->time_ns;
  r.proc_ticks = static_cast<std::int64_t>(s->ticks);
  const std::int64_t me = sys::self_pid();
  if (const auto k = sys::start_of(me); k && k->ticks > 0) {
    r.keeper_pid = me;
    r.keeper_ticks = static_cast<std::int64_t>(k->ticks);
  }
}

// A holder that has exited but is not yet reaped (a zombie) is not taken
// while its keeper lives: `run` releases while its CMD is a zombie, and
// the keeper's release is what ends the hold. A zombie whose main thread
// ended while other threads still work holds on for as long as they do
// (only the lease frees it then, or its keeper's death: a lease no one
// keeps lapses anyway). A keeper that is dead, reused or ended keeps the
// lease no longer: the one ahead is gone now rather than when it lapses.
judgment judge_here(const record& r) {
  if (!r.problem.empty() || r.proc_ticks <= 0 || !sys::valid_pid(r.pid)) return {};
  const auto h = this_machine();
  if (!h || r.host != sys::host_name() || r.boot_id != h->boot || r.pid_ns != h->pid_ns || r.time_ns != h->time_ns)
    return {};
  const state p = judge_pid(r.pid, r.proc_ticks);
  switch (p) {
    case state::alive: return {fate::alive, r.pid};
    case state::gone: return {fate::gone, 0};
    case state::unknown: return {fate::unknown, 0};
    case state::working_zombie:
    case state::ended: break;
  }
  // A pidfd is readable once the whole process has ended, the threads of
  // a zombie too: what is watched for.
  const bool keeper_known = r.keeper_ticks > 0 && sys::valid_pid(r.keeper_pid);
  if (keeper_known && r.keeper_pid == r.pid) return p == state::ended ? judgment{fate::gone, 0} : judgment{fate::exited, r.pid};
  if (!keeper_known) return {fate::exited, 0};
  switch (judge_pid(r.keeper_pid, r.keeper_ticks)) {
    case state::alive:
    case state::working_zombie: return {fate::exited, r.keeper_pid};
    case state::gone:
    case state::ended: return {fate::gone, 0};
    case state::unknown: break;
  }
  return {fate::exited, 0};
}

}  // namespace offload_lock::detail::etcd
