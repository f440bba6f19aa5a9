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

// One process of this machine, by its pid and start.
fate judge_pid(std::int64_t pid, std::int64_t ticks) {
  switch (sys::probe(pid)) {
    case sys::liveness::dead: return fate::gone;
    case sys::liveness::alive:
    case sys::liveness::zombie: break;
    case sys::liveness::invalid:
    case sys::liveness::unknown: return fate::unknown;
  }
  const auto s = sys::start_of(pid);
  if (!s) return sys::probe(pid) == sys::liveness::dead ? fate::gone : fate::unknown;
  if (static_cast<std::int64_t>(s->ticks) != ticks) return fate::gone;  // the pid reused
  // Asked again after the start matched: the state of that very process
  // (one started since under the pid answers alive: never taken for gone).
  switch (sys::probe(pid)) {
    case sys::liveness::dead: return fate::gone;
    case sys::liveness::zombie: return fate::exited;
    case sys::liveness::alive: return fate::alive;
    case sys::liveness::invalid:
    case sys::liveness::unknown: break;
  }
  return fate::unknown;
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

fate judge_here(const record& r) {
  if (!r.problem.empty() || r.proc_ticks <= 0 || !sys::valid_pid(r.pid)) return fate::elsewhere;
  const auto h = this_machine();
  if (!h || r.host != sys::host_name() || r.boot_id != h->boot || r.pid_ns != h->pid_ns || r.time_ns != h->time_ns)
    return fate::elsewhere;
  const fate f = judge_pid(r.pid, r.proc_ticks);
  if (f != fate::exited) return f;
  // Exited: its keeper may be releasing the lock. A keeper that is gone
  // (or exited too) never will: nothing to wait for.
  if (r.keeper_ticks > 0 && sys::valid_pid(r.keeper_pid)) {
    const fate k = r.keeper_pid == r.pid ? f : judge_pid(r.keeper_pid, r.keeper_ticks);
    if (k == fate::gone || k == fate::exited) return fate::gone;
  }
  return fate::exited;
}

}  // namespace offload_lock::detail::etcd
