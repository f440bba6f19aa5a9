// The lock's history as text, JSON and Prometheus families. See
// history_view.hpp.
#include "cli/history_view.hpp"

#include <cstdio>
#include <ctime>
#include <mutex>

#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

std::string dur(std::int64_t ms) { return describe_duration(milliseconds(ms < 0 ? 0 : ms)); }

// "render (pid 4242, alice)": the entry's subject. A takeover's subject is
// the dead holder, whose user is the owner of its lock directory.
std::string who(const history_entry& e) {
  std::string s = e.label.empty() ? std::string("an unnamed process") : e.label;
  s += " (pid " + std::to_string(e.pid);
  if (e.outcome == "crashed") {
    if (e.holder_uid) s += ", " + user_of(*e.holder_uid);
  } else {
    s += ", " + user_of(e.uid);
  }
  return s + ")";
}

}  // namespace

std::string user_of(std::uint32_t uid) { return os::user_name(uid).value_or("uid " + std::to_string(uid)); }

std::string local_time(std::int64_t epoch_ms) {
  const std::time_t t = static_cast<std::time_t>(epoch_ms / 1000);
  char buf[32] = "?";
  std::tm tm {};
  if (::localtime_r(&t, &tm)) (void)std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string entry_text(const history_entry& e, bool slots) {
  std::string s;
  if (slots) s += e.gpu >= 0 ? "gpu" + std::to_string(e.gpu) + ": " : "any gpu: ";
  const std::string subject = who(e);
  if (e.event == "acquire") {
    if (e.outcome == "acquired") s += subject + " acquired it after waiting " + dur(e.waited_ms);
    else if (e.outcome == "timed-out") s += subject + " gave up waiting after " + dur(e.waited_ms) + " (timed out)";
    else if (e.outcome == "cancelled") s += subject + " stopped waiting after " + dur(e.waited_ms) + " (cancelled)";
    else s += subject + " ended a wait: " + e.outcome;
  } else if (e.event == "hold") {
    const std::string held = e.held_ms >= 0 ? " after " + dur(e.held_ms) : std::string();
    if (e.outcome == "released" && e.by.empty()) s += subject + " released it" + held;
    else if (e.outcome == "released")
      s += subject + " was released" + held + " by " + user_of(e.uid) + " (release by " + e.by + ")";
    else if (e.outcome == "lost") s += subject + " lost it" + held + ": someone else removed or replaced the lock";
    else if (e.outcome == "max-hold") s += subject + " released it" + held + ", past its maximum hold";
    else if (e.outcome == "crashed")
      s += subject + " was gone" + (e.held_ms >= 0 ? " after ~" + dur(e.held_ms) : std::string()) + "; " +
           user_of(e.uid) + " took the lock over (" + (e.reason.empty() ? std::string("stale") : e.reason) + ")";
    else s += subject + " ended a hold: " + e.outcome + held;
    if (e.yield_asked) s += "; it had been asked to make way";
  } else if (e.event == "yield-asked" && (e.reason == "idle" || e.reason == "max hold") && e.other_pid == 0) {
    s += subject + " was asked to make way: " + (e.reason == "idle" ? "its GPU showed it idle" : "its maximum hold passed");
  } else if (e.event == "yield-asked") {
    s += subject + " was asked to make way for " + (e.other_label.empty() ? std::string("a waiter") : e.other_label) +
         " (pid " + std::to_string(e.other_pid) + ", priority " + std::to_string(e.other_priority) + ")" +
         (e.reason == "idle" ? ": its GPU showed it idle" : e.reason == "max hold" ? ": its maximum hold passed" : "");
  } else if (e.event == "idle") {
    s += subject + (e.outcome == "busy" ? ": its GPU shows it working again" : ": its GPU shows it idle") +
         (e.held_ms >= 0 ? " (held " + dur(e.held_ms) + ")" : std::string());
  } else if (e.event == "passed-over") {
    s += subject + " passed over pid " + std::to_string(e.other_pid) + ", which left the lock unclaimed ahead of it";
  } else {
    s += subject + ": " + e.event + (e.outcome.empty() ? std::string() : " " + e.outcome);
  }
  return printable(s);
}

ojson entry_json(const history_entry& e) {
  ojson j;
  j["at"] = e.at;
  j["uid"] = e.uid;
  j["event"] = e.event;
  j["outcome"] = e.outcome.empty() ? ojson() : ojson(e.outcome);
  j["pid"] = e.pid;
  j["label"] = e.label;
  j["host"] = e.host.empty() ? ojson() : ojson(e.host);
  j["gpu"] = e.gpu >= 0 ? ojson(e.gpu) : ojson();
  j["priority"] = e.priority;
  j["token"] = e.token.empty() ? ojson() : ojson(e.token);
  j["since"] = e.since > 0 ? ojson(e.since) : ojson();
  j["waitedMs"] = e.waited_ms >= 0 ? ojson(e.waited_ms) : ojson();
  j["heldMs"] = e.held_ms >= 0 ? ojson(e.held_ms) : ojson();
  j["expectMs"] = e.expect_ms > 0 ? ojson(e.expect_ms) : ojson();
  j["reason"] = e.reason.empty() ? ojson() : ojson(e.reason);
  j["by"] = e.by.empty() ? ojson() : ojson(e.by);
  if (e.other_pid != 0)
    j["other"] = {{"pid", e.other_pid}, {"label", e.other_label}, {"priority", e.other_priority}};
  else
    j["other"] = nullptr;
  j["holderUid"] = e.holder_uid ? ojson(*e.holder_uid) : ojson();
  j["yieldAsked"] = e.yield_asked;
  return j;
}

ojson usage_json(const usage_sums& u) {
  ojson j;
  if (!u.key.empty()) j["key"] = u.key;
  j["acquisitions"] = u.acquisitions();
  j["timedOut"] = usage_sums::count(u.waits, "timed-out");
  j["cancelled"] = usage_sums::count(u.waits, "cancelled");
  j["released"] = usage_sums::count(u.holds, "released");
  j["lost"] = usage_sums::count(u.holds, "lost");
  j["crashes"] = u.crashes();
  j["heldMs"] = u.held_total_ms() - u.held_now_ms;
  j["heldNowMs"] = u.held_now_ms;
  const auto waits = u.all_waits();
  j["waits"] = waits.size();
  auto q = [&](double p) { auto v = quantile(waits, p); return v ? ojson(*v) : ojson(); };
  j["waitP50Ms"] = q(0.5);
  j["waitP90Ms"] = q(0.9);
  j["waitMaxMs"] = waits.empty() ? ojson() : ojson(waits.back());
  return j;
}

ojson summary_json(const summary& s, const std::string& path, std::int64_t since_ms, const char* by) {
  ojson j;
  j["path"] = path;
  j["kept"] = s.read.kept;
  j["since"] = since_ms > 0 ? ojson(since_ms) : ojson();
  j["totals"] = usage_json(s.total);
  j["by"] = by ? ojson(by) : ojson();
  ojson groups = ojson::array();
  for (const auto& g : s.groups) groups.push_back(usage_json(g));
  j["groups"] = std::move(groups);
  ojson recent = ojson::array();
  for (const auto& e : s.recent) recent.push_back(entry_json(e));
  j["recent"] = std::move(recent);
  j["files"] = s.read.files;
  j["skipped"] = {{"malformed", s.read.malformed},
                  {"untrusted", s.read.untrusted},
                  {"foreignFiles", s.read.foreign_files},
                  {"unreadBytes", s.read.unread_bytes}};
  j["problem"] = s.read.problem.empty() ? ojson() : ojson(s.read.problem);
  return j;
}

namespace {

std::string seconds(std::int64_t ms) {
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ms) / 1000.0);
  return buf;
}

