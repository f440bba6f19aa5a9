// The acquire loop (acquire.hpp): the file claim with reclaim and waiting, the
// in-process queue in front of it (B10), inheritance (B11), and the wait
// among several GPU slots.
#include "acquire.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <optional>

#include "claim.hpp"
#include "inherit.hpp"
#include "inspect.hpp"
#include "meta.hpp"
#include "offload_lock/path.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "queue.hpp"
#include "reclaim.hpp"
#include "token.hpp"
#include "wait.hpp"

namespace offload_lock::detail {

namespace {

// ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM: the machine is short of something
// that may come back.
bool out_of_resources(const error& e) {
  if (!e.is_system()) return false;
  switch (static_cast<std::errc>(e.code().value())) {
    case std::errc::no_space_on_device:
    case std::errc::too_many_files_open:
    case std::errc::too_many_files_open_in_system:
    case std::errc::not_enough_memory: return true;
    default: return e.code().value() == EDQUOT;
  }
}

// The meta.json record of an acquisition, or bad_input / ESRCH.
result<meta_record> record_for(const lock_options& opt) {
  if (opt.pid < 0) return error(errc::bad_input, "holder pid " + std::to_string(opt.pid));
  meta_record rec;
  rec.pid = opt.pid ? opt.pid : sys::self_pid();
  rec.token = opt.token.empty() ? new_token() : opt.token;
  if (!valid_token(rec.token)) return error(errc::bad_input, "token '" + rec.token + "'");
  rec.label = opt.label.empty() ? sys::program_name() : opt.label;
  rec.host = sys::host_name();
  rec.boot_id = sys::boot_id();
  // Where /proc is not this pid namespace's, only this process's own start
  // can be read (from /proc/self); another pid's would be a stranger's.
  rec.pid_ns = sys::pid_namespace().value_or(0);
  rec.priority = opt.priority;
  rec.expect_ms = opt.expected.count() > 0 ? opt.expected.count() : 0;
  // Only the heartbeat thread asks a holder to yield.
  rec.can_yield = opt.on_yield_request && opt.heartbeat;
  if (auto ps = sys::start_of(rec.pid)) {
    rec.proc_start = ps->epoch_ms;
    rec.proc_ticks = ps->ticks;
  } else if (opt.pid && sys::probe(opt.pid) != sys::liveness::alive) {
    return error(sys::errno_code(std::errc::no_such_process), "holder pid " + std::to_string(opt.pid));
  }
  return rec;
}

// The file claim of one lock: try, judge, reclaim or wait, until it is ours,
// the deadline passes or a cancel descriptor fires. `seen`: the watch clock
// of a caller that judges this lock across several calls (a wait among GPU
// slots); each call has its own otherwise.
// `place`: this waiter's place in the lock's queue; null for a try that
// does not queue (one round of a wait among several slots).
result<std::shared_ptr<held_state>> acquire_file(target t, const lock_options& opt, meta_record rec,
                                                  std::int64_t deadline, wait_report* rep, watch_clock* seen_across,
                                                  queue_place* place, const std::string& registry, int slot) {
  const std::string path = t.path;
  const process_view pv = process_view::real();
  const std::int64_t ttl = opt.ttl.count(), grace = opt.grace.count();
  clean_leftovers(t);

  lock_watch watch;
  watch_clock own_seen{};
  watch_clock& seen = seen_across ? *seen_across : own_seen;
  churn_guard churn;
  // Since when (monotonic) the stale directory `contended_id` has been
  // flocked by someone else, for reclaim's bounded wait.
  sys::file_id contended_id;
  std::int64_t contended_since = -1;
  for (;;) {
    // The queue first: claim only when no live waiter is ahead. Mutual
    // exclusion is the claim's alone; this only decides when to try.
    if (place) {
      auto tr = wait_turn(*place, t, opt, deadline, rep, seen, watch.shared());
      if (!tr) return tr.error();
      if (*tr == turn::busy) return error(errc::busy, path);
      if (*tr == turn::timed_out) return error(errc::timed_out, path);
      if (*tr == turn::cancelled) return error(errc::cancelled, path);
    }
    rec.started_at = sys::now_ms();
    if (place) rec.passed_over = place->passed_still_queued();
    const std::string bytes = serialize(rec);
    auto c = try_claim(t, bytes);
    // Out of space or descriptors: that ends the wait only when the lock is
    // free (then the claim itself failed, and the error names its file);
    // while someone else holds it, wait as for any holder and try again
    // when it frees.
    std::optional<error> claim_failed;
    if (!c) {
      if (!out_of_resources(c.error())) return c.error();
      claim_failed = c.error();
    } else if (c->taken) {
      auto s = std::make_shared<held_state>();
      s->t = std::move(t);
      s->dir = std::move(c->dir);
      s->meta_fd = std::move(c->meta);
      s->id = c->id;
      s->owner_pid = sys::self_pid();
      s->token = rec.token;
      s->meta = bytes;
      s->pid = rec.pid;
      s->ttl = ttl;
      s->on_lost = opt.on_lost;
      if (rec.can_yield) {
        s->on_yield = opt.on_yield_request;
        s->priority = opt.priority;
        s->slot = slot;
        s->registry_path = registry;
      }
      if (opt.heartbeat) start_heartbeat(s);
      return s;
    }

    auto d = inspect_target(t, ttl, grace, pv, &seen);
    if (!d) return d.error();
    if (claim_failed && (!d->o.snap.present || d->v.not_a_lock)) return *claim_failed;
    if (!d->o.snap.present) {  // released in the meantime: try again at once
      churn.round_without_wait();
      continue;
    }
    if (!d->o.snap.is_dir) return not_a_lock_directory(path, d->o.snap);
    if (d->v.not_a_lock) return not_a_lock_error(path, d->v);
    verdict v = d->v;
    if (v.stale) {
      const bool waited_out = contended_since >= 0 && contended_id == d->o.snap.id &&
                              sys::monotonic_ms() - contended_since >= contended_giveup_ms;
      auto r = reclaim(t, d->o, d->v, ttl, grace, pv, !waited_out);
      if (!r) return r.error();
      if (*r != removal::contended) {
        contended_since = -1;
        churn.round_without_wait();
        continue;
      }
      if (contended_since < 0 || contended_id != d->o.snap.id) {
        contended_id = d->o.snap.id;
        contended_since = sys::monotonic_ms();
      }
      // Another reclaimer is at work: its rename wakes us, this timer bounds it.
      v.reason = "being reclaimed by another process";
      v.stale = false;
      v.holder_pid = 0;
      v.incomplete = false;
      v.watch_contents = false;
      v.changes_at_ms = sys::now_ms() + contended_recheck_ms;
    }
    churn.waited();
    if (opt.wait.count() <= 0) return error(errc::busy, path);
    if (deadline >= 0 && sys::monotonic_ms() >= deadline) return error(errc::timed_out, path);
    // Starting to wait: into the queue, so that whoever comes next waits
    // behind this one.
    if (place) place->join();
    if (rep) rep->waiting({d->i}, place && place->joined() ? 1 : 0);
    d->o.dir.reset();
    // At the head of a queue, a lock that cannot be watched is re-checked
    // often: those behind wait for this one.
    const std::int64_t poll = place && place->joined() ? queue_poll_ms : fallback_poll_ms;
    if (!watch.wait_for_change(t, d->o.snap, v, deadline, poll, opt.cancel_fds, rep))
      return error(errc::cancelled, path);
  }
}



// One slot's lock: the in-process queue (B10), a claim passed down (B11),
// then the file claim. `queue_base`: the registry (slot 0's path) of the
// queue this acquisition joins while it waits; null: it does not queue.
result<lock> acquire_slot(const lock_options& opt, const std::string& base, int gpu, wait_report* rep,
                          watch_clock* seen = nullptr, bool queue = false) {
  const std::string path = gpu_slot_path(base, gpu);
  // Arrival is when the call began, so a thread that waited behind the
  // other threads of its process keeps its place among other processes.
  const std::int64_t arrived_us = sys::monotonic_us(), arrived_ms = sys::now_ms();
  auto tr = open_target(path);
  if (!tr) return tr.error();
  auto rec = record_for(opt);
  if (!rec) return rec.error();
  if (opt.gpus > 1 || opt.gpu >= 0) rec->gpu = gpu;
  const std::int64_t deadline = deadline_for(opt.wait);

  auto gate = gate_for(*tr);
  std::unique_lock<std::mutex> g(gate->mu);
  // B10: a nested acquisition on the thread that holds the lock passes straight through.
  if (gate->owned && gate->owner == this_thread_serial()) {
    ++gate->depth;
    return acquirer::make(gate, false, gpu);
  }
  // Otherwise queue behind the other threads of this process, in the order
  // the lock's queue serves processes: priority, then arrival.
  const std::uint64_t ticket = gate->next_ticket++;
  const int priority = opt.priority;
  gate->queue.insert(std::find_if(gate->queue.begin(), gate->queue.end(),
                                  [&](const local_gate::waiting& q) { return q.priority < priority; }),
                     local_gate::waiting{priority, ticket});
  auto my_turn = [&] { return !gate->owned && gate->queue.front().ticket == ticket; };
  auto leave_queue = [&] {
    gate->queue.erase(std::find_if(gate->queue.begin(), gate->queue.end(),
                                   [&](const local_gate::waiting& q) { return q.ticket == ticket; }));
    gate->cv.notify_all();
  };
  if (deadline < 0) {
    gate->cv.wait(g, my_turn);
  } else if (!gate->cv.wait_until(g,
                                  std::chrono::steady_clock::now() +
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

  // B11: a claim passed down by the process that started us passes straight through.
  if (opt.inherit) {
    if (auto token = inherited_token(*tr, opt.ttl.count(), opt.grace.count())) {
      std::lock_guard<std::mutex> guard(gate->mu);
      gate->inherited_token = *token;
      return acquirer::make(gate, true, gpu);
    }
  }
  std::optional<queue_place> place;
  if (queue) place.emplace(opt, base, opt.gpu, opt.gpus, arrived_us, arrived_ms);
  auto held = acquire_file(std::move(*tr), opt, std::move(*rec), deadline, rep, seen, place ? &*place : nullptr,
                           base, gpu);
  place.reset();  // out of the queue before anyone is told
  std::lock_guard<std::mutex> guard(gate->mu);
  if (!held) {
    gate->owned = false;
    gate->depth = 0;
    gate->cv.notify_all();
    return held.error();
  }
  gate->held = std::move(*held);
  return acquirer::make(gate, true, gpu);
}

bool slot_allowed(const lock_options& opt, int k) {
  return opt.allowed_gpus.empty() || std::find(opt.allowed_gpus.begin(), opt.allowed_gpus.end(), k) != opt.allowed_gpus.end();
}

// The first free of N slots (those allowed), in the queue's order: a slot
// is tried only when no live waiter ahead of this one would take it (those
// that leave it free for pass_over_grace_ms passed over). Each round tries
// every slot once (wait 0), then waits for a change at any of them or in
// the queue, on one watcher for all.
result<lock> acquire_any(const lock_options& opt, const std::string& base) {
  const std::int64_t arrived_us = sys::monotonic_us(), arrived_ms = sys::now_ms();
  const int n = opt.gpus;
  const std::int64_t deadline = deadline_for(opt.wait);
  // Started under one of these slots (B11): try that one first, so the
  // claim passes through rather than taking a second GPU.
  std::vector<int> order;
  if (auto env_path = inherited_path(); env_path && opt.inherit)
    for (int k = 0; k < n; ++k)
      if (slot_allowed(opt, k) && clean_path(*env_path) == clean_path(gpu_slot_path(base, k))) order.push_back(k);
  for (int k = 0; k < n; ++k)
    if (slot_allowed(opt, k) && (order.empty() || order.front() != k)) order.push_back(k);

  const auto slots = static_cast<std::size_t>(n);
  wait_report rep(opt);
  queue_place place(opt, base, -1, n, arrived_us, arrived_ms);
  std::unique_ptr<sys::watcher> w;
  std::vector<armed_lock> armed(slots);
  int queue_id = -1;
  // Each slot's watch clock lives across the rounds, so a clock that reads
  // a holder's mtime as in the future cannot stretch its TTL here either.
  std::vector<watch_clock> seen(slots);
  // Per slot: since when (monotonic) it has looked free with the same
  // waiters ahead for it; -1 while held or nobody is ahead.
  std::vector<std::int64_t> free_since(slots, -1);
  std::vector<std::vector<std::string>> free_ahead(slots);
  const process_view pv = process_view::real();
  churn_guard churn;
  lock_options once = opt;
  once.wait = milliseconds(0);
  const bool trying = opt.wait.count() <= 0;
  for (;;) {
    // The soonest a waiter ahead's grace on a free slot runs out; -1: none.
    std::int64_t grace_left = -1;
    for (int k : order) {
      const auto ks = static_cast<std::size_t>(k);
      auto ahead = place.ahead_for(k);
      if (!ahead.empty()) {
        auto t = open_target(gpu_slot_path(base, k));
        if (!t) return t.error();
        auto d = inspect_target(*t, opt.ttl.count(), opt.grace.count(), pv, &seen[ks]);
        if (!d) return d.error();
        if (d->o.snap.present && !d->v.stale) {
          free_since[ks] = -1;
          continue;  // held: the wait below watches it
        }
        std::vector<std::string> names;
        names.reserve(ahead.size());
        for (const auto& e : ahead) names.push_back(e.name);
        const std::int64_t now = sys::monotonic_ms();
        if (names != free_ahead[ks]) free_since[ks] = -1;
        if (free_since[ks] < 0) {
          free_since[ks] = now;
          free_ahead[ks] = names;
        }
        if (now - free_since[ks] < pass_over_grace_ms) {
          const std::int64_t left = pass_over_grace_ms - (now - free_since[ks]);
          grace_left = grace_left < 0 ? left : std::min(grace_left, left);
          continue;  // theirs, for now
        }
        for (const auto& e : ahead) place.pass_over(e.rec.pid);
        free_since[ks] = -1;
      }
      auto l = acquire_slot(once, base, k, nullptr, &seen[ks]);
      if (l) return l;
      if (l.error() != errc::busy) return l.error();
    }
    if (trying && grace_left < 0) return error(errc::busy, base);
    if (!trying && deadline >= 0 && sys::monotonic_ms() >= deadline) return error(errc::timed_out, base);
    // Starting to wait: into the queue, so that whoever comes next waits
    // behind this one.
    if (!trying && !place.joined()) place.join();

    // Judge every slot and arm the watcher on it; any slot that changed
    // meanwhile means another round at once.
    if (!w) w = std::make_unique<sys::watcher>();
    std::vector<info> holders;
    std::int64_t timeout = grace_left;
    bool changed = false;
    for (std::size_t k = 0; k < slots && !changed; ++k) {
      if (!slot_allowed(opt, static_cast<int>(k))) continue;
      auto t = open_target(gpu_slot_path(base, static_cast<int>(k)));
      if (!t) return t.error();
      auto d = inspect_target(*t, opt.ttl.count(), opt.grace.count(), pv, &seen[k]);
      if (!d) return d.error();
      d->o.dir.reset();
      const bool free_for_others = !d->o.snap.present && free_since[k] >= 0;
      auto a = d->o.snap.present ? armed[k].arm(*w, *t, d->o.snap, d->v, fallback_poll_ms) : std::nullopt;
      if (!a && !free_for_others) {
        changed = true;
        break;
      }
      if (a) timeout = timeout < 0 ? *a : std::min(timeout, *a);
      holders.push_back(d->i);
    }
    if (changed) {
      churn.round_without_wait();
      continue;
    }
    churn.waited();
    // The queue: a waiter ahead leaving (or dying) may make a slot this
    // one's. Waits among several slots wake on every change of the queue.
    if (place.joined() && queue_id < 0) {
      queue_id = w->watch_entries(place.reader().dir_path());
      if (queue_id < 0) timeout = timeout < 0 ? fallback_poll_ms : std::min(timeout, fallback_poll_ms);
    }
    if (!trying) rep.waiting(std::move(holders));
    if (deadline >= 0) {
      const std::int64_t left = std::max<std::int64_t>(0, deadline - sys::monotonic_ms());
      timeout = timeout < 0 ? left : std::min(timeout, left);
    }
    std::vector<int> fired;
    const auto why = rep.wait_ticking(timeout, [&](std::int64_t ms) { return w->wait(ms, opt.cancel_fds, &fired); });
    if (why == sys::watcher::wake::extra_fd) return error(errc::cancelled, base);
    for (auto& a : armed) a.woken(fired);
    // Re-armed next round: the registry may have been removed and made again.
    if (std::find(fired.begin(), fired.end(), queue_id) != fired.end()) {
      w->unwatch(queue_id);
      queue_id = -1;
    }
  }
}

}  // namespace

lock acquirer::make(const std::shared_ptr<local_gate>& gate, bool outermost, int gpu) {
  return lock(std::make_unique<handle>(handle{gate, outermost, false, gpu}));
}

result<lock> acquirer::acquire(const lock_options& opt, const std::string& base) {
  if (opt.priority < -100 || opt.priority > 100)
    return error(errc::bad_input, "priority " + std::to_string(opt.priority) + " (-100 to 100)");
  if (opt.expected.count() < 0) return error(errc::bad_input, "expected duration below 0");
  if (opt.gpus < 1 || opt.gpus > max_gpus)
    return error(errc::bad_input, "GPU count " + std::to_string(opt.gpus) + " (1 to " + std::to_string(max_gpus) + ")");
  if (opt.gpu >= max_gpus || (opt.gpus > 1 && opt.gpu >= opt.gpus))
    return error(errc::bad_input, "GPU slot " + std::to_string(opt.gpu) + " of " + std::to_string(opt.gpus));
  for (int k : opt.allowed_gpus)
    if (k < 0 || k >= opt.gpus || opt.gpus == 1 || opt.gpu >= 0)
      return error(errc::bad_input, "allowed GPU slot " + std::to_string(k) + " of " + std::to_string(opt.gpus));
  if (opt.gpus == 1 || opt.gpu >= 0) {
    const int k = std::max(0, opt.gpu);
    wait_report rep(opt);
    return acquire_slot(opt, base, k, &rep, nullptr, true);
  }
  return acquire_any(opt, base);
}

}  // namespace offload_lock::detail
