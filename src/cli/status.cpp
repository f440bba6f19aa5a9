// The status board: text, JSON, Prometheus, --watch. See status.hpp.
#include "cli/status.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli/board.hpp"
#include "cli/devices.hpp"
#include "cli/fleet.hpp"
#include "cli/history.hpp"
#include "cli/history_view.hpp"
#include "cli/lease_view.hpp"
#include "cli/lease_watch.hpp"
#include "cli/output.hpp"
#include "etcd/look.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/watch.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

constexpr auto gpu_usage_every = std::chrono::seconds(5);

// `status --watch` of an etcd lock: woken by a watch on the lock's keys
// (holder and queue), not by the file system.
int watch_etcd_status(const args& a, const gpu_plan& gpus, const std::string& path, int signals) {
  const bool tty = os::terminal_width(os::standard_output) > 0;
  std::string last_shape, last_text;
  bool first = true;
  // Read before each look: a change after it wakes the wait below.
  std::int64_t seen = detail::etcd::current_revision(path);
  for (;;) {
    board b = look(a, gpus, path, std::nullopt);
    const std::string shape = shape_of(b) + b.problem;
    if (a.json) {
      if (first || shape != last_shape) {
        ojson j = board_json(b, a);
        if (!b.problem.empty()) j["error"] = b.problem;
        std::cout << dump(j) << "\n" << std::flush;
      }
    } else {
      std::string text = b.problem.empty() ? render(b, a) : "offload-lock: " + printable(b.problem) + "\n";
      if (tty) {
        if (text != last_text) std::cout << "\x1b[H\x1b[2J" << text << printable("(watching " + path + "; Ctrl-C ends)") << std::flush;
      } else if (first || shape != last_shape) {
        std::cout << (first ? "" : "\n") << text << std::flush;
      }
      last_text = text;
    }
    first = false;
    last_shape = shape;
    // Redrawn every second on a terminal (the durations move), else on a
    // change; an etcd that cannot be reached is looked at again after a
    // pause inside wait_change.
    const milliseconds wait = tty && !a.json ? milliseconds(1000) : milliseconds(60'000);
    seen = detail::etcd::wait_change(path, seen, wait, {signals});
    if (os::take_signal() != 0) break;
  }
  if (tty && !a.json) std::cout << "\n" << std::flush;
  return exit_ok;
}

}  // namespace

