// `status --fleet` and the fleet line of status and doctor (fleet.hpp).
#include "cli/fleet.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

#include "cli/exit_codes.hpp"
#include "etcd/fleet.hpp"
#include "offload_lock/inspect.hpp"
#include "cli/history.hpp"

namespace offload_lock::cli {

namespace fl = detail::etcd::fleet;

namespace {

// One lock of one host: its holder (more than one only if a record lags
// behind a handoff) and its waiters in the order they are served.
struct host_lock {
  std::string host, path;
  int gpu = 0;
  std::vector<fl::entry> holders, waiters;
  std::string device;
};

std::vector<host_lock> group(const std::vector<fl::entry>& es) {
  std::map<std::pair<std::string, std::string>, host_lock> by;
  for (const auto& e : es) {
    host_lock& l = by[{e.host, e.path}];
    l.host = e.host;
    l.path = e.path;
    l.gpu = e.gpu;
    (e.holding ? l.holders : l.waiters).push_back(e);
    if (e.holding && !e.device.empty()) l.device = e.device;
  }
  std::vector<host_lock> out;
  for (auto& [k, l] : by) {
    std::stable_sort(l.waiters.begin(), l.waiters.end(), [](const fl::entry& x, const fl::entry& y) {
      return x.priority != y.priority ? x.priority > y.priority : x.since < y.since;
    });
    out.push_back(std::move(l));
  }
  return out;
}

milliseconds since(std::int64_t epoch_ms, std::int64_t now) { return milliseconds(std::max<std::int64_t>(0, now - epoch_ms)); }

// The holder's expected free time (nullopt: undeclared), and each waiter's
// ETA after it: the queue's rule (board.hpp).
std::optional<milliseconds> free_in(const fl::entry& h, std::int64_t now) {
  if (h.expect_ms <= 0) return std::nullopt;
  return std::max(milliseconds(0), milliseconds(h.expect_ms) - since(h.since, now));
}

std::vector<std::optional<milliseconds>> etas(const host_lock& l, std::int64_t now) {
  std::vector<std::optional<milliseconds>> out;
  std::optional<milliseconds> eta = l.holders.empty() ? std::optional<milliseconds>(milliseconds(0)) : free_in(l.holders.front(), now);
  for (const auto& w : l.waiters) {
    out.push_back(eta);
    if (eta) eta = w.expect_ms > 0 ? std::optional<milliseconds>(*eta + milliseconds(w.expect_ms)) : std::nullopt;
  }
  return out;
}

std::string holder_words(const fl::entry& e, std::int64_t now) {
  std::string s = (e.label.empty() ? std::string("an unnamed holder") : e.label) + " (pid " + std::to_string(e.pid) +
                  ") for " + describe_duration(since(e.since, now));
  if (auto f = free_in(e, now)) s += ", expected free in ~" + describe_duration(*f);
  return s;
}

std::string text(const std::vector<host_lock>& ls, const fl::view& v, std::int64_t now) {
  std::string out;
  std::size_t held = 0, waiting = 0;
  std::vector<std::string> hosts;
  for (const auto& l : ls) {
    if (std::find(hosts.begin(), hosts.end(), l.host) == hosts.end()) hosts.push_back(l.host);
    std::string line = l.host + ": " + l.path + (l.device.empty() ? "" : " (" + l.device + ")") + ": ";
    if (l.holders.empty()) line += "not held by a process that publishes (free, or a v1 runner's)";
    for (std::size_t k = 0; k < l.holders.size(); ++k) line += (k ? "; and " : "held by ") + holder_words(l.holders[k], now);
    out += printable(line) + "\n";
    held += l.holders.empty() ? 0 : 1;
    const auto e = etas(l, now);
    for (std::size_t k = 0; k < l.waiters.size(); ++k) {
      const auto& w = l.waiters[k];
      std::string wl = "  waiting: " + (w.label.empty() ? std::string("an unnamed process") : w.label) + " (pid " +
                       std::to_string(w.pid) + ") for " + describe_duration(since(w.since, now)) + ", #" +
                       std::to_string(k + 1);
      if (w.priority) wl += ", priority " + std::to_string(w.priority);
      if (e[k]) wl += ", ETA ~" + describe_duration(*e[k]);
      out += printable(wl) + "\n";
      ++waiting;
    }
  }
  out += printable("fleet: " + std::to_string(hosts.size()) + " host" + (hosts.size() == 1 ? "" : "s") + ", " +
                   std::to_string(held) + " lock" + (held == 1 ? "" : "s") + " held, " + std::to_string(waiting) +
                   " waiting (" + v.endpoints + ")" +
                   (v.unreadable ? "; " + std::to_string(v.unreadable) + " unreadable record(s) left out" : "")) +
         "\n";
  return out;
}

ojson entry_json(const fl::entry& e, std::int64_t now) {
  ojson j;
  j["pid"] = e.pid;
  j["label"] = e.label.empty() ? ojson() : ojson(e.label);
  j["since"] = e.since;
  j[e.holding ? "heldForMs" : "waitedMs"] = since(e.since, now).count();
  j["priority"] = e.priority;
  j["expectMs"] = e.expect_ms > 0 ? ojson(e.expect_ms) : ojson();
  if (e.holding) {
    const auto f = free_in(e, now);
    j["freeInMs"] = f ? ojson(f->count()) : ojson();
    j["maxHoldMs"] = e.max_hold_ms > 0 ? ojson(e.max_hold_ms) : ojson();
    j["token"] = e.token.empty() ? ojson() : ojson(e.token);
  }
  return j;
}

ojson as_json(const std::vector<host_lock>& ls, const fl::view& v, std::int64_t now) {
  ojson j;
  j["endpoints"] = v.endpoints;
  std::map<std::string, ojson> hosts;
  std::vector<std::string> order;
  for (const auto& l : ls) {
    if (!hosts.count(l.host)) {
      order.push_back(l.host);
      hosts[l.host] = ojson{{"host", l.host}, {"locks", ojson::array()}};
    }
    ojson lj;
    lj["path"] = l.path;
    lj["gpu"] = l.gpu;
    lj["device"] = l.device.empty() ? ojson() : ojson(l.device);
    lj["held"] = !l.holders.empty();
    lj["holder"] = l.holders.empty() ? ojson() : entry_json(l.holders.front(), now);
    ojson ws = ojson::array();
    const auto e = etas(l, now);
    for (std::size_t k = 0; k < l.waiters.size(); ++k) {
      ojson w = entry_json(l.waiters[k], now);
      w["position"] = k + 1;
      w["etaMs"] = e[k] ? ojson(e[k]->count()) : ojson();
      ws.push_back(std::move(w));
    }
    lj["waiters"] = std::move(ws);
    hosts[l.host]["locks"].push_back(std::move(lj));
  }
  ojson hs = ojson::array();
  for (const auto& h : order) hs.push_back(std::move(hosts[h]));
  j["hosts"] = std::move(hs);
  j["unreadable"] = v.unreadable;
  return j;
}

std::string prometheus(const std::vector<host_lock>& ls, std::int64_t now) {
  std::vector<std::string> hosts;
  for (const auto& l : ls)
    if (std::find(hosts.begin(), hosts.end(), l.host) == hosts.end()) hosts.push_back(l.host);
  std::string out =
      "# HELP offload_lock_fleet_hosts Hosts with a holder or a waiter published.\n"
      "# TYPE offload_lock_fleet_hosts gauge\n"
      "offload_lock_fleet_hosts " + std::to_string(hosts.size()) + "\n"
      "# HELP offload_lock_fleet_held Whether the lock is held by a process that publishes.\n"
      "# TYPE offload_lock_fleet_held gauge\n";
  auto labels = [](const host_lock& l) {
    return "host=" + prom_quote(l.host) + ",lock=" + prom_quote(l.path) + ",gpu=\"" + std::to_string(l.gpu) + "\"";
  };
  for (const auto& l : ls) out += "offload_lock_fleet_held{" + labels(l) + "} " + (l.holders.empty() ? "0" : "1") + "\n";
  out += "# HELP offload_lock_fleet_held_seconds How long the holder has held the lock.\n"
         "# TYPE offload_lock_fleet_held_seconds gauge\n";
  for (const auto& l : ls)
    if (!l.holders.empty())
      out += "offload_lock_fleet_held_seconds{" + labels(l) + ",label=" + prom_quote(l.holders.front().label) + "} " +
             std::to_string(static_cast<double>(since(l.holders.front().since, now).count()) / 1000.0) + "\n";
  out += "# HELP offload_lock_fleet_waiters Processes waiting for the lock.\n"
         "# TYPE offload_lock_fleet_waiters gauge\n";
  for (const auto& l : ls) out += "offload_lock_fleet_waiters{" + labels(l) + "} " + std::to_string(l.waiters.size()) + "\n";
  return out;
}

}  // namespace

int print_fleet(const args& a) {
  const auto conf = fl::configured();
  if (!conf) {
    say("status --fleet reads the fleet from " + std::string(fl::env_fleet) +
        "=etcd://HOST:PORT[,HOST:PORT...], which is not set");
    return exit_usage;
  }
  if (!*conf) {
    say(conf->error().context());
    return exit_usage;
  }
  const fl::view v = fl::read(conf->value());
  if (!v.problem.empty()) {
    if (a.json && !a.prometheus) std::cout << dump(ojson{{"endpoints", v.endpoints}, {"error", v.problem}}) << "\n";
    say(v.problem);
    return exit_system;
  }
  const std::int64_t now = now_epoch_ms();
  const auto ls = group(v.entries);
  if (a.prometheus) std::cout << prometheus(ls, now);
  else if (a.json) std::cout << dump(as_json(ls, v, now)) << "\n";
  else std::cout << text(ls, v, now);
  return exit_ok;
}

std::optional<fleet_note> fleet_freshness(const std::string& path) {
  const fl::freshness f = fl::check(path);
  if (!f.configured) return std::nullopt;
  return fleet_note{f.stale, f.endpoints, f.why};
}

ojson fleet_json(const fleet_note& n) {
  return ojson{{"endpoints", n.endpoints.empty() ? ojson() : ojson(n.endpoints)}, {"stale", n.stale}, {"why", n.why}};
}

}  // namespace offload_lock::cli
