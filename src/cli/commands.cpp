// The commands of offload-lock: path, status, acquire, release, run and
// hold over the library (wait-free: wait_free.cpp). See commands.hpp.
#include "cli/commands.hpp"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/exit_codes.hpp"
#include "cli/fleet.hpp"
#include "cli/names.hpp"
#include "cli/output.hpp"
#include "cli/progress.hpp"
#include "cli/status.hpp"
#include "lease_join.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"
#include "offload_lock/policy.hpp"
#include "posix/child.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

// What a failed acquisition with options `o` says: for busy and timed out,
// whom it lost to, as the library describes the lock.
std::string failure_message(const error& e, const args& a, const lock_options& o, const std::string& path) {
  if (e == errc::busy || e == errc::timed_out) {
    const std::string how = e == errc::busy ? "busy: " : "timed out: ";
    if (o.gpu < 0 && o.gpus > 1 && !o.allowed_gpus.empty())
      return how + "the " + std::to_string(o.allowed_gpus.size()) + " GPU slots of " + path +
             " that CUDA_VISIBLE_DEVICES allows are held";
    if (o.gpu < 0 && o.gpus > 1) return how + "all " + std::to_string(o.gpus) + " GPU slots of " + path + " are held";
    // Held up by the gpulease lease taken with the lock, which the error names.
    if (e.context().rfind(detail::lease_wait_context, 0) == 0) return how + e.context();
    const std::string p = gpu_slot_path(path, o.gpu);
    return how + p + " is " + status_line(inspect(p, a.ttl));
  }
  // A gpulease lease passed down that is not current: its reason, not the
  // words of a lock lost.
  if (e == errc::lost && e.context().rfind(detail::lease_wait_context, 0) == 0) return e.context();
  return e.message();
}

// Exit code and message for a failed acquisition with options `o`.
int acquire_failed(const error& e, const args& a, const lock_options& o, const std::string& path, int busy_code) {
  const bool contention = e == errc::busy || e == errc::timed_out;
  if (!contention || !a.quiet) say(failure_message(e, a, o, path));
  return contention ? busy_code : exit_code_for(e);
}

// The options of an acquisition on the command line, its waiting line
// included.
lock_options options_for(const args& a, const gpu_plan& gpus, const std::string& path) {
  lock_options o;
  o.path = path;
  o.wait = a.wait.value_or(wait_forever);
  o.ttl = a.ttl;
  o.label = a.label;
  o.lease_class = a.lease_class;
  o.priority = a.priority;
  o.expected = a.expect;
  o.max_hold = a.max_hold;
  if (gpus.slotted) {
    o.gpus = gpus.count;
    o.gpu = gpus.gpu;
    // CUDA_VISIBLE_DEVICES allows one slot of the N: that one; some: those.
    if (o.gpu < 0 && gpus.allowed.size() == 1) {
      o.gpu = gpus.allowed.front();
    } else if (o.gpu < 0 && !gpus.allowed.empty() && static_cast<int>(gpus.allowed.size()) < o.gpus) {
      o.allowed_gpus = gpus.allowed;
    }
  }
  report_waiting(o, a);
  return o;
}

// options_for with the site policy of the lock applied (offload_lock/policy.hpp),
// what it changed said unless --quiet; nullopt, the reason said, when the
// policy is invalid (exit_usage, as for a bad option).
std::optional<lock_options> options_with_policy(const args& a, const gpu_plan& gpus, const std::string& path) {
  std::vector<std::string> notices;
  auto o = with_site_policy(options_for(a, gpus, path), &notices);
  if (!o) {
    say(o.error().message());
    return std::nullopt;
  }
  if (!a.quiet)
    for (const auto& n : notices) say(n);
  return std::move(*o);
}

// The lock path of the slot a lock holds.
std::string held_path(const std::string& path, const lock& l) { return gpu_slot_path(path, l.gpu()); }

ojson held_json(const args& a, const gpu_plan& gpus, const std::string& path, const lock& l) {
  ojson j = to_json(inspect(held_path(path, l), a.ttl));
  if (gpus.slotted) j["gpu"] = l.gpu();
  // The fencing epoch of the gpulease lease held with the lock (or run under).
  if (const auto epoch = l.lease_epoch()) j["leaseEpoch"] = epoch;
  // An etcd lock's fencing token: this acquisition's own, whatever the
  // look above saw.
  if (is_etcd_lock(path)) j["fence"] = l.fence();
  return j;
}

