// The plan of one acquisition (plan.hpp): every option checked here, once.
#include "plan.hpp"

#include <algorithm>

#include "inherit.hpp"
#include "offload_lock/path.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "policy.hpp"
#include "registry.hpp"
#include "token.hpp"

namespace offload_lock::detail {

namespace {

error bad(const std::string& what) { return error(errc::bad_input, what); }

// The slots to try, in order: with gpu K, K alone; among N, those allowed,
// the one this process was started under first (B11), so that a claim
// passes through rather than taking a second GPU.
std::vector<int> slot_order(const lock_options& o, const std::string& base) {
  if (o.gpu >= 0) return {o.gpu};
  if (o.gpus <= 1) return {0};
  std::vector<int> allowed;
  for (int k = 0; k < o.gpus; ++k)
    if (o.allowed_gpus.empty() || std::find(o.allowed_gpus.begin(), o.allowed_gpus.end(), k) != o.allowed_gpus.end())
      allowed.push_back(k);
  if (o.inherit)
    if (auto env_path = inherited_path())
      for (std::size_t i = 0; i < allowed.size(); ++i)
        if (clean_path(*env_path) == clean_path(gpu_slot_path(base, allowed[i]))) {
          std::rotate(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(i),
                      allowed.begin() + static_cast<std::ptrdiff_t>(i) + 1);
          break;
        }
  return allowed;
}

}  // namespace

result<plan> make_plan(const lock_options& asked, const std::string& base) {
  if (base.empty()) return bad("lock path is empty");
  if (asked.priority < lowest_priority || asked.priority > highest_priority)
    return bad("priority " + std::to_string(asked.priority) + " (" + std::to_string(lowest_priority) + " to " +
               std::to_string(highest_priority) + ")");
  if (asked.expected.count() < 0) return bad("expected duration below 0");
  if (asked.max_hold.count() < 0) return bad("maximum hold below 0");
  // Then the site policy (policy.hpp): the priority, the maximum hold and
  // the expected duration from here on are what it leaves.
  site_rules rules;
  auto with_policy = apply_policy(asked, base, nullptr, &rules);
  if (!with_policy) return with_policy.error();
  const lock_options& o = *with_policy;
  if (o.gpus < 1 || o.gpus > max_gpus)
    return bad("GPU count " + std::to_string(o.gpus) + " (1 to " + std::to_string(max_gpus) + ")");
  // gpu K names one slot, whatever gpus says (`--gpu K` alone, or beyond
  // the count a discovery found).
  if (o.gpu >= max_gpus) return bad("GPU slot " + std::to_string(o.gpu) + " (0 to " + std::to_string(max_gpus - 1) + ")");
  for (int k : o.allowed_gpus)
    if (k < 0 || k >= o.gpus || o.gpus == 1 || o.gpu >= 0)
      return bad("allowed GPU slot " + std::to_string(k) + " of " + std::to_string(o.gpus));
  if (o.pid < 0) return bad("holder pid " + std::to_string(o.pid));
  if (!o.token.empty() && !valid_token(o.token)) return bad("token '" + o.token + "'");
  if (o.ttl.count() <= 0) return bad("TTL " + std::to_string(o.ttl.count()) + " ms (above 0)");
  if (o.grace.count() < 0) return bad("grace below 0");
  if (!o.lease_class.empty() && o.lease_class != "media" && o.lease_class != "text")
    return bad("lease class '" + o.lease_class + "' (media or text)");

  plan p;
  p.base = base;
  p.slots = slot_order(o, base);
  if (p.slots.empty()) return bad("no GPU slot is allowed");
  p.one_slot = p.slots.size() == 1;
  p.judge = {o.ttl.count(), o.grace.count()};
  p.until = o.wait == wait_forever ? deadline::forever() : deadline::in_ms(o.wait.count());
  p.cancel_fds = o.cancel_fds;
  p.inherit = o.inherit;
  if (!o.lease_class.empty()) p.lease_class = o.lease_class;

  const std::string label = o.label.empty() ? sys::program_name() : o.label;
  p.entry.queue = o.register_waiter;
  p.entry.label = label;
  p.entry.priority = o.priority;
  p.entry.expect_ms = o.expected.count();
  p.slotted = o.gpus > 1 || o.gpu >= 0;
  if (p.one_slot) {
    p.entry.gpu = p.slotted ? p.slots.front() : -1;
    // The count asked for is kept for the views (`2 of 3`); gpu >= 0 is
    // what places the entry in one slot's line.
    p.entry.gpus = o.gpu >= 0 ? o.gpus : 1;
  } else {
    p.entry.gpus = o.gpus;
    if (static_cast<int>(p.slots.size()) < o.gpus && p.slots.size() <= max_listed_slots) p.entry.slots = p.slots;
  }

  meta_record& r = p.record;
  r.pid = o.pid ? o.pid : sys::self_pid();
  r.token = o.token;  // empty: each claim makes a new one
  r.label = label;
  r.host = sys::host_name();
  r.boot_id = sys::boot_id();
  // Where /proc is not this pid namespace's, only this process's own start
  // can be read (from /proc/self); another pid's would be a stranger's.
  r.pid_ns = sys::pid_namespace().value_or(0);
  r.priority = o.priority;
  r.expect_ms = std::max<std::int64_t>(0, o.expected.count());
  r.max_hold_ms = o.max_hold.count();
  // Only the heartbeat thread asks a holder to yield.
  r.can_yield = o.on_yield_request && o.heartbeat;
  if (auto ps = sys::start_of(r.pid)) {
    r.proc_start = ps->epoch_ms;
    r.proc_ticks = ps->ticks;
  } else if (o.pid && sys::probe(o.pid) == sys::liveness::dead) {
    return error(sys::errno_code(std::errc::no_such_process), "holder pid " + std::to_string(o.pid));
  }

  p.hold.heartbeat = o.heartbeat;
  p.hold.on_lost = o.on_lost;
  if (r.can_yield) p.hold.on_yield = o.on_yield_request;
  p.hold.max_hold_ms = o.max_hold.count();
  p.hold.idle_after_ms = rules.idle_after_ms;
  p.hold.idle_percent = rules.idle_percent;
  p.hold.idle_yield = rules.idle_yield && r.can_yield;
  p.report.on_wait = o.on_wait;
  p.report.on_progress = o.on_progress;
  p.report.progress_every_ms = std::max<std::int64_t>(0, o.progress_every.count());
  return p;
}

}  // namespace offload_lock::detail
