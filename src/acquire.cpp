// lock::acquire() (acquire.hpp): the plan, the gate, inheritance, then the
// one acquisition (acquisition.hpp).
#include "acquire.hpp"

#include "acquisition.hpp"
#include "heartbeat.hpp"
#include "history.hpp"
#include "inherit.hpp"
#include "lease_join.hpp"
#include "offload_lock/lease.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "plan.hpp"

namespace offload_lock::detail {

namespace {

error gate_outcome(local_gate::entered e, const std::string& path) {
  switch (e) {
    case local_gate::entered::busy: return error(errc::busy, path);
    case local_gate::entered::timed_out: return error(errc::timed_out, path);
    case local_gate::entered::cancelled: return error(errc::cancelled, path);
    case local_gate::entered::owner:
    case local_gate::entered::nested: break;
  }
  return {};
}

// A claim passed down by the process that started this one (B11), taken
// over by the gate the caller owns.
bool passed_down(const plan& p, local_gate& gate, const target& t) {
  if (!p.inherit) return false;
  auto token = inherited_token(t, p.judge.ttl_ms, p.judge.grace_ms);
  if (!token) return false;
  std::lock_guard<std::mutex> g(gate.mu);
  gate.inherited_token = *token;
  return true;
}

// take_lease(), reporting the wait as the lock's wait is reported: the
// lock is held, and a waiting line that stopped while the lease is waited
// for would look like a hang. The lease is tried at once; while it is busy
// it is waited for in slices of the progress period, a report after each
// (the lease looked at again: `changed` when its holder changed). Nothing
// is held between two slices but the lock, so the slices wait exactly as
// one wait would, and the last ends when the plan's deadline does.
error take_lease_reporting(const plan& p, const gpulease::lease_location& loc, held_state& s, std::int64_t began_ms) {
  if (!p.report.on_progress || p.until.trying()) return take_lease(p, loc, s);
  const std::int64_t every = p.report.progress_every_ms > 0 ? p.report.progress_every_ms : fallback_poll_ms;
  plan slice = p;
  slice.until = deadline::in_ms(0);
  std::optional<lease_info> last;
  for (;;) {
    error e = take_lease(slice, loc, s);
    if (e != errc::busy && e != errc::timed_out) return e;
    // The plan's own deadline passed: its outcome, as one wait would end.
    if (p.until.expired()) return error(errc::timed_out, e.context());
    wait_progress w;
    w.lease = inspect_lease(loc.dir);
    w.waited = milliseconds(sys::monotonic_ms() - began_ms);
    w.changed = !last || last->pid != w.lease->pid || last->epoch != w.lease->epoch || last->state != w.lease->state;
    last = w.lease;
    if (lease_busy(*w.lease)) p.report.on_progress(w);
    slice.until = deadline::in_ms(p.until.is_forever() ? every : std::min(every, std::max<std::int64_t>(1, p.until.left())));
  }
}

result<lock> acquire_one(const plan& p) {
  const std::int64_t began_ms = sys::monotonic_ms();
  const int k = p.slots.front();
  auto t = open_target(gpu_slot_path(p.base, k));
  if (!t) return t.error();
  auto gate = gate_for(*t);
  bool waited = false;
  const auto e = gate->enter(p.entry.priority, p.until, p.cancel_fds, &waited);
  if (e == local_gate::entered::nested) return acquirer::make(gate, false, k);
  if (e != local_gate::entered::owner) return gate_outcome(e, t->path);
  if (passed_down(p, *gate, *t)) return acquirer::make(gate, true, k);
  const auto lease = lease_to_take(p);
  if (lease && p.inherit) {
    // Started under a gpulease holder's lease: held through it. Waiting for
    // the lock here could wait for an offload-lock holder that waits for
    // that very lease (lease_join.hpp).
    auto in = lease_passed_down(lease->loc);
    if (in.k == gpulease::inheritance::kind::refused) {
      gate->leave();
      return error(errc::lost, std::string(lease_wait_context) + "lease passed down cannot be held through: " + in.why);
    }
    if (in.k == gpulease::inheritance::kind::current) {
      std::lock_guard<std::mutex> g(gate->mu);
      gate->inherited_lease_epoch = in.lease->epoch;
      gate->inherited_lease_env = in.lease->child_environment();
      return acquirer::make(gate, true, k);
    }
  }
  auto a = std::make_shared<acquisition>(p);
  // The parent as opened for the gate, unless this thread waited there
  // behind another (for hours, perhaps: the acquisition then opens the
  // path afresh, as it stands now).
  if (!waited) {
    std::vector<target> opened;
    opened.push_back(std::move(*t));
    a->use_targets(std::move(opened));
  }
  if (lease && lease->shared) a->share_with(shared_lease{lease->loc, lease_options(p)});
  else if (lease) a->lease_follows();
  auto held = a->run();
  if (!held) {
    gate->leave();
    return held.error();
  }
  // Its watches and the registry's directories it held open are let go
  // after the caller holds (removing a watch is one of the slower calls, and
  // a waiter had several): by the heartbeat thread, or at the release. Held
  // without a heartbeat, nothing would let them go before the release.
  // (Only the plan is borrowed, and the acquisition's teardown reads none
  // of it.)
  if (p.hold.heartbeat) drop_later(**held, std::move(a));
  if (lease && !lease->shared)
    if (error lease_failed = take_lease_reporting(p, lease->loc, **held, began_ms)) {
      (void)(*held)->release();
      gate->leave();
      return lease_failed;
    }
  std::lock_guard<std::mutex> g(gate->mu);
  gate->held = std::move(*held);
  return acquirer::make(gate, true, k);
}

// The first free of several slots. Threads of this process holding some of
// them hold them through their gates; this thread holding one already
// passes straight through (B10).
result<lock> acquire_among(const plan& p) {
  std::vector<std::shared_ptr<local_gate>> gates;
  std::vector<target> opened;
  for (int k : p.slots) {
    auto t = open_target(gpu_slot_path(p.base, k));
    if (!t) return t.error();
    auto gate = gate_for(*t);
    const auto e = gate->enter(p.entry.priority, deadline::in_ms(0), {});
    if (e == local_gate::entered::nested) return acquirer::make(gate, false, k);
    if (e == local_gate::entered::owner) {
      // Started under this slot (B11): the claim passes straight through.
      if (gates.empty() && passed_down(p, *gate, *t)) return acquirer::make(gate, true, k);
      gate->leave();
    }
    gates.push_back(std::move(gate));
    opened.push_back(std::move(*t));
  }
  acquisition a(p);
  a.use_gates(gates);
  a.use_targets(std::move(opened));
  auto held = a.run();
  if (!held) return held.error();
  for (std::size_t i = 0; i < p.slots.size(); ++i)
    if (p.slots[i] == (*held)->slot) {
      std::lock_guard<std::mutex> g(gates[i]->mu);
      gates[i]->held = std::move(*held);
      gates[i]->depth = 1;
      return acquirer::make(gates[i], true, p.slots[i]);
    }
  return error(errc::lost, p.base);
}

}  // namespace

lock acquirer::make(const std::shared_ptr<local_gate>& gate, bool outermost, int gpu) {
  return lock(std::make_unique<handle>(handle{gate, outermost, false, gpu, sys::self_pid(), nullptr, 0}));
}

result<lock> acquirer::acquire(const lock_options& opt, const std::string& base) {
  history::acquisition_record recorded(opt, base);  // how the wait ended (history.hpp)
  auto p = make_plan(recorded.options(), base);
  if (!p) return p.error();
  auto r = p->one_slot ? acquire_one(*p) : acquire_among(*p);
  recorded.finish(r);
  return r;
}

}  // namespace offload_lock::detail