// `acquire --json` when the lock was not taken: {"acquired":false,
// "outcome":"busy"|"timed_out"|"cancelled"|"error","exitCode":N,
// "message":"...","holder":{the --json object of the slot}|null}.
ojson failure_json(const error& e, const args& a, const lock_options& o, const std::string& path) {
  ojson j;
  const bool contention = e == errc::busy || e == errc::timed_out;
  j["acquired"] = false;
  j["outcome"] = e == errc::busy ? "busy" : e == errc::timed_out ? "timed_out" : e == errc::cancelled ? "cancelled" : "error";
  j["exitCode"] = contention ? exit_busy : exit_code_for(e);
  j["message"] = failure_message(e, a, o, path);
  const bool one_slot = !(o.gpu < 0 && o.gpus > 1);
  j["holder"] = contention && one_slot ? to_json(inspect(gpu_slot_path(path, o.gpu), a.ttl)) : ojson();
  return j;
}

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// Waits for CMD to end within its maximum hold: at the maximum hold the
// library has asked it to make way (its yield signal, when run has one);
// after a grace SIGTERM, after another SIGKILL, to its process group when
// it leads one. Returns CMD's status, or nullopt when it ran past the
// maximum hold (then it has ended, and `how` says by what).
std::optional<int> wait_within_max_hold(os::gated_child& child, const args& a, milliseconds max_hold,
                                        std::string& how) {
  if (auto status = child.wait_forwarding_for(max_hold.count())) return status;
  how = a.yield_signal > 0 ? "after " + os::signal_name(a.yield_signal) : "by itself";
  const std::int64_t grace = a.max_hold_grace.count();
  if (child.wait_forwarding_for(grace)) return std::nullopt;
  how = "on SIGTERM";
  os::terminate_group(child.pid());
  if (child.wait_forwarding_for(grace)) return std::nullopt;
  how = "by SIGKILL";
  os::kill_group(child.pid());
  (void)child.wait_forwarding();
  return std::nullopt;
}

// What a loss reported by the library (errc::lost) lost, in words: the
// lock at its context's path, or the gpulease lease taken with it.
bool is_lease_loss(const error& e) { return e.context().rfind(detail::lease_wait_context, 0) == 0; }
std::string lost_words(const error& e) {
  if (is_lease_loss(e)) return e.context() + " was replaced or removed by someone else";
  // An etcd lock lost with its lease says how ("... lost its etcd lease: ...").
  if (is_etcd_lock(e.context()) && e.context().find(' ') != std::string::npos) return "the lock " + e.context();
  return "the lock " + e.context() + " was removed or replaced by someone else";
}

// A wait abandoned by a signal (`sig`, the one taken from the queue; 0:
// none was) ends like being killed by it.
int cancelled_exit(const args& a, const std::string& what, int sig = os::take_signal()) {
  if (!a.quiet) say(what + (sig ? " (" + os::signal_name(sig) + ")" : ""));
  return sig ? exit_signal_base + sig : exit_busy;
}

}  // namespace

int cmd_path(const args& a) {
  path_resolution r = resolve_path(a.lock_path);
  if (a.json) {
    ojson j;
    j["path"] = r.path;
    j["rule"] = to_string(r.rule);
    j["goPath"] = r.go_path;
    j["goDisagrees"] = r.go_disagrees();
    std::cout << dump(j) << "\n";
    return exit_ok;
  }
  std::cout << r.path << "\n";
  if (a.explain) {
    std::cout << "rule: " << to_string(r.rule) << "\n";
    if (r.go_disagrees())
      std::cout << "go: " << r.go_path
                << " (Go readers resolve this other path: Go reads only $TMPDIR, not $TMP or $TEMP;"
                   " set TMPDIR or GPU_LOCK for both)\n";
    else
      std::cout << "go: same path\n";
  }
  return exit_ok;
}

int cmd_status(const args& a, const gpu_plan& gpus, const std::string& path) {
  if (a.fleet) return print_fleet(a);
  return a.watch ? watch_status(a, gpus, path) : print_status(a, gpus, path);
}

