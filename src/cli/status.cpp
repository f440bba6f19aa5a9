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

#include "cli/devices.hpp"
#include "cli/output.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/watch.hpp"
#include "posix/os.hpp"
#include "posix/signals.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

constexpr auto gpu_usage_every = std::chrono::seconds(5);

int slot_of(const args& a, std::size_t index) { return a.gpu >= 0 ? a.gpu : static_cast<int>(index); }

// A waiter's place in its slot's queue: position 1 is next; the ETA is the
// holder's expected free time plus the declared durations ahead of it,
// unknown as soon as one of them is undeclared.
struct place {
  int position = 0;
  std::optional<milliseconds> eta;
};

struct board {
  std::vector<info> slots;
  std::vector<std::optional<gpu_device>> devices;  // each slot's GPU, as nvidia-smi reported it
  std::vector<waiter> waiters;
  std::vector<place> places;  // one per waiter
  std::string problem;
  bool multi = false;
};

// Each waiter's position and ETA, as the library gives them.
void place_waiters(board& b) {
  b.places.assign(b.waiters.size(), place{});
  for (std::size_t k = 0; k < b.waiters.size(); ++k) b.places[k] = {b.waiters[k].position, b.waiters[k].eta};
}

// `usage`: what nvidia-smi last said about the GPUs (nullopt: nothing).
board look(const args& a, const gpu_plan& gpus, const std::string& path,
           const std::optional<std::vector<gpu_device>>& usage) {
  board b;
  // Who waits for which slots tells which slots to show.
  b.waiters = waiters(path);
  int n = gpus.count;
  if (!gpus.slotted) {
    n = discover_slots(path);
    for (const auto& w : b.waiters) n = std::max({n, w.gpus, w.gpu + 1});
  }
  std::vector<int> shown;
  if (a.gpu >= 0) shown.push_back(a.gpu);
  else
    for (int k = 0; k < n; ++k) shown.push_back(k);
  b.multi = n > 1 || a.gpu > 0;
  for (int k : shown) {
    info i = inspect(gpu_slot_path(path, k), a.ttl);
    if (!i.problem.empty() && b.problem.empty()) b.problem = i.problem;
    b.devices.push_back(device_of_slot(usage, k, i));
    b.slots.push_back(std::move(i));
  }
  // Read again after the holders: the ETAs the library gives are then as of
  // a moment no earlier than the holders' expected free times shown.
  b.waiters = waiters(path);
  if (a.gpu >= 0)
    b.waiters.erase(std::remove_if(b.waiters.begin(), b.waiters.end(),
                                   [&](const waiter& w) { return w.gpu >= 0 && w.gpu != a.gpu; }),
                    b.waiters.end());
  place_waiters(b);
  return b;
}

// "expected free in ~12m", "overdue by 3m", or nothing when undeclared.
std::string expectation(const info& i) {
  if (!i.held || i.expected.count() <= 0) return std::string();
  if (i.held_for > i.expected) return ", overdue by " + describe_duration(i.held_for - i.expected);
  return ", expected free in ~" + describe_duration(i.expected - i.held_for);
}

// ", yield requested by llm-eval (priority 10)", escaped; nothing when
// nobody asked.
std::string yield_text(const info& i) {
  if (!i.held || !i.yield_requested) return std::string();
  const auto& y = *i.yield_requested;
  return printable(", yield requested by " + (y.label.empty() ? "pid " + std::to_string(y.pid) : y.label) +
                   " (priority " + std::to_string(y.priority) + ")");
}

std::string waiter_line(const waiter& w, const place& p, bool multi) {
  std::string s = "waiting: " + (w.label.empty() ? std::string("an unnamed process") : w.label) + " (pid " +
                  std::to_string(w.pid);
  if (!w.host.empty()) s += ", host " + w.host;
  s += ") for " + describe_duration(w.waited);
  if (p.position > 0) s += ", #" + std::to_string(p.position);
  if (w.priority != 0) s += ", priority " + std::to_string(w.priority);
  if (p.eta) s += ", ETA ~" + describe_duration(*p.eta);
  if (w.gpu >= 0 && (multi || w.gpu > 0)) s += ", for gpu" + std::to_string(w.gpu);
  else if (w.gpus > 1) s += ", for any of " + std::to_string(w.gpus) + " GPUs";
  else if (multi) s += ", for gpu0";
  return s;
}

