// `offload-lock run`: CMD forked and held at a gate while the lock is
// taken for it, then started on the slot taken and waited for within its
// maximum hold, the lock released as it ends. See commands.hpp.
#include "cli/commands.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/acquiring.hpp"
#include "cli/exit_codes.hpp"
#include "cli/names.hpp"
#include "cli/output.hpp"
#include "cli/progress.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/lock.hpp"
#include "posix/child.hpp"
#include "posix/signals.hpp"

namespace offload_lock::cli {

namespace {

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

}  // namespace

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

}  // namespace offload_lock::cli