int watch_status(const args& a, const gpu_plan& gpus, const std::string& path) {
  const int signals = os::catch_signals();
  if (is_etcd_lock(path)) return watch_etcd_status(a, gpus, path, signals);
  const bool tty = os::terminal_width(os::standard_output) > 0;
  // Wake on the lock (or a slot) appearing, going or being replaced in its
  // parent, and a waiter registering or leaving; and below, on a holder or a
  // waiter dying.
  change_watch feed(path);
  std::string last_shape, last_text;
  bool first = true;
  // nvidia-smi is asked again at most every few seconds, not on every redraw.
  std::optional<std::vector<gpu_device>> usage;
  std::optional<std::chrono::steady_clock::time_point> asked;
  lease_watch lease;  // the gpulease lease, where a root exists
  for (;;) {
    const bool dirs_watched = feed.arm_directories();
    lease.arm(find_lease());
    if (!asked || std::chrono::steady_clock::now() - *asked >= gpu_usage_every) {
      usage = gpu_usage();
      asked = std::chrono::steady_clock::now();
      // nvidia-smi's exit queued a SIGCHLD in the signal pipe: drop it, so
      // only a real signal ends the watch.
      if (os::take_signal() != 0) break;
    }
    board b = look(a, gpus, path, usage);
    const std::string shape = shape_of(b) + b.problem;
    if (a.json) {
      // A stream: one line per change, each line the --json status object.
      if (first || shape != last_shape) {
        ojson j = board_json(b, a);
        if (!b.problem.empty()) j["error"] = b.problem;
        std::cout << dump(j) << "\n" << std::flush;
      }
    } else {
      std::string text = b.problem.empty() ? render(b, a) : "offload-lock: " + b.problem + "\n";
      if (tty) {
        if (text != last_text) std::cout << "\x1b[H\x1b[2J" << text << "(watching " << path << "; Ctrl-C ends)" << std::flush;
      } else if (first || shape != last_shape) {
        std::cout << (first ? "" : "\n") << text << std::flush;
      }
      last_text = text;
    }
    first = false;
    last_shape = shape;
    std::vector<std::int64_t> pids;
    std::int64_t timeout = tty && !a.json ? 1000 : 60'000;
    for (const auto& i : b.slots) {
      if (i.held && i.pid) pids.push_back(*i.pid);
      // A held lock turns stale at the TTL; a present, not-held one may be
      // an incomplete lock inside its grace.
      if (i.held) timeout = std::min<std::int64_t>(timeout, std::max<std::int64_t>(1, a.ttl.count() - i.age.count()));
      else if (i.present) timeout = std::min<std::int64_t>(timeout, 1000);
    }
    for (const auto& w : b.waiters) pids.push_back(w.pid);
    if (const auto p = lease_watch::holder_pid(b.gpulease)) pids.push_back(p);
    auto armed = feed.arm_processes(pids);
    if (armed == change_watch::processes::gone) continue;  // one died since the look
    if (!dirs_watched || armed == change_watch::processes::unwatched) timeout = std::min<std::int64_t>(timeout, 1000);
    if (const auto l = lease.timeout_ms(b.gpulease); l >= 0) timeout = std::min(timeout, l);
    std::vector<int> fds = {signals};
    if (lease.fd() >= 0) fds.push_back(lease.fd());
    const bool changed = feed.wait(milliseconds(timeout), fds);
    if (lease.drain()) continue;  // the lease's directory changed: look again
    if (!changed && os::take_signal() != 0) break;
  }
  if (tty && !a.json) std::cout << "\n" << std::flush;
  return exit_ok;
}

int print_status(const args& a, const gpu_plan& gpus, const std::string& path) {
  board b = look(a, gpus, path, gpu_usage());
  if (!b.problem.empty()) {
    if (a.json && !a.prometheus) {
      ojson j = board_json(b, a);
      j["error"] = b.problem;
      std::cout << dump(j) << "\n";
    } else {
      say(b.problem);
    }
    return exit_system;
  }
  if (a.prometheus) {
    // The gauges of now, then the counters of the history.
    std::vector<std::string> tokens;
    for (const auto& i : b.slots)
      if (i.held && !i.token.empty()) tokens.push_back(i.token);
    std::cout << prometheus(b, a, path)
              << history_metrics(summarize(path, 0, grouping::gpu, 0, tokens, now_epoch_ms()), path);
    return exit_ok;
  }
  // This host's part of the fleet view, where one is configured.
  const auto fleet = is_etcd_lock(path) ? std::nullopt : fleet_freshness(path);
  if (a.json) {
    ojson j = board_json(b, a);
    if (fleet) j["fleet"] = fleet_json(*fleet);
    std::cout << dump(j) << "\n";
  } else {
    std::cout << render(b, a) << printable("lock: " + path) << "\n";
    // The gpulease lease of current upstream runners, where a root exists.
    if (b.gpulease) std::cout << lease_text(*b.gpulease) << "\n";
    if (fleet) std::cout << printable("fleet: " + std::string(fleet->stale ? "stale: " : "") + fleet->why) << "\n";
  }
  // 0 when every GPU asked about is taken, by its lock or by the lease.
  bool all_busy = true;
  for (std::size_t k = 0; k < b.slots.size(); ++k)
    if (b.counts[k] && !b.busy(k)) all_busy = false;
  return all_busy ? exit_ok : exit_busy;
}

}  // namespace offload_lock::cli