std::string render(const board& b, const args& a) {
  std::string out;
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    if (b.multi) out += "gpu" + std::to_string(slot_of(a, k)) + ": ";
    out += status_line(b.slots[k]) + expectation(b.slots[k]) + yield_text(b.slots[k]) + "\n";
    if (b.devices[k]) out += device_text(*b.devices[k]);
  }
  // A waiter's label and host are its own words: escaped like the holder's.
  for (std::size_t k = 0; k < b.waiters.size(); ++k)
    out += printable(waiter_line(b.waiters[k], b.places[k], b.multi)) + "\n";
  return out;
}

ojson ms_or_null(const std::optional<milliseconds>& d) { return d ? ojson(d->count()) : ojson(); }

// The holder's declared duration and expected free time (null when unknown,
// 0 when overdue or free).
void add_expectation(ojson& j, const info& i) {
  j["priority"] = i.held ? ojson(i.priority) : ojson();
  j["expectMs"] = i.held && i.expected.count() > 0 ? ojson(i.expected.count()) : ojson();
  j["freeInMs"] = i.held ? ms_or_null(i.expected_free_in) : ojson(0);
  if (i.held && i.yield_requested)
    j["yieldRequested"] = {{"pid", i.yield_requested->pid},
                           {"label", i.yield_requested->label},
                           {"priority", i.yield_requested->priority}};
  else
    j["yieldRequested"] = nullptr;
}

ojson waiter_json(const waiter& w, const place& p) {
  ojson j;
  j["pid"] = w.pid;
  j["label"] = w.label;
  j["host"] = w.host;
  j["since"] = w.since;
  j["waitedMs"] = w.waited.count();
  j["gpu"] = w.gpu >= 0 ? ojson(w.gpu) : ojson();
  j["gpus"] = w.gpus;
  j["position"] = p.position > 0 ? ojson(p.position) : ojson();
  j["priority"] = w.priority;
  j["expectMs"] = w.expected.count() > 0 ? ojson(w.expected.count()) : ojson();
  j["etaMs"] = ms_or_null(p.eta);
  return j;
}

ojson board_json(const board& b, const args& a) {
  ojson j = to_json(b.slots.front());
  j["gpu"] = slot_of(a, 0);
  j["device"] = device_json(b.devices.front());
  add_expectation(j, b.slots.front());
  ojson slots = ojson::array();
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    ojson s = to_json(b.slots[k]);
    s["gpu"] = slot_of(a, k);
    s["device"] = device_json(b.devices[k]);
    add_expectation(s, b.slots[k]);
    slots.push_back(std::move(s));
  }
  j["slots"] = std::move(slots);
  ojson ws = ojson::array();
  for (std::size_t k = 0; k < b.waiters.size(); ++k) ws.push_back(waiter_json(b.waiters[k], b.places[k]));
  j["waiters"] = std::move(ws);
  return j;
}