int cmd_acquire(const args& a, const gpu_plan& gpus, const std::string& path) {
  auto planned = options_with_policy(a, gpus, path);
  if (!planned) return exit_usage;
  lock_options o = std::move(*planned);
  o.pid = a.pid ? a.pid : os::parent_pid();
  // The keeper below refreshes the lock from another process.
  o.heartbeat = false;
  // Signals first (see cmd_run): the recorded holder outlives this command,
  // so one killed while it waits (for the queue, or holding the lock for the
  // gpulease lease) would leave the lock held for that holder with nobody to
  // keep or release it. A signal ends the wait and lets go of what it took.
  const int signals = os::catch_stop_signals();
  o.cancel_fds = {signals};
  auto l = lock::acquire(o);
  end_waiting_line();
  if (!l) {
    // --json: one object whatever the outcome, so a script always has
    // something to parse.
    if (a.json) std::cout << dump(failure_json(l.error(), a, o, path)) << std::endl;
    if (l.error() == errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.error(), a, o, path, exit_busy);
  }
  if (const int sig = os::take_signal(); sig && !l->inherited()) {
    // Arrived as the wait ended: the caller asked this command to stop.
    (void)l->release();
    return cancelled_exit(a, "let go of " + held_path(path, *l) + " as soon as it was taken", sig);
  }
  if (a.json) std::cout << dump(held_json(a, gpus, path, *l)) << std::endl;
  else if (gpus.slotted) std::cout << l->token() << " " << l->gpu() << std::endl;
  else std::cout << l->token() << std::endl;
  if (l->inherited()) {
    // Started under this lock (inside `offload-lock run`) or a gpulease lease: nothing to keep.
    if (!a.quiet && l->token().empty())
      say("passing through: the gpulease lease (epoch " + std::to_string(l->lease_epoch()) +
          ") this process runs under holds the GPU");
    else if (!a.quiet)
      say("passing through: " + held_path(path, *l) + " is held by the offload-lock run this process runs under");
    return exit_ok;
  }
  // A detached keeper keeps the lock fresh while the holder lives and
  // releases it when the holder exits. A holder that exits at once (the
  // subshell of `tok=$(offload-lock acquire | tr -d ' ')`) is a mistake the
  // caller does not see: the keeper says so on the caller's stderr, a
  // terminal or a log file alike (cron, CI), unless that is a pipe.
  const int terminal = a.quiet ? -1 : os::stderr_copy_unless_pipe();
  auto keeper = os::fork_detached();
  if (keeper && *keeper) {
    os::default_signals();
    if (terminal >= 0) {
      std::string warning;
      if (os::exits_within(l->pid(), 1000))
        warning = "offload-lock: " +
                  printable("WARNING: the recorded holder, pid " + std::to_string(l->pid()) + " (" +
                            os::command_name(l->pid()).value_or("gone") +
                            "), exited within a second of acquire, and the lock was released with it. Record a "
                            "process that lives as long as the work: acquire --pid $$ from the script itself, or "
                            "offload-lock run -- CMD") +
                  "\n";
      os::write_and_close(terminal, warning);
    }
    (void)l->hold_until_holder_exits();
    std::_Exit(0);
  }
  os::write_and_close(terminal, "");
  l->detach();
  return exit_ok;
}

int cmd_release(const args& a, const gpu_plan& gpus, const std::string& base) {
  std::string path = base;
  if (a.gpu >= 0) {
    path = gpu_slot_path(base, a.gpu);
  } else if (gpus.slotted) {
    // The slot this holder holds, among the N.
    if (a.force) {
      say("release --force with --gpus removes one slot: name it with --gpu K");
      return exit_usage;
    }
    const int n = gpus.count;
    const std::int64_t pid = a.token.empty() ? (a.pid ? a.pid : os::parent_pid()) : 0;
    bool found = false, any_held = false;
    for (int k = 0; k < n && !found; ++k) {
      info i = inspect(gpu_slot_path(base, k), a.ttl);
      any_held = any_held || i.held;
      if ((!a.token.empty() && i.token == a.token) || (pid && i.pid && *i.pid == pid)) {
        path = i.path;
        found = true;
      }
    }
    if (!found) {
      std::string whom = a.token.empty() ? "pid " + std::to_string(pid) : "token " + a.token;
      if (!any_held) {
        if (!a.quiet) say("already free: no slot of " + base + " is held by " + whom);
        return exit_ok;
      }
      say("none of the " + std::to_string(n) + " slots of " + base + " is held by " + whom + "; left in place");
      return exit_not_owner;
    }
  }
  release_request req;
  req.token = a.token;
  req.force = a.force;
  if (a.token.empty()) req.pid = a.pid ? a.pid : os::parent_pid();
  // Inside `offload-lock run` a plain release leaves the enclosing run's lock
  // to the run (B11): its acquire passed through, so there is nothing of ours.
  auto inherited = os::get_env(env_lock_token);
  if (a.token.empty() && !a.pid && !a.force && inherited && !inherited->empty() &&
      inspect(path, a.ttl).token == *inherited) {
    if (!a.quiet) say("passing through: " + path + " belongs to the offload-lock run this process runs under; left for it");
    return exit_ok;
  }
  auto r = release_by(path, req, a.ttl);
  if (!r) {
    // A release that cannot look at the lock is a system error whatever its
    // code: a path naming no directory exits 4 here, as it always has.
    say(r.error().message());
    return exit_system;
  }
  const info& i = r->before;
  switch (r->status) {
    case release_status::released:
      if (a.force && !a.quiet) say("removed " + path + ", held by " + who(i));
      return exit_ok;
    case release_status::already_free:
      if (i.present && !a.quiet) say("already free; a stale lock of " + who(i) + " remains for the next acquirer to reclaim");
      return exit_ok;
    case release_status::not_owner:
      say(path + " is held by " + who(i) + ", not by " +
          (a.token.empty() ? "pid " + std::to_string(req.pid) : "token " + a.token) + "; left in place");
      return exit_not_owner;
  }
  return exit_system;
}

