// The status board: one look at the lock and its forms. See board.hpp.
#include "cli/board.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>

#include "cli/devices.hpp"
#include "cli/lease_view.hpp"

namespace offload_lock::cli {

namespace {

// Each waiter's position and ETA, as the library gives them.
void place_waiters(board& b) {
  b.places.assign(b.waiters.size(), place{});
  for (std::size_t k = 0; k < b.waiters.size(); ++k) b.places[k] = {b.waiters[k].position, b.waiters[k].eta};
}

ojson ms_or_null(const std::optional<milliseconds>& d) { return d ? ojson(d->count()) : ojson(); }

}  // namespace

int slot_of(const args& a, std::size_t index) { return a.gpu >= 0 ? a.gpu : static_cast<int>(index); }

bool board::busy_by_lease(std::size_t k) const {
  return k < slots.size() && !slots[k].held && k < slot_numbers.size() && slot_numbers[k] == 0 &&
         lease_keeps_gpu(gpulease);
}

bool board::busy(std::size_t k) const { return (k < slots.size() && slots[k].held) || busy_by_lease(k); }

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
    const bool asked = k == 0 || a.gpu >= 0 || gpus.slotted;
    const bool counts = asked || (i.present && i.problem.empty());
    if (!i.problem.empty() && b.problem.empty() && asked) b.problem = i.problem;
    b.devices.push_back(device_of_slot(usage, k, i));
    b.slots.push_back(std::move(i));
    b.counts.push_back(counts);
    b.slot_numbers.push_back(k);
  }
  b.gpulease = look_lease_board();
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

board aged(board b, milliseconds elapsed) {
  const auto down = [&](milliseconds d) { return std::max(milliseconds(0), d - elapsed); };
  for (auto& i : b.slots) {
    if (!i.present) continue;
    i.held_for += elapsed;
    i.age += elapsed;
    if (i.expected_free_in) i.expected_free_in = down(*i.expected_free_in);
    if (i.max_hold_in) *i.max_hold_in -= elapsed;  // below 0 once passed
    if (i.idle_for) *i.idle_for += elapsed;
  }
  for (auto& w : b.waiters) {
    w.waited += elapsed;
    if (w.eta) w.eta = down(*w.eta);
  }
  for (auto& p : b.places)
    if (p.eta) p.eta = down(*p.eta);
  if (b.gpulease && b.gpulease->info.state == lease_state::held) b.gpulease->info.held_for += elapsed;
  return b;
}

std::string expectation(const info& i) {
  if (!i.held || i.expected.count() <= 0) return std::string();
  if (i.held_for > i.expected) return ", overdue by " + describe_duration(i.held_for - i.expected);
  return ", expected free in ~" + describe_duration(i.expected - i.held_for);
}

std::string max_hold_text(const info& i) {
  if (!i.held || !i.max_hold_in) return std::string();
  if (i.max_hold_in->count() <= 0) return ", max hold passed " + describe_duration(-*i.max_hold_in) + " ago";
  return ", max hold in " + describe_duration(*i.max_hold_in);
}

std::string idle_text(const info& i, milliseconds moved) {
  if (!i.held || !i.idle_for) return std::string();
  return ", idle for " + describe_duration(*i.idle_for + moved);
}

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
    // The lock is free but a gpulease holder has the GPU: that is what
    // this line answers, as the exit status does.
    if (b.busy_by_lease(k)) out += lease_busy_line(*b.gpulease, status_line(b.slots[k])) + "\n";
    else
      out += status_line(b.slots[k]) + expectation(b.slots[k]) + max_hold_text(b.slots[k]) +
             idle_text(b.slots[k], milliseconds(0)) + yield_text(b.slots[k]) + "\n";
    if (b.devices[k]) out += device_text(*b.devices[k]);
  }
  // A waiter's label and host are its own words: escaped like the holder's.
  for (std::size_t k = 0; k < b.waiters.size(); ++k)
    out += printable(waiter_line(b.waiters[k], b.places[k], b.multi)) + "\n";
  return out;
}

