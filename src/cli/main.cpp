// The offload-lock command: path, status, acquire, release, run, hold and
// wait-free over the library, with one fixed exit code per outcome
// (cli/exit_codes.hpp).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/escape.hpp"
#include "cli/exit_codes.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"
#include "posix/process.hpp"
#include "posix/sys.hpp"

namespace ol = offload_lock;
namespace proc = offload_lock::detail::proc;
using namespace offload_lock::cli;
using ojson = nlohmann::ordered_json;

namespace {

// Control characters (a newline in a path, escape sequences in a label
// read from someone's meta.json) are shown escaped, so every message stays
// one line and a terminal shows what is there instead of obeying it.
std::string printable(const std::string& s) {
  return escape_bytes(s, [](unsigned char c, std::string& out) {
    if (!is_control(c)) return false;
    if (c == '\n') out += "\\n";
    else append_hex_escape(out, c);
    return true;
  });
}

void say(const std::string& line) { proc::write_stderr("offload-lock: " + printable(line) + "\n"); }

std::string who(const ol::info& i) {
  std::string label = i.label.empty() ? "an unnamed holder" : i.label;
  std::string s = label + " (pid " + (i.pid ? std::to_string(*i.pid) : "unknown");
  if (!i.host.empty()) s += ", host " + i.host;
  return s + ")";
}

ojson to_json(const ol::info& i) {
  ojson j;
  j["path"] = i.path;
  j["held"] = i.held;
  auto opt = [&](const char* key, const std::string& v) { j[key] = v.empty() ? ojson() : ojson(v); };
  j["pid"] = i.pid ? ojson(*i.pid) : ojson();
  j["startedAt"] = i.started_at ? ojson(*i.started_at) : ojson();
  j["heldForMs"] = i.held ? ojson(i.held_for.count()) : ojson();
  opt("label", i.label);
  opt("host", i.host);
  opt("token", i.token);
  j["stale"] = i.stale ? ojson(*i.stale) : ojson();
  j["ownerUid"] = i.owner_uid ? ojson(*i.owner_uid) : ojson();
  return j;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string status_line(const ol::info& i) {
  // A lock directory someone else owns (in a shared /tmp, another user's).
  std::string owner;
  if (i.owner_uid && *i.owner_uid != ol::detail::sys::effective_uid())
    owner = "; lock directory owned by uid " + std::to_string(*i.owner_uid);
  if (i.held) return printable("held by " + who(i) + " for " + ol::describe_duration(i.held_for) + owner);
  if (!i.present) return "free";
  return printable("free (stale lock of " + who(i) + ": " + i.stale.value_or("unknown") + owner + ")");
}

// ---- several GPUs ----

// Whether the command line asked for GPU slots at all.
bool slotted(const args& a) { return a.gpus > 1 || a.gpus_auto || a.gpu >= 0; }

// GPUs on this machine for --gpus auto: the NVIDIA driver's
// /proc/driver/nvidia/gpus entries, else the lines of `nvidia-smi -L`; 1
// when neither finds any.
int detect_gpus() {
  int n = 0;
  if (auto d = ol::detail::sys::open_dir(ol::detail::sys::cwd, "/proc/driver/nvidia/gpus", false, "")) {
    if (auto names = ol::detail::sys::list_dir(d->get(), "")) n = static_cast<int>(names->size());
  }
  if (n > 0) return std::min(n, ol::max_gpus);
  if (auto out = proc::read_command({"nvidia-smi", "-L"}, 1 << 20, 10'000)) {
    std::stringstream lines(*out);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("GPU ", 0) == 0) ++n;
  }
  return n > 0 ? std::min(n, ol::max_gpus) : 1;
}

int slot_count(const args& a) { return a.gpus_auto ? detect_gpus() : a.gpus; }

// The CUDA device of slot k: the k-th entry of an inherited
// CUDA_VISIBLE_DEVICES list when there is one, else k.
std::string cuda_device(int k) {
  auto v = ol::detail::sys::get_env("CUDA_VISIBLE_DEVICES");
  if (v && !v->empty()) {
    std::vector<std::string> items;
    std::stringstream ss(*v);
    for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
    if (k < static_cast<int>(items.size())) return items[static_cast<std::size_t>(k)];
  }
  return std::to_string(k);
}

// Exit code and message for a failed acquisition.
int acquire_failed(const ol::error& e, const args& a, const std::string& path, int busy_code) {
  if (e == ol::errc::busy || e == ol::errc::timed_out) {
    if (!a.quiet) {
      const std::string how = e == ol::errc::busy ? "busy: " : "timed out: ";
      if (slotted(a) && a.gpu < 0 && slot_count(a) > 1) {
        say(how + "all " + std::to_string(slot_count(a)) + " GPU slots of " + path + " are held");
      } else {
        const std::string p = a.gpu > 0 ? ol::gpu_slot_path(path, a.gpu) : path;
        say(how + p + " is " + status_line(ol::inspect(p, a.ttl)));
      }
    }
    return busy_code;
  }
  say(e.message());
  return exit_code_for(e);
}

// ---- while waiting ----

std::string holders_text(const std::vector<ol::info>& hs) {
  if (hs.size() == 1) {
    const ol::info& i = hs[0];
    return who(i) + ", held for " + ol::describe_duration(i.held_for);
  }
  std::string s = "any of " + std::to_string(hs.size()) + " GPUs:";
  for (std::size_t k = 0; k < hs.size(); ++k)
    s += std::string(k ? ";" : "") + " gpu" + std::to_string(k) + " " + who(hs[k]) + " " +
         ol::describe_duration(hs[k].held_for);
  return s;
}

bool g_status_line = false;  // a status line is on the terminal now

// Ends the in-place status line, if one is shown, before anything else is
// written to stderr.
void end_status_line() {
  if (g_status_line) proc::write_stderr("\r\x1b[K");
  g_status_line = false;
}

ol::lock_options options_for(const args& a, const std::string& path) {
  ol::lock_options o;
  o.path = path;
  o.wait = a.wait.value_or(ol::wait_forever);
  o.ttl = a.ttl;
  o.label = a.label;
  if (slotted(a)) {
    o.gpus = slot_count(a);
    o.gpu = a.gpu;
    if (o.gpu >= o.gpus) o.gpus = 1;  // --gpu K alone (or beyond what auto found): slot K only
  }
  if (a.quiet) return o;
  const int width = proc::terminal_width(2);
  if (width > 0) {
    // A terminal: one line, rewritten in place every second.
    o.progress_every = std::chrono::seconds(1);
    o.on_progress = [width](const ol::wait_progress& p) {
      std::string line = "offload-lock: waiting " + ol::describe_duration(p.waited) + " for " + holders_text(p.holders);
      if (static_cast<int>(line.size()) >= width) line.resize(static_cast<std::size_t>(std::max(1, width - 1)));
      proc::write_stderr("\r\x1b[K" + line);
      g_status_line = true;
    };
  } else {
    // A log: a line when the holder changes, and a reminder now and then.
    o.progress_every = a.remind == std::chrono::milliseconds::max() ? std::chrono::milliseconds(0) : a.remind;
    o.on_progress = [](const ol::wait_progress& p) {
      if (p.changed) say("waiting for " + holders_text(p.holders));
      else say("still waiting for " + holders_text(p.holders) + "; waited " + ol::describe_duration(p.waited));
    };
  }
  return o;
}

// ---- status ----

struct board {
  std::vector<ol::info> slots;
  std::vector<ol::waiter> waiters;
  std::string problem;
  bool multi = false;
};

// Slots that exist next to the lock at `path` (path.gpu<k>), and slot 0.
int discover_slots(const std::string& path) {
  std::string parent, name;
  ol::detail::sys::split_path(path, parent, name);
  auto d = ol::detail::sys::open_dir(ol::detail::sys::cwd, parent, false, parent);
  if (!d) return 1;
  auto names = ol::detail::sys::list_dir(d->get(), parent);
  if (!names) return 1;
  int n = 1;
  const std::string prefix = name + ".gpu";
  for (const auto& e : *names) {
    if (e.size() <= prefix.size() || e.compare(0, prefix.size(), prefix) != 0) continue;
    std::string k = e.substr(prefix.size());
    if (k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos || k[0] == '0') continue;
    n = std::max(n, std::min(ol::max_gpus, std::stoi(k) + 1));
  }
  return n;
}

board look(const args& a, const std::string& path) {
  board b;
  b.waiters = ol::waiters(path);
  int n = slot_count(a);
  if (!slotted(a)) {
    n = discover_slots(path);
    for (const auto& w : b.waiters) n = std::max({n, w.gpus, w.gpu + 1});
  }
  std::vector<int> shown;
  if (a.gpu >= 0) shown.push_back(a.gpu);
  else
    for (int k = 0; k < n; ++k) shown.push_back(k);
  b.multi = n > 1 || a.gpu > 0;
  for (int k : shown) {
    ol::info i = ol::inspect(ol::gpu_slot_path(path, k), a.ttl);
    if (!i.problem.empty() && b.problem.empty()) b.problem = i.problem;
    b.slots.push_back(std::move(i));
  }
  if (a.gpu >= 0)
    b.waiters.erase(std::remove_if(b.waiters.begin(), b.waiters.end(),
                                   [&](const ol::waiter& w) { return w.gpu >= 0 && w.gpu != a.gpu; }),
                    b.waiters.end());
  return b;
}

int slot_of(const args& a, std::size_t index) { return a.gpu >= 0 ? a.gpu : static_cast<int>(index); }

std::string waiter_line(const ol::waiter& w, bool multi) {
  std::string s = "waiting: " + (w.label.empty() ? std::string("an unnamed process") : w.label) + " (pid " +
                  std::to_string(w.pid);
  if (!w.host.empty()) s += ", host " + w.host;
  s += ") for " + ol::describe_duration(w.waited);
  if (w.gpu >= 0 && (multi || w.gpu > 0)) s += ", for gpu" + std::to_string(w.gpu);
  else if (w.gpus > 1) s += ", for any of " + std::to_string(w.gpus) + " GPUs";
  else if (multi) s += ", for gpu0";
  return s;
}

std::string render(const board& b, const args& a) {
  std::string out;
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    if (b.multi) out += "gpu" + std::to_string(slot_of(a, k)) + ": ";
    out += status_line(b.slots[k]) + "\n";
  }
  for (const auto& w : b.waiters) out += waiter_line(w, b.multi) + "\n";
  return out;
}

ojson waiter_json(const ol::waiter& w) {
  ojson j;
  j["pid"] = w.pid;
  j["label"] = w.label;
  j["host"] = w.host;
  j["since"] = w.since;
  j["waitedMs"] = w.waited.count();
  j["gpu"] = w.gpu >= 0 ? ojson(w.gpu) : ojson();
  j["gpus"] = w.gpus;
  return j;
}

ojson board_json(const board& b, const args& a) {
  ojson j = to_json(b.slots.front());
  j["gpu"] = slot_of(a, 0);
  ojson slots = ojson::array();
  for (std::size_t k = 0; k < b.slots.size(); ++k) {
    ojson s = to_json(b.slots[k]);
    s["gpu"] = slot_of(a, k);
    slots.push_back(std::move(s));
  }
  j["slots"] = std::move(slots);
  ojson ws = ojson::array();
  for (const auto& w : b.waiters) ws.push_back(waiter_json(w));
  j["waiters"] = std::move(ws);
  return j;
}

// A label value in the Prometheus text format.
std::string prom_quote(const std::string& v) {
  return "\"" +
         escape_bytes(v,
                      [](unsigned char c, std::string& out) {
                        if (c == '\\') out += "\\\\";
                        else if (c == '"') out += "\\\"";
                        else if (c == '\n') out += "\\n";
                        else return false;
                        return true;
                      }) +
         "\"";
}

std::string seconds_text(ol::milliseconds d) {
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
  const std::string lock_label = "{lock=" + prom_quote(path) + "}";
  family("offload_lock_waiters", "offload-lock processes waiting for the GPU lock.");
  out += "offload_lock_waiters" + lock_label + " " + std::to_string(b.waiters.size()) + "\n";
  family("offload_lock_oldest_wait_seconds", "How long the longest-waiting process has waited (0 when none waits).");
  ol::milliseconds oldest{0};
  for (const auto& w : b.waiters) oldest = std::max(oldest, w.waited);
  out += "offload_lock_oldest_wait_seconds" + lock_label + " " + seconds_text(oldest) + "\n";
  return out;
}

// What a watcher of the board must see again: the holders and the queue,
// without the durations that change every second.
std::string shape_of(const board& b) {
  std::string s;
  for (const auto& i : b.slots) s += i.token + "|" + std::to_string(i.pid.value_or(0)) + "|" + (i.held ? "h" : i.present ? "s" : "f") + ";";
  for (const auto& w : b.waiters) s += std::to_string(w.pid) + "@" + std::to_string(w.since) + ";";
  return s;
}

int cmd_status_watch(const args& a, const std::string& path) {
  const int signals = proc::catch_signals();
  const bool tty = proc::terminal_width(1) > 0;
  proc::change_feed feed;
  // Wake on the lock (or a slot) appearing, going or being replaced in its
  // parent, and a waiter registering or leaving; and below, on a holder or a
  // waiter dying.
  std::string parent, name;
  ol::detail::sys::split_path(path, parent, name);
  const std::vector<std::string> dirs = {parent, parent + "/." + name + ".waiters"};
  std::string last_shape, last_text;
  bool first = true;
  for (;;) {
    const bool dirs_watched = feed.arm_dirs(dirs);
    board b = look(a, path);
    std::string text = b.problem.empty() ? render(b, a) : "offload-lock: " + b.problem + "\n";
    const std::string shape = shape_of(b) + b.problem;
    if (tty) {
      if (text != last_text) std::cout << "\x1b[H\x1b[2J" << text << "(watching " << path << "; Ctrl-C ends)" << std::flush;
    } else if (first || shape != last_shape) {
      std::cout << (first ? "" : "\n") << text << std::flush;
    }
    first = false;
    last_text = text;
    last_shape = shape;
    std::vector<std::int64_t> pids;
    std::int64_t timeout = tty ? 1000 : 60'000;
    for (const auto& i : b.slots) {
      if (i.held && i.pid) pids.push_back(*i.pid);
      // A held lock turns stale at the TTL; a present, not-held one may be
      // an incomplete lock inside its grace.
      if (i.held) timeout = std::min<std::int64_t>(timeout, std::max<std::int64_t>(1, a.ttl.count() - i.age.count()));
      else if (i.present) timeout = std::min<std::int64_t>(timeout, 1000);
    }
    for (const auto& w : b.waiters) pids.push_back(w.pid);
    auto armed = feed.arm_pids(pids);
    if (armed == proc::change_feed::pids_armed::gone) continue;  // one died since the look
    if (!dirs_watched || armed == proc::change_feed::pids_armed::unwatched) timeout = std::min<std::int64_t>(timeout, 1000);
    if (!feed.wait(timeout, {signals})) {
      if (tty) std::cout << "\n" << std::flush;
      return exit_ok;
    }
  }
}

int cmd_path(const args& a) {
  ol::path_resolution r = ol::resolve_path(a.lock_path);
  if (a.json) {
    ojson j;
    j["path"] = r.path;
    j["rule"] = ol::to_string(r.rule);
    j["goPath"] = r.go_path;
    j["goDisagrees"] = r.go_disagrees();
    std::cout << dump(j) << "\n";
    return exit_ok;
  }
  std::cout << r.path << "\n";
  if (a.explain) {
    std::cout << "rule: " << ol::to_string(r.rule) << "\n";
    if (r.go_disagrees())
      std::cout << "go: " << r.go_path
                << " (Go readers resolve this other path: Go reads only $TMPDIR, not $TMP or $TEMP;"
                   " set TMPDIR or GPU_LOCK for both)\n";
    else
      std::cout << "go: same path\n";
  }
  return exit_ok;
}

int cmd_status(const args& a, const std::string& path) {
  if (a.watch) return cmd_status_watch(a, path);
  board b = look(a, path);
  if (!b.problem.empty()) {
    say(b.problem);
    return exit_system;
  }
  if (a.prometheus) {
    std::cout << prometheus(b, a, path);
    return exit_ok;
  }
  if (a.json) std::cout << dump(board_json(b, a)) << "\n";
  else std::cout << render(b, a);
  bool all_held = std::all_of(b.slots.begin(), b.slots.end(), [](const ol::info& i) { return i.held; });
  return all_held ? exit_ok : exit_busy;
}

// The lock path of the slot a lock holds.
std::string held_path(const std::string& path, const ol::lock& l) { return ol::gpu_slot_path(path, l.gpu()); }

ojson held_json(const args& a, const std::string& path, const ol::lock& l) {
  ojson j = to_json(ol::inspect(held_path(path, l), a.ttl));
  if (slotted(a)) j["gpu"] = l.gpu();
  return j;
}

int cmd_acquire(const args& a, const std::string& path) {
  ol::lock_options o = options_for(a, path);
  o.pid = a.pid ? a.pid : ol::detail::sys::parent_pid();
  // The keeper below refreshes the lock from another process.
  o.heartbeat = false;
  auto l = ol::lock::acquire(o);
  end_status_line();
  if (!l) return acquire_failed(l.err(), a, path, exit_busy);
  if (a.json) std::cout << dump(held_json(a, path, *l)) << std::endl;
  else if (slotted(a)) std::cout << l->token() << " " << l->gpu() << std::endl;
  else std::cout << l->token() << std::endl;
  if (l->inherited()) {
    // Started under this very lock (inside `offload-lock run`): nothing to keep.
    if (!a.quiet) say("passing through: " + held_path(path, *l) + " is held by the offload-lock run this process runs under");
    return exit_ok;
  }
  // A detached keeper keeps the lock fresh while the holder lives and
  // releases it when the holder exits.
  auto keeper = proc::fork_detached();
  if (keeper && *keeper) {
    (void)l->hold_for_holder();
    std::_Exit(0);
  }
  l->detach();
  return exit_ok;
}

int cmd_release(const args& a, const std::string& base) {
  std::string path = base;
  if (a.gpu >= 0) {
    path = ol::gpu_slot_path(base, a.gpu);
  } else if (slotted(a)) {
    // The slot this holder holds, among the N.
    if (a.force) {
      say("release --force with --gpus removes one slot: name it with --gpu K");
      return exit_usage;
    }
    const int n = slot_count(a);
    const std::int64_t pid = a.token.empty() ? (a.pid ? a.pid : ol::detail::sys::parent_pid()) : 0;
    bool found = false, any_held = false;
    for (int k = 0; k < n && !found; ++k) {
      ol::info i = ol::inspect(ol::gpu_slot_path(base, k), a.ttl);
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
  ol::release_request req;
  req.token = a.token;
  req.force = a.force;
  if (a.token.empty()) req.pid = a.pid ? a.pid : ol::detail::sys::parent_pid();
  // Inside `offload-lock run` a plain release leaves the enclosing run's lock
  // to the run (B11): its acquire passed through, so there is nothing of ours.
  auto inherited = ol::detail::sys::get_env("OFFLOAD_LOCK_TOKEN");
  if (a.token.empty() && !a.pid && !a.force && inherited && !inherited->empty() &&
      ol::inspect(path, a.ttl).token == *inherited) {
    if (!a.quiet) say("passing through: " + path + " belongs to the offload-lock run this process runs under; left for it");
    return exit_ok;
  }
  auto r = ol::release_lock(path, req, a.ttl);
  if (!r) {
    say(r.err().message());
    return exit_system;
  }
  const ol::info& i = r->before;
  switch (r->status) {
    case ol::release_status::released:
      if (a.force && !a.quiet) say("removed " + path + ", held by " + who(i));
      return exit_ok;
    case ol::release_status::already_free:
      if (i.present && !a.quiet) say("already free; a stale lock of " + who(i) + " remains for the next acquirer to reclaim");
      return exit_ok;
    case ol::release_status::not_owner:
      say(path + " is held by " + who(i) + ", not by " +
          (a.token.empty() ? "pid " + std::to_string(req.pid) : "token " + a.token) + "; left in place");
      return exit_not_owner;
  }
  return exit_system;
}

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// A wait abandoned by a signal ends like being killed by it.
int cancelled_exit(const args& a, const std::string& what) {
  int sig = proc::take_signal();
  if (!a.quiet) say(what + (sig ? " (" + proc::signal_name(sig) + ")" : ""));
  return sig ? 128 + sig : exit_busy;
}

int cmd_run(const args& a, const std::string& path) {
  // How many slots, before signals are caught: --gpus auto may run nvidia-smi.
  ol::lock_options o = options_for(a, path);
  // Signals are caught before anything else: one that arrives while waiting
  // abandons the wait; one that arrives once CMD runs is passed on to it.
  const int signals = proc::catch_signals();
  std::string token = ol::new_token();
  // CMD's environment names the slot it runs on, known once it is taken.
  std::vector<proc::gated_child::env_list> per_slot;
  const int slots = o.gpu >= 0 ? o.gpu + 1 : o.gpus;
  for (int k = 0; k < slots; ++k) {
    per_slot.push_back({{"OFFLOAD_LOCK_PATH", ol::gpu_slot_path(path, k)}});
    if (slotted(a)) per_slot.back().emplace_back("CUDA_VISIBLE_DEVICES", cuda_device(k));
  }
  auto child = proc::gated_child::fork_gated(a.cmd, {{"OFFLOAD_LOCK_TOKEN", token}}, per_slot);
  if (!child) {
    say(child.err().message());
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
  o.on_lost = [cmd_name, cmd_pid, term](const ol::error& e) {
    say("WARNING: the lock " + e.context() + " was removed or replaced by someone else while " + cmd_name +
        " runs; the GPU is no longer reserved for it" + (term ? "; sending it SIGTERM" : ""));
    if (term) proc::send_signal(cmd_pid, SIGTERM);
  };
  o.cancel_fds = {signals};
  auto l = ol::lock::acquire(o);
  end_status_line();
  if (!l) {
    // CMD, held back at the gate, was killed while we waited: it ends like
    // any CMD, with its own status.
    if (auto status = child->ended()) {
      child->reap();
      if (!a.quiet) say(a.cmd[0] + " ended before it could start (status " + std::to_string(*status) + ")");
      return *status;
    }
    child->abandon();
    if (l.err() == ol::errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.err(), a, path, a.busy_exit);
  }
  const std::string shown = held_path(path, *l);
  if (auto e = child->start(l->gpu())) {
    (void)l->release();
    if (child->ended_before_start() >= 0) return child->ended_before_start();
    say("cannot run " + a.cmd[0] + ": " + e.code().message());
    return e.code() == std::errc::no_such_file_or_directory ? 127 : 126;
  }
  int status = child->wait_forwarding();
  // Released while CMD is still an unreaped zombie, so no participant ever
  // sees this lock with a dead holder pid (a v1 runner would reclaim it).
  ol::error released = l->release();
  child->reap();
  if (released == ol::errc::lost && !a.quiet)
    say("the lock " + shown + " had been removed or replaced by someone else before " + cmd_name + " ended");
  return status;
}

int cmd_hold(const args& a, const std::string& path) {
  ol::lock_options o = options_for(a, path);
  o.on_lost = [](const ol::error& e) {
    say("WARNING: the lock " + e.context() + " was removed or replaced by someone else");
  };
  // Signals first (see cmd_run); and a hold whose requester is gone (its
  // stdin closed) gives up waiting instead of taking the lock for nobody.
  const int signals = proc::catch_signals();
  o.cancel_fds = {signals, 0};
  auto l = ol::lock::acquire(o);
  end_status_line();
  if (!l) {
    if (l.err() == ol::errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.err(), a, path, exit_busy);
  }
  std::cout << "acquired " << dump(held_json(a, path, *l)) << std::endl;
  const std::string slot_path = held_path(path, *l);
  proc::wait_for_eof_or_signal();
  const std::string token = l->token();  // release() empties the handle
  ol::error e = l->release();
  if (e == ol::errc::lost) {
    // Released by its token from elsewhere (compat/node does this) leaves
    // the path free: that is an ordinary end. Someone else's lock is not.
    ol::info now = ol::inspect(slot_path, a.ttl);
    if (now.held && now.token != token) {
      if (!a.quiet) say("the lock had been taken over by " + who(now));
      return exit_lost;
    }
    return exit_ok;
  }
  if (e) {
    say(e.message());
    return exit_system;
  }
  return exit_ok;
}

int cmd_wait_free(const args& a, const std::string& path) {
  ol::info i = ol::wait_free(path, a.wait.value_or(ol::wait_forever), a.poll, a.ttl);
  if (!i.problem.empty()) {
    say(i.problem);
    return exit_system;
  }
  if (a.json) std::cout << dump(to_json(i)) << "\n";
  return i.held ? exit_busy : exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argl(argv + 1, argv + argc);
  args a;
  if (auto e = parse(argl, a)) {
    say(*e);
    return exit_usage;
  }
  if (a.help) {
    std::cout << (a.command.empty() ? usage() : command_help(a.command));
    return exit_ok;
  }
  if (a.version) {
    std::cout << "offload-lock " << ol::version() << "\n";
    return exit_ok;
  }
  const std::string path = ol::resolve_path(a.lock_path).path;
  try {
    if (a.command == "path") return cmd_path(a);
    if (a.command == "status") return cmd_status(a, path);
    if (a.command == "acquire") return cmd_acquire(a, path);
    if (a.command == "release") return cmd_release(a, path);
    if (a.command == "run") return cmd_run(a, path);
    if (a.command == "hold") return cmd_hold(a, path);
    if (a.command == "wait-free") return cmd_wait_free(a, path);
  } catch (const std::exception& ex) {
    say(std::string("internal error: ") + ex.what());
    return exit_system;
  }
  say("unknown command '" + a.command + "'");
  return exit_usage;
}