std::string seconds_text(milliseconds d) {
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

// The node_exporter textfile-collector format: one gauge family per fact,
// labelled by lock path and slot.
std::string prometheus(const board& b, const args& a, const std::string& path) {
  std::string out;
  auto family = [&](const char* name, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
  };
  auto labels = [&](std::size_t k) {
    return "{lock=" + prom_quote(path) + ",gpu=\"" + std::to_string(slot_of(a, k)) + "\"}";
  };
  family("offload_lock_held", "1 when the GPU lock (slot) is held, 0 when it is free.");
  for (std::size_t k = 0; k < b.slots.size(); ++k) out += "offload_lock_held" + labels(k) + (b.slots[k].held ? " 1\n" : " 0\n");
  family("offload_lock_holder_pid", "Process id recorded by the holder of a held GPU lock (slot).");
  for (std::size_t k = 0; k < b.slots.size(); ++k)
    if (b.slots[k].held && b.slots[k].pid) out += "offload_lock_holder_pid" + labels(k) + " " + std::to_string(*b.slots[k].pid) + "\n";
  family("offload_lock_held_seconds", "How long the current holder has held the GPU lock (slot).");
  for (std::size_t k = 0; k < b.slots.size(); ++k)
    if (b.slots[k].held) out += "offload_lock_held_seconds" + labels(k) + " " + seconds_text(b.slots[k].held_for) + "\n";
  family("offload_lock_holder_info", "The holder of a held GPU lock (slot), by label and host; always 1.");
  for (std::size_t k = 0; k < b.slots.size(); ++k)
    if (b.slots[k].held) {
      std::string l = labels(k);
      l.pop_back();
      out += "offload_lock_holder_info" + l + ",label=" + prom_quote(b.slots[k].label) + ",host=" +
             prom_quote(b.slots[k].host) + "} 1\n";
    }
  // The GPU under each slot, where nvidia-smi reported it.
  auto per_device = [&](const char* name, const char* help, auto value) {
    family(name, help);
    for (std::size_t k = 0; k < b.slots.size(); ++k)
      if (b.devices[k])
        if (auto v = value(*b.devices[k])) out += name + labels(k) + " " + *v + "\n";
  };
  auto mib_bytes = [](const std::optional<std::int64_t>& mib) -> std::optional<std::string> {
    if (!mib) return std::nullopt;
    return std::to_string(*mib * 1024 * 1024);
  };
  per_device("offload_lock_gpu_memory_used_bytes", "GPU memory in use on the slot's GPU (nvidia-smi).",
             [&](const gpu_device& d) { return mib_bytes(d.memory_used_mib); });
  per_device("offload_lock_gpu_memory_total_bytes", "GPU memory of the slot's GPU (nvidia-smi).",
             [&](const gpu_device& d) { return mib_bytes(d.memory_total_mib); });
  per_device("offload_lock_gpu_utilization_ratio", "Utilization of the slot's GPU, 0 to 1 (nvidia-smi).",
             [](const gpu_device& d) -> std::optional<std::string> {
               if (!d.utilization_pct) return std::nullopt;
               char buf[16];
               (void)std::snprintf(buf, sizeof buf, "%.2f", *d.utilization_pct / 100.0);
               return std::string(buf);
             });
  per_device("offload_lock_gpu_unlocked_processes", "Processes using the slot's GPU without holding its lock.",
             [](const gpu_device& d) -> std::optional<std::string> { return std::to_string(unlocked_processes(d)); });
  const std::string lock_label = "{lock=" + prom_quote(path) + "}";
  family("offload_lock_waiters", "offload-lock processes waiting for the GPU lock.");
  out += "offload_lock_waiters" + lock_label + " " + std::to_string(b.waiters.size()) + "\n";
  family("offload_lock_oldest_wait_seconds", "How long the longest-waiting process has waited (0 when none waits).");
  milliseconds oldest{0};
  for (const auto& w : b.waiters) oldest = std::max(oldest, w.waited);
  out += "offload_lock_oldest_wait_seconds" + lock_label + " " + seconds_text(oldest) + "\n";
  return out;
}

// What a watcher of the board must see again: the holders and the queue,
// without the durations that change every second.
std::string shape_of(const board& b) {
  std::string s;
  for (const auto& i : b.slots)
    s += i.token + "|" + std::to_string(i.pid.value_or(0)) + "|" + (i.held ? "h" : i.present ? "s" : "f") + "|" +
         (i.yield_requested ? std::to_string(i.yield_requested->pid) : "") + ";";
  for (const auto& w : b.waiters) s += std::to_string(w.pid) + "@" + std::to_string(w.since) + ";";
  for (const auto& d : b.devices)
    if (d)
      for (const auto& p : d->processes)
        s += "gpu" + std::to_string(d->index) + ":" + std::to_string(p.pid) + (p.holds_lock ? "+;" : "-;");
  return s;
}

}  // namespace

int watch_status(const args& a, const gpu_plan& gpus, const std::string& path) {
  const int signals = os::catch_signals();
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
  for (;;) {
    const bool dirs_watched = feed.arm_directories();
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
    auto armed = feed.arm_processes(pids);
    if (armed == change_watch::processes::gone) continue;  // one died since the look
    if (!dirs_watched || armed == change_watch::processes::unwatched) timeout = std::min<std::int64_t>(timeout, 1000);
    if (!feed.wait(milliseconds(timeout), {signals}) && os::take_signal() != 0) break;
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
    std::cout << prometheus(b, a, path);
    return exit_ok;
  }
  if (a.json) std::cout << dump(board_json(b, a)) << "\n";
  else std::cout << render(b, a) << printable("lock: " + path) << "\n";
  bool all_held = std::all_of(b.slots.begin(), b.slots.end(), [](const info& i) { return i.held; });
  return all_held ? exit_ok : exit_busy;
}

}  // namespace offload_lock::cli
