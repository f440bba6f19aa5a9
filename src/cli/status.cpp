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

// What --watch shows of each look: with --json a stream, one status
// object a line per change; as text, redrawn in place on a terminal when it
// changed (every second, for the durations), else printed again on each
// change. Escaped as every line for a terminal is.
class watch_view {
 public:
  watch_view(const args& a, std::string path)
      : a_(a), path_(std::move(path)), tty_(os::terminal_width(os::standard_output) > 0) {}

  void show(const board& b) {
    const std::string shape = shape_of(b) + b.problem;
    if (a_.json) {
      if (first_ || shape != last_shape_) {
        ojson j = board_json(b, a_);
        if (!b.problem.empty()) j["error"] = b.problem;
        std::cout << dump(j) << "\n" << std::flush;
      }
    } else {
      const std::string text = b.problem.empty() ? render(b, a_) : "offload-lock: " + printable(b.problem) + "\n";
      if (tty_) {
        if (text != last_text_)
          std::cout << "\x1b[H\x1b[2J" << text << printable("(watching " + path_ + "; Ctrl-C ends)") << std::flush;
      } else if (first_ || shape != last_shape_) {
        std::cout << (first_ ? "" : "\n") << text << std::flush;
      }
      last_text_ = text;
    }
    first_ = false;
    last_shape_ = shape;
  }

  // The longest wait before the next look: a second on a terminal (the
  // durations move), else a minute (a change wakes it sooner).
  std::int64_t redraw_ms() const { return tty_ && !a_.json ? 1000 : 60'000; }

  // The cursor left below the board.
  void end() const {
    if (tty_ && !a_.json) std::cout << "\n" << std::flush;
  }

 private:
  const args& a_;
  const std::string path_;
  const bool tty_;
  std::string last_shape_, last_text_;
  bool first_ = true;
};

// `status --watch` of an etcd lock: woken by a watch on the lock's keys
// (holder and queue), not by the file system.
int watch_etcd_status(const args& a, const gpu_plan& gpus, const std::string& path, int signals) {
  watch_view view(a, path);
  // Read before each look: a change after it wakes the wait below.
  std::int64_t seen = detail::etcd::current_revision(path);
  for (;;) {
    view.show(look(a, gpus, path, std::nullopt));
    // An etcd that cannot be reached is looked at again after a pause
    // inside wait_change.
    seen = detail::etcd::wait_change(path, seen, milliseconds(view.redraw_ms()), {signals});
    if (os::take_signal() != 0) break;
  }
  view.end();
  return exit_ok;
}

}  // namespace

int watch_status(const args& a, const gpu_plan& gpus, const std::string& path) {
  const int signals = os::catch_signals();
  if (is_etcd_lock(path)) return watch_etcd_status(a, gpus, path, signals);
  watch_view view(a, path);
  // Wake on the lock (or a slot) appearing, going or being replaced in its
  // parent, and a waiter registering or leaving; and below, on a holder or a
  // waiter dying.
  change_watch feed(path);
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
    view.show(b);
    std::vector<std::int64_t> pids;
    std::int64_t timeout = view.redraw_ms();
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
  view.end();
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