int cmd_run(const args& a, const gpu_plan& gpus, const std::string& path) {
  auto planned = options_with_policy(a, gpus, path);
  if (!planned) return exit_usage;
  lock_options o = std::move(*planned);
  // CMD's environment names the slot it runs on, known once it is taken.
  // Made before signals are caught: naming the GPU may run nvidia-smi.
  std::vector<os::gated_child::env_list> per_slot;
  const int slots = o.gpu >= 0 ? o.gpu + 1 : o.gpus;
  for (int k = 0; k < slots; ++k) {
    per_slot.push_back({{env_lock_path, gpu_slot_path(path, k)}});
    if (gpus.slotted)
      for (auto& kv : cuda_environment(gpus, k)) per_slot.back().push_back(std::move(kv));
  }
  // Signals are caught before anything else: one that arrives while waiting
  // abandons the wait; one that arrives once CMD runs is passed on to it.
  const int signals = os::catch_signals();
  std::string token = new_token();
  // An etcd lock is held by this process's lease, not by CMD's pid: should
  // this process die, CMD dies with it (SIGKILL, the one signal CMD cannot
  // ignore), so that it never runs on once the lease lapses and another
  // host takes the lock.
  auto child = os::gated_child::fork_gated(a.cmd, {{env_lock_token, token}}, per_slot, is_etcd_lock(path));
  if (!child) {
    say(child.error().message());
    return exit_system;
  }
  o.pid = child->pid();
  o.token = token;
  if (o.label.empty()) o.label = basename_of(a.cmd[0]);
  std::string cmd_name = a.cmd[0];
  const std::int64_t cmd_pid = child->pid();
  const bool term = a.on_lost_term;
  // Runs on the library's heartbeat thread; the error names the lock (the
  // slot's path).
  o.on_lost = [cmd_name, cmd_pid, term](const error& e) {
    say("WARNING: " + lost_words(e) + " while " + cmd_name + " runs; the GPU is no longer reserved for it" +
        (term ? "; sending it SIGTERM" : ""));
    if (term) os::terminate(cmd_pid);
  };
  if (a.yield_signal > 0) {
    const int sig = a.yield_signal;
    const bool quiet = a.quiet;
    const std::string max_hold = describe_duration(o.max_hold);
    // On the heartbeat thread, once per hold: for a waiter above, at the
    // maximum hold or when idle by the site policy (a request for whoever
    // waits, or none).
    o.on_yield_request = [cmd_name, cmd_pid, sig, quiet, max_hold](const yield_request& r) {
      const std::string asking = "asking " + cmd_name + " to make way with " + os::signal_name(sig);
      if (quiet) {
      } else if (r.reason == "idle") {
        say("the GPU has shown " + cmd_name + " idle for the site policy's idle time; " + asking);
      } else if (r.reason == "max hold") {
        say("the maximum hold of " + max_hold + " has passed; " + asking);
      } else {
        say(r.label + " (pid " + std::to_string(r.pid) + ", priority " + std::to_string(r.priority) +
            ") waits with a higher priority; " + asking);
      }
      os::send_signal(cmd_pid, sig);
    };
  }
  o.cancel_fds = {signals};
  auto l = lock::acquire(o);
  end_waiting_line();
  if (!l) {
    // CMD, held back at the gate, was killed while we waited: it ends like
    // any CMD, with its own status.
    if (auto status = child->ended()) {
      child->reap();
      if (!a.quiet) say(a.cmd[0] + " ended before it could start (status " + std::to_string(*status) + ")");
      return *status;
    }
    child->abandon();
    if (l.error() == errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.error(), a, o, path, a.busy_exit);
  }
  const std::string shown = held_path(path, *l);
  // Still ours at the moment CMD starts: a claim removed meanwhile (a v1
  // runner's reclaim of a lock it misjudged) is no reason to run unguarded.
  if (!l->still_held()) {
    child->abandon();
    say("the lock " + shown + " was removed or replaced by someone else before " + cmd_name +
        " could start; not starting it");
    return exit_lost;
  }
  // CMD runs under the lease held with the lock too: GPU_LEASE_*.
  os::gated_child::env_list late;
  for (auto& kv : l->child_environment())
    if (kv.first.rfind("GPU_LEASE_", 0) == 0) late.push_back(std::move(kv));
  // And an etcd lock's fencing token, for CMD to hand to what it sends work
  // to (doc/etcd.md "Fencing").
  if (l->fence()) late.emplace_back("OFFLOAD_LOCK_FENCE", std::to_string(l->fence()));
  if (auto e = child->start(l->gpu(), late)) {
    (void)l->release();
    if (child->ended_before_start() >= 0) return child->ended_before_start();
    say("cannot run " + a.cmd[0] + ": " + e.code().message());
    return e.code() == std::errc::no_such_file_or_directory ? 127 : 126;
  }
  std::string how;
  std::optional<int> status =
      o.max_hold.count() > 0 ? wait_within_max_hold(*child, a, o.max_hold, how) : child->wait_forwarding();
  // Released while CMD is still an unreaped zombie, so no participant ever
  // sees this lock with a dead holder pid (a v1 runner would reclaim it).
  error released = l->release();
  child->reap();
  // A loss is said even under --quiet: the GPU was not reserved for all of CMD.
  if (released == errc::lost && is_lease_loss(released))
    say(lost_words(released) + " before " + cmd_name + " ended");
  else if (released == errc::lost)
    say("the lock " + shown + " had been removed or replaced by someone else before " + cmd_name + " ended");
  if (status) return *status;
  // Said even under --quiet, as the exit code is CMD's no longer.
  say(cmd_name + " held " + shown + " past its maximum hold of " + describe_duration(o.max_hold) + "; it ended " +
      how + " and the lock was released");
  return exit_max_hold;
}

