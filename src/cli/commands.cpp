// The commands of offload-lock over the library, but for run (run.cpp)
// and wait-free (wait_free.cpp): path, status, acquire, release and hold.
// See commands.hpp.
#include "cli/commands.hpp"

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/acquiring.hpp"
#include "cli/exit_codes.hpp"
#include "cli/fleet.hpp"
#include "cli/names.hpp"
#include "cli/output.hpp"
#include "cli/progress.hpp"
#include "cli/status.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"
#include "posix/child.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

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
