// The site policy (offload_lock/policy.hpp): read and trusted once per
// acquisition, applied to its options before the plan is made (plan.cpp).
#include "offload_lock/policy.hpp"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "lock_dir.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/path.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "plan.hpp"
#include "policy.hpp"

namespace offload_lock {

namespace detail {

namespace {

// The policy file's name is the lock's with this added.
constexpr const char* policy_suffix = ".policy.json";

// Far larger than any policy a site writes; a bigger file is invalid.
constexpr std::size_t policy_cap = std::size_t{64} * 1024;

std::string octal(std::uint32_t mode) {
  char buf[8];
  (void)std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

using json = nlohmann::json;

// The parse of a trusted file: its settings, or why it is invalid.
struct parsed {
  site_rules rules;
  std::string invalid;
};

std::optional<int> priority_value(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const auto n = v.get<std::int64_t>();
  if (n < lowest_priority || n > highest_priority) return std::nullopt;
  return static_cast<int>(n);
}

std::optional<std::int64_t> duration_value(const json& v) {
  if (!v.is_string()) return std::nullopt;
  auto d = parse_duration(v.get<std::string>());
  if (!d || d->count() <= 0) return std::nullopt;
  return d->count();
}

parsed parse_rules(const std::string& bytes) {
  parsed out;
  const json j = json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    out.invalid = "not a JSON object";
    return out;
  }
  const std::string range = " (an integer from " + std::to_string(lowest_priority) + " to " +
                            std::to_string(highest_priority) + ")";
  auto names = [&](const std::string& key, const json& v, std::map<std::string, int>& into) {
    if (!v.is_object()) return key + " is not an object of names and priorities";
    for (auto it = v.begin(); it != v.end(); ++it) {
      auto p = priority_value(it.value());
      if (!p) return key + "." + it.key() + " is not a priority" + range;
      into[it.key()] = *p;
    }
    return std::string();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    std::string why;
    if (k == "maxPriority") {
      out.rules.max_priority = priority_value(v);
      if (!out.rules.max_priority) why = k + " is not a priority" + range;
    } else if (k == "userMaxPriority") {
      why = names(k, v, out.rules.user_max);
    } else if (k == "groupMaxPriority") {
      why = names(k, v, out.rules.group_max);
    } else if (k == "idlePercent") {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 100)
        why = k + " is not a percentage (an integer from 0 to 100)";
      else
        out.rules.idle_percent = v.get<int>();
    } else if (k == "idleYield") {
      if (!v.is_boolean()) why = k + " is not true or false";
      else out.rules.idle_yield = v.get<bool>();
    } else if (k == "defaultMaxHold" || k == "maxHold" || k == "defaultExpect" || k == "idleAfter") {
      auto d = duration_value(v);
      if (!d) why = k + " is not a duration above 0 (a string such as \"2h\" or \"1h30m\")";
      else if (k == "defaultMaxHold") out.rules.default_max_hold_ms = *d;
      else if (k == "maxHold") out.rules.max_hold_ms = *d;
      else if (k == "idleAfter") out.rules.idle_after_ms = *d;
      else out.rules.default_expect_ms = *d;
    } else {
      why = "unknown key \"" + k + "\"";
    }
    if (!why.empty()) {
      out.invalid = why;
      return out;
    }
  }
  if (out.rules.default_max_hold_ms > 0 && out.rules.max_hold_ms > 0 &&
      out.rules.default_max_hold_ms > out.rules.max_hold_ms)
    out.invalid = "defaultMaxHold is longer than maxHold";
  else if (out.rules.idle_after_ms == 0 && out.rules.idle_yield)
    out.invalid = "idleYield is set without idleAfter";
  return out;
}

std::string summary_of(const site_rules& r) {
  std::vector<std::string> parts;
  if (r.max_priority) parts.push_back("priority at most " + std::to_string(*r.max_priority));
  for (const auto& [n, p] : r.user_max) parts.push_back("user " + n + " at most " + std::to_string(p));
  for (const auto& [n, p] : r.group_max) parts.push_back("group " + n + " at most " + std::to_string(p));
  if (r.default_max_hold_ms > 0)
    parts.push_back("maximum hold " + describe_duration(milliseconds(r.default_max_hold_ms)) + " by default");
  if (r.max_hold_ms > 0) parts.push_back("maximum hold at most " + describe_duration(milliseconds(r.max_hold_ms)));
  if (r.default_expect_ms > 0)
    parts.push_back("expected " + describe_duration(milliseconds(r.default_expect_ms)) + " by default");
  if (r.idle_after_ms > 0)
    parts.push_back("idle after " + describe_duration(milliseconds(r.idle_after_ms)) + " at most " +
                    std::to_string(r.idle_percent) + "% busy" + (r.idle_yield ? ", then asked to yield" : ""));
  if (parts.empty()) return "sets nothing";
  std::string s;
  for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

}  // namespace

std::string policy_path_of(const std::string& lock_path) { return lock_path + policy_suffix; }

site_policy_look look_at_policy(const std::string& lock_path) {
  site_policy_look out;
  out.report.path = policy_path_of(lock_path);
  const std::string& shown = out.report.path;
  // Opened by its whole path: most locks have no policy, and every
  // acquisition looks, so the common answer (none) costs one call. The
  // directory is opened only to judge a policy that is there.
  auto f = sys::open_read(sys::cwd, shown, shown);
  if (!f && f.error().code() == std::errc::no_such_file_or_directory) return out;
  auto t = open_target(lock_path);
  // No parent to look in: no policy (the acquisition says what is wrong).
  if (!t) return out;
  if (!f) {
    out.report.state = policy_state::ignored;
    out.report.reason = "cannot be read by this user (" + f.error().code().message() +
                        "): not applied to its acquisitions; make it readable by all (0644)";
    return out;
  }
  auto pst = sys::stat_fd(t->parent.get(), "the directory of " + lock_path);
  auto mb = sys::read_fd(f->get(), policy_cap, shown);
  if (!pst || !mb) {
    out.report.state = policy_state::ignored;
    out.report.reason = "cannot be read by this user (" + (mb ? pst.error() : mb.error()).message() + ")";
    return out;
  }
  const sys::stat_info& st = mb->st;
  auto ignored = [&](const std::string& why) {
    out.report.state = policy_state::ignored;
    out.report.reason = why;
    return out;
  };
  if (!st.is_regular) return ignored("not a regular file");
  if (st.uid != 0 && st.uid != pst->uid)
    return ignored("owned by uid " + std::to_string(st.uid) + ", neither root nor the owner of the lock's directory (uid " +
                   std::to_string(pst->uid) + ")");
  if (st.mode & 022) return ignored("writable by others than its owner (mode " + octal(st.mode) + ")");
  if (st.nlink != 1) return ignored("has " + std::to_string(st.nlink) + " hard links (a policy has one)");
  if (mb->truncated) {
    out.report.state = policy_state::invalid;
    out.report.reason = "larger than " + std::to_string(policy_cap / 1024) + " KiB";
    return out;
  }
  parsed p = parse_rules(mb->bytes);
  if (!p.invalid.empty()) {
    out.report.state = policy_state::invalid;
    out.report.reason = p.invalid;
    return out;
  }
  out.report.state = policy_state::honoured;
  out.report.summary = summary_of(p.rules);
  out.rules = std::move(p.rules);
  return out;
}

result<lock_options> apply_policy(const lock_options& o, const std::string& base, std::vector<std::string>* notices,
                                  site_rules* rules) {
  const site_policy_look look = look_at_policy(base);
  if (look.report.state == policy_state::invalid)
    return error(errc::bad_input, "site policy " + look.report.path + ": " + look.report.reason);
  if (look.report.state != policy_state::honoured) return o;
  const site_rules& r = look.rules;
  if (rules) *rules = r;
  const std::string from = " (site policy " + look.report.path + ")";
  auto say = [&](const std::string& s) {
    if (notices) notices->push_back(s + from);
  };
  lock_options e = o;

  // The cap: the highest of the user's and its groups' named caps, else the
  // one for everyone.
  std::optional<int> cap;
  std::string whose;
  if (auto user = sys::effective_user_name()) {
    if (auto it = r.user_max.find(*user); it != r.user_max.end()) {
      cap = it->second;
      whose = "user " + *user;
    }
  }
  for (const auto& g : sys::group_names())
    if (auto it = r.group_max.find(g); it != r.group_max.end() && (!cap || it->second > *cap)) {
      cap = it->second;
      whose = "group " + g;
    }
  if (!cap && r.max_priority) {
    cap = r.max_priority;
    whose = "everyone";
  }
  if (cap && e.priority > *cap) {
    say("priority " + std::to_string(e.priority) + " is above the " + std::to_string(*cap) + " allowed to " + whose +
        "; waiting at " + std::to_string(*cap));
    e.priority = *cap;
  }

  if (e.max_hold.count() == 0 && r.default_max_hold_ms > 0) {
    e.max_hold = milliseconds(r.default_max_hold_ms);
    say("maximum hold " + describe_duration(e.max_hold) + ", the site's default");
  }
  if (r.max_hold_ms > 0 && (e.max_hold.count() == 0 || e.max_hold.count() > r.max_hold_ms)) {
    say((e.max_hold.count() == 0 ? std::string("no maximum hold asked")
                                 : "maximum hold " + describe_duration(e.max_hold)) +
        "; the site allows at most " + describe_duration(milliseconds(r.max_hold_ms)));
    e.max_hold = milliseconds(r.max_hold_ms);
  }
  if (e.expected.count() == 0 && r.default_expect_ms > 0) e.expected = milliseconds(r.default_expect_ms);
  return e;
}

}  // namespace detail

policy_report site_policy(const std::string& lock_path) {
  return detail::look_at_policy(lock_path.empty() ? resolve_path().path : lock_path).report;
}

result<lock_options> with_site_policy(const lock_options& o, std::vector<std::string>* notices) {
  return detail::apply_policy(o, o.path.empty() ? resolve_path().path : o.path, notices);
}

}  // namespace offload_lock