namespace {

// The holder's declared duration and expected free time (null when unknown,
// 0 when overdue or free).
void add_expectation(ojson& j, const info& i) {
  j["priority"] = i.held ? ojson(i.priority) : ojson();
  j["expectMs"] = i.held && i.expected.count() > 0 ? ojson(i.expected.count()) : ojson();
  j["freeInMs"] = i.held ? ms_or_null(i.expected_free_in) : ojson(0);
  // The maximum hold and what is left of it (below 0 once passed).
  j["maxHoldMs"] = i.held && i.max_hold.count() > 0 ? ojson(i.max_hold.count()) : ojson();
  j["maxHoldInMs"] = i.held ? ms_or_null(i.max_hold_in) : ojson();
  // Idle by the site policy's rule: since when (epoch ms), and for how long.
  const bool idle = i.held && i.idle_since && i.idle_for;
  j["idleSince"] = idle ? ojson(*i.idle_since) : ojson();
  j["idleForMs"] = idle ? ojson(i.idle_for->count()) : ojson();
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

// Whether the GPU of slot `k` is busy, and by what: "lock", "gpulease"
// (its lock is free, but the gpulease lease keeps it), or null.
void add_busy(ojson& j, const board& b, std::size_t k) {
  j["busy"] = b.busy(k);
  j["busyBy"] = b.slots[k].held ? ojson("lock") : b.busy_by_lease(k) ? ojson("gpulease") : ojson();
}

}  // namespace

ojson board_json(const board& b, const args& a) {
  ojson j = to_json(b.slots.front());
  add_busy(j, b, 0);
  j["gpu"] = slot_of(a, 0);
  j["device"] = device_json(b.devices.front());
  add_expectation(j, b.slots.front());
  ojson slots = ojson::array();
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    ojson s = to_json(b.slots[k]);
    add_busy(s, b, k);
    s["gpu"] = slot_of(a, k);
    s["device"] = device_json(b.devices[k]);
    add_expectation(s, b.slots[k]);
    slots.push_back(std::move(s));
  }
  j["slots"] = std::move(slots);
  ojson ws = ojson::array();
  for (std::size_t k = 0; k < b.waiters.size(); ++k) ws.push_back(waiter_json(b.waiters[k], b.places[k]));
  j["waiters"] = std::move(ws);
  // The gpulease lease of current upstream runners (null where no root
  // exists): in every view of the object, status, --watch and serve alike.
  j["gpulease"] = lease_json(b.gpulease);
  return j;
}

namespace {

std::string seconds_text(milliseconds d) {
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

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
  family("offload_lock_busy",
         "1 when the GPU of the lock (slot) is taken: its lock is held, or the gpulease lease that goes with it.");
  for (std::size_t k = 0; k < b.slots.size(); ++k) out += "offload_lock_busy" + labels(k) + (b.busy(k) ? " 1\n" : " 0\n");
  family("offload_lock_holder_idle", "1 when the holder's GPU has shown it idle for the site policy's idleAfter, else 0.");
  for (std::size_t k = 0; k < b.slots.size(); ++k)
    if (b.slots[k].held) out += "offload_lock_holder_idle" + labels(k) + (b.slots[k].idle_since ? " 1\n" : " 0\n");
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

std::string shape_of(const board& b) {
  std::string s;
  for (const auto& i : b.slots)
    s += i.token + "|" + std::to_string(i.pid.value_or(0)) + "|" + (i.held ? "h" : i.present ? "s" : "f") + "|" +
         (i.yield_requested ? std::to_string(i.yield_requested->pid) : "") + "|" +
         (i.idle_since ? std::to_string(*i.idle_since) : "") + ";";
  for (const auto& w : b.waiters) s += std::to_string(w.pid) + "@" + std::to_string(w.since) + ";";
  if (b.gpulease) {
    const lease_info& l = b.gpulease->info;
    s += std::string("lease:") + to_string(l.state) + "|" + std::to_string(l.pid) + "|" + std::to_string(l.epoch) + ";";
  }
  for (const auto& d : b.devices)
    if (d)
      for (const auto& p : d->processes)
        s += "gpu" + std::to_string(d->index) + ":" + std::to_string(p.pid) + (p.holds_lock ? "+;" : "-;");
  return s;
}

}  // namespace offload_lock::cli
