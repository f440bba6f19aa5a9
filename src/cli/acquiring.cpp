// What the commands that take the lock share (acquiring.hpp).
#include "cli/acquiring.hpp"

#include <vector>

#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "cli/progress.hpp"
#include "lease_join.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/policy.hpp"

namespace offload_lock::cli {

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

int acquire_failed(const error& e, const args& a, const lock_options& o, const std::string& path, int busy_code) {
  const bool contention = e == errc::busy || e == errc::timed_out;
  if (!contention || !a.quiet) say(failure_message(e, a, o, path));
  return contention ? busy_code : exit_code_for(e);
}

namespace {

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

}  // namespace

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

std::string held_path(const std::string& path, const lock& l) { return gpu_slot_path(path, l.gpu()); }

bool is_lease_loss(const error& e) { return e.context().rfind(detail::lease_wait_context, 0) == 0; }
std::string lost_words(const error& e) {
  if (is_lease_loss(e)) return e.context() + " was replaced or removed by someone else";
  // An etcd lock lost with its lease says how ("... lost its etcd lease: ...").
  if (is_etcd_lock(e.context()) && e.context().find(' ') != std::string::npos) return "the lock " + e.context();
  return "the lock " + e.context() + " was removed or replaced by someone else";
}

int cancelled_exit(const args& a, const std::string& what, int sig) {
  if (!a.quiet) say(what + (sig ? " (" + os::signal_name(sig) + ")" : ""));
  return sig ? exit_signal_base + sig : exit_busy;
}

}  // namespace offload_lock::cli