// Upper bounds of the wait histogram, in seconds: from a handoff to a
// working day.
constexpr double kWaitBuckets[] = {0.1, 1, 10, 60, 300, 1800, 3600, 14400};

}  // namespace

std::string history_metrics(const summary& s, const std::string& path) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  const std::string lock = "lock=" + prom_quote(path);
  auto labels = [&](const usage_sums& g, const std::string& outcome) {
    // The group key is "gpu<K>" or "any" (a wait among several slots).
    const std::string gpu = g.key.compare(0, 3, "gpu") == 0 ? g.key.substr(3) : g.key;
    return lock + ",gpu=" + prom_quote(gpu) + ",outcome=" + prom_quote(outcome);
  };
  family("offload_lock_history_kept", "gauge", "1 when the lock's history is kept (its directory exists), else 0.");
  out += "offload_lock_history_kept{" + lock + "} " + (s.read.kept ? "1" : "0") + "\n";
  family("offload_lock_acquisitions_total", "counter",
         "Waits for the GPU lock (slot) that ended, by outcome (acquired, timed-out, cancelled), from its history.");
  for (const auto& g : s.groups)
    for (const auto& [outcome, n] : g.waits) out += "offload_lock_acquisitions_total{" + labels(g, outcome) + "} " + std::to_string(n) + "\n";
  family("offload_lock_holds_total", "counter",
         "Holds of the GPU lock (slot) that ended, by outcome (released, max-hold, lost, crashed), from its history.");
  for (const auto& g : s.groups)
    for (const auto& [outcome, n] : g.holds) out += "offload_lock_holds_total{" + labels(g, outcome) + "} " + std::to_string(n) + "\n";
  family("offload_lock_held_seconds_total", "counter",
         "Time the GPU lock (slot) was held by holds that ended, by outcome, from its history.");
  for (const auto& g : s.groups)
    for (const auto& [outcome, n] : g.holds) {
      auto it = g.held_ms.find(outcome);
      out += "offload_lock_held_seconds_total{" + labels(g, outcome) + "} " +
             seconds(it == g.held_ms.end() ? 0 : it->second) + "\n";
    }
  family("offload_lock_wait_seconds", "histogram",
         "How long waits for the GPU lock (slot) lasted, by how they ended, from its history.");
  for (const auto& g : s.groups)
    for (const auto& [outcome, waits] : g.waited_ms) {
      const std::string l = labels(g, outcome);
      std::int64_t sum = 0;
      for (std::int64_t w : waits) sum += w;
      for (double le : kWaitBuckets) {
        std::size_t n = 0;
        for (std::int64_t w : waits) n += static_cast<double>(w) / 1000.0 <= le ? 1 : 0;
        char b[32];
        (void)std::snprintf(b, sizeof b, "%g", le);
        out += "offload_lock_wait_seconds_bucket{" + l + ",le=\"" + b + "\"} " + std::to_string(n) + "\n";
      }
      out += "offload_lock_wait_seconds_bucket{" + l + ",le=\"+Inf\"} " + std::to_string(waits.size()) + "\n";
      out += "offload_lock_wait_seconds_sum{" + l + "} " + seconds(sum) + "\n";
      out += "offload_lock_wait_seconds_count{" + l + "} " + std::to_string(waits.size()) + "\n";
    }
  family("offload_lock_history_skipped_lines", "gauge",
         "Lines of the lock's history left out: not an entry (malformed), or claiming another user (untrusted).");
  out += "offload_lock_history_skipped_lines{" + lock + ",reason=\"malformed\"} " + std::to_string(s.read.malformed) + "\n";
  out += "offload_lock_history_skipped_lines{" + lock + ",reason=\"untrusted\"} " + std::to_string(s.read.untrusted) + "\n";
  return out;
}

}  // namespace offload_lock::cli