int cmd_hold(const args& a, const gpu_plan& gpus, const std::string& path) {
  auto planned = options_with_policy(a, gpus, path);
  if (!planned) return exit_usage;
  lock_options o = std::move(*planned);
  // The loss said for people, and with --json for programs (compat/node's
  // onLost) as {"event":"lost","path":P,"message":M} on a line of its own.
  o.on_lost = [json = a.json](const error& e) {
    const std::string what = lost_words(e);
    say("WARNING: " + what);
    if (json) {
      ojson j;
      j["event"] = "lost";
      j["path"] = e.context();
      j["message"] = what;
      os::write_stderr(j.dump(-1, ' ', true, ojson::error_handler_t::replace) + "\n");
    }
  };
  // Signals first (see cmd_run); and a hold whose requester is gone (its
  // stdin closed) gives up waiting instead of taking the lock for nobody.
  const int signals = os::catch_signals();
  o.cancel_fds = {signals, 0};
  auto l = lock::acquire(o);
  end_waiting_line();
  if (!l) {
    if (l.error() == errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.error(), a, o, path, exit_busy);
  }
  std::cout << "acquired " << dump(held_json(a, gpus, path, *l)) << std::endl;
  const std::string slot_path = held_path(path, *l);
  // Held until EOF or a signal, or until the maximum hold passes.
  const bool past_max_hold = os::wait_for_eof_or_signal(o.max_hold.count() > 0 ? o.max_hold.count() : -1) < 0;
  error e = l->release();
  if (e == errc::lost) {
    // Removed or replaced during the hold, by whatever means (a v1 runner's
    // reclaim, release --force, a release by this hold's token from
    // elsewhere): the GPU was not reserved for the whole hold.
    // Said even under --quiet: the hold did not reserve the GPU throughout.
    if (is_lease_loss(e)) {
      say(lost_words(e) + " during the hold");
      return exit_lost;
    }
    info now = inspect(slot_path, a.ttl);
    say(now.held ? "the lock " + slot_path + " had been taken over by " + who(now)
                 : "the lock " + slot_path + " had been removed by someone else during the hold");
    return exit_lost;
  }
  if (e) {
    say(e.message());
    return exit_code_for(e);
  }
  if (past_max_hold) {
    say("released " + slot_path + ": its maximum hold of " + describe_duration(o.max_hold) + " passed");
    return exit_max_hold;
  }
  return exit_ok;
}

}  // namespace offload_lock::cli
