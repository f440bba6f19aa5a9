// The ordered queue of one lock (queue.hpp): the waiter's entry and the wait
// for its turn.
#include "queue.hpp"

#include <algorithm>

#include "inspect.hpp"
#include "meta.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "wait.hpp"

namespace offload_lock::detail {

queue_place::queue_place(const lock_options& opt, std::string registry_path, int gpu, int gpus,
                         std::int64_t arrived_us, std::int64_t arrived_ms)
    : opt_(opt), registry_path_(std::move(registry_path)), gpu_(gpu), gpus_(gpus), reader_(registry_path_) {
  waiter_record& r = me_.rec;
  r.pid = sys::self_pid();
  r.label = opt.label.empty() ? sys::program_name() : opt.label;
  // Within the entry's cap whatever the label (serialize repairs a cut
  // UTF-8 sequence).
  if (r.label.size() > 1024) r.label.resize(1024);
  r.host = sys::host_name();
  r.boot_id = sys::boot_id();
  if (auto ps = sys::start_of(r.pid)) r.proc_ticks = ps->ticks;
  r.since = arrived_ms;
  r.gpu = gpu;
  r.gpus = gpus;
  r.priority = opt.priority;
  r.expect_ms = opt.expected.count() > 0 ? opt.expected.count() : 0;
  r.queued_us = arrived_us;
  if (gpu < 0 && gpus > 1 && !opt.allowed_gpus.empty() && opt.allowed_gpus.size() <= max_listed_slots)
    for (int k : opt.allowed_gpus)
      if (k < gpus) r.slots.push_back(k);
  r.pid_ns = sys::pid_namespace().value_or(0);
}

void queue_place::join() {
  if (reg_ || !opt_.register_waiter) return;
  reg_ = waiter_registration::add(registry_path_, me_.rec);
  if (reg_) me_.name = reg_->name();
}

std::vector<queue_entry> queue_place::ahead_for(int slot) {
  std::vector<queue_entry> out;
  if (!opt_.register_waiter) return out;  // not queueing: nobody is ahead
  for (auto& e : reader_.live(joined() ? &me_ : nullptr)) {
    if (joined() && (e.name == me_.name || !served_before(e, me_))) break;
    if (!accepts(e.rec, slot) || passed_.count(e.rec.pid) || e.rec.pid == me_.rec.pid) continue;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::int64_t> queue_place::passed_still_queued() {
  std::vector<std::int64_t> out;
  if (passed_.empty()) return out;
  for (const auto& e : reader_.live())
    if (passed_.count(e.rec.pid) && std::find(out.begin(), out.end(), e.rec.pid) == out.end() &&
        out.size() < max_passed_over)
      out.push_back(e.rec.pid);
  return out;
}

std::optional<yield_request> first_above(registry_reader& r, int slot, int priority) {
  for (const auto& e : r.live()) {
    // In serving order: once one is not above, none after it is.
    if (e.rec.priority <= priority) break;
    if (accepts(e.rec, slot)) return yield_request{e.rec.pid, e.rec.label, e.rec.priority};
  }
  return std::nullopt;
}

result<turn> wait_turn(queue_place& place, const target& t, const lock_options& opt, std::int64_t deadline,
                       wait_report* rep, watch_clock& seen, sys::watcher& w) {
  const process_view pv = process_view::real();
  armed_lock armed;
  std::vector<int> files;  // this call's file watches
  auto unwatch_own = [&] {
    for (int id : files) w.unwatch(id);
    files.clear();
    w.unwatch(armed.dir_id);
    w.unwatch(armed.pid_id);
    armed = armed_lock{};
  };
  struct on_exit {
    decltype(unwatch_own)& f;
    ~on_exit() { f(); }
  } cleanup{unwatch_own};
  // Since when (monotonic) the lock has looked free with the same waiters
  // ahead; -1 while it is held.
  std::int64_t free_since = -1;
  std::vector<std::string> free_ahead;
  for (;;) {
    auto ahead = place.ahead();
    if (ahead.empty()) return turn::mine;
    // A single try does not queue; it takes a free lock only once the
    // waiters ahead have had their grace to claim it.
    const bool trying = opt.wait.count() <= 0;
    if (!trying && deadline >= 0 && sys::monotonic_ms() >= deadline) return turn::timed_out;
    if (!trying && !place.joined()) {
      place.join();
      if (!place.joined()) return turn::mine;  // out of the queue: as before it
      continue;
    }
    auto d = inspect_target(t, opt.ttl.count(), opt.grace.count(), pv, &seen);
    if (!d) return d.error();
    d->o.dir.reset();
    // Whom the holder passed over (a claim proves the holder was next in
    // line) are passed over here too, rather than given their grace again.
    if (d->o.snap.present && d->o.snap.meta_exists && !d->o.snap.meta.passed_over.empty()) {
      for (std::int64_t pid : d->o.snap.meta.passed_over) place.pass_over(pid);
      const auto before = ahead.size();
      ahead.erase(std::remove_if(ahead.begin(), ahead.end(),
                                 [&](const queue_entry& e) {
                                   return std::find(d->o.snap.meta.passed_over.begin(),
                                                    d->o.snap.meta.passed_over.end(),
                                                    e.rec.pid) != d->o.snap.meta.passed_over.end();
                                 }),
                  ahead.end());
      if (ahead.size() != before) continue;
    }
    const bool available = !d->o.snap.present || d->v.stale;
    if (trying && !available) return turn::busy;
    std::vector<std::string> names;
    names.reserve(ahead.size());
    for (const auto& e : ahead) names.push_back(e.name);
    const std::int64_t now = sys::monotonic_ms();
    if (!available || names != free_ahead) free_since = -1;
    if (available && free_since < 0) {
      free_since = now;
      free_ahead = names;
    }
    // Counted by process: the entries of one process are one waiter ahead,
    // however many it planted. The next in line gives the head a short
    // grace; further back, a free lock that stays unclaimed for a grace per
    // process ahead means every one of them is stuck (the one behind each
    // would have passed it over), and those far back look at the lock only
    // now and then (a second per process ahead) while it is held.
    std::set<std::int64_t> procs;
    for (const auto& e : ahead) procs.insert(e.rec.pid);
    const auto procs_ahead = static_cast<std::int64_t>(procs.size());
    const bool next_in_line = procs_ahead == 1 || trying;
    const std::int64_t patience = next_in_line ? pass_over_grace_ms : procs_ahead * pass_over_grace_ms;
    if (free_since >= 0 && now - free_since >= patience) {
      for (const auto& e : ahead) place.pass_over(e.rec.pid);
      free_since = -1;
      continue;
    }

    unwatch_own();
    std::int64_t timeout = safety_recheck_ms;
    if (free_since >= 0) timeout = patience - (now - free_since);
    if (next_in_line) {
      if (!available) {
        auto a = armed.arm(w, t, d->o.snap, d->v, queue_poll_ms);
        if (!a) continue;  // changed meanwhile
        timeout = std::min(timeout, *a);
      }
    } else if (free_since < 0) {
      timeout = std::min(timeout, procs_ahead * fallback_poll_ms);
    }
    // The one or two waiters just ahead: their leaving (or dying, which
    // closes the entry) is what moves this one up.
    bool gone = false;
    for (std::size_t k = ahead.size() > 2 ? ahead.size() - 2 : 0; k < ahead.size(); ++k) {
      const std::string& n = ahead[k].name;
      // Unwatchable (no inotify instance left): look the more often the
      // nearer the front (25 ms per waiter ahead, at most a second), since
      // a fast queue moves a waiter to the front between two slow looks.
      const int id = w.watch_file(place.reader().dir_path() + "/" + n);
      if (id >= 0) files.push_back(id);
      else
        timeout = std::min({timeout, fallback_poll_ms, queue_poll_ms * procs_ahead});
      if (!place.reader().present(n)) gone = true;
    }
    if (gone) continue;
    if (rep && !trying) rep->waiting({d->i}, static_cast<int>(ahead.size()) + 1);
    if (deadline >= 0 && !trying) timeout = std::min(timeout, std::max<std::int64_t>(0, deadline - sys::monotonic_ms()));
    std::vector<int> fired;
    auto once = [&](std::int64_t ms) { return w.wait(ms, opt.cancel_fds, &fired); };
    const auto why = rep ? rep->wait_ticking(timeout, once) : once(timeout);
    if (why == sys::watcher::wake::extra_fd) return turn::cancelled;
    armed.woken(fired);
  }
}

}  // namespace offload_lock::detail
