// Records of etcd lock keys (record.hpp).
#include "etcd/record.hpp"

#include <nlohmann/json.hpp>

#include "token.hpp"

namespace offload_lock::detail::etcd {

using json = nlohmann::json;

namespace {

// Ten years, in ms: the longest duration the command's grammar accepts.
constexpr std::int64_t max_duration_ms = 10LL * 366 * 24 * 3600 * 1000;
// Epoch ms of the year 3000: a later time is no time a process recorded.
constexpr std::int64_t max_epoch_ms = 32503680000000LL;

struct reader {
  const json& j;
  std::string problem;

  void number(const char* name, std::int64_t& out, std::int64_t lo, std::int64_t hi) {
    if (!problem.empty()) return;
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number_integer()) {
      problem = std::string(name) + " is not an integer";
      return;
    }
    // An unsigned above INT64_MAX is out of range too.
    if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
      problem = std::string(name) + " out of range";
      return;
    }
    const std::int64_t v = it->get<std::int64_t>();
    if (v < lo || v > hi) {
      problem = std::string(name) + " out of range";
      return;
    }
    out = v;
  }
  void text(const char* name, std::string& out, std::size_t cap) {
    if (!problem.empty()) return;
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_string()) {
      problem = std::string(name) + " is not a string";
      return;
    }
    const auto& s = it->get_ref<const std::string&>();
    if (s.size() > cap) {
      problem = std::string(name) + " longer than " + std::to_string(cap) + " bytes";
      return;
    }
    out = s;
  }
  void flag(const char* name, bool& out) {
    if (!problem.empty()) return;
    auto it = j.find(name);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_boolean()) {
      problem = std::string(name) + " is not true or false";
      return;
    }
    out = it->get<bool>();
  }
};

}  // namespace

std::string encode(const record& r) {
  // The pid and the start first, in the order meta.json has them.
  nlohmann::ordered_json j;
  j["pid"] = r.pid;
  j["startedAt"] = r.since;
  j["label"] = r.label;
  j["host"] = r.host;
  if (!r.token.empty()) j["token"] = r.token;
  j["priority"] = r.priority;
  if (r.expect_ms > 0) j["expectMs"] = r.expect_ms;
  if (r.max_hold_ms > 0) j["maxHoldMs"] = r.max_hold_ms;
  if (r.can_yield) j["canYield"] = true;
  j["tool"] = r.tool;
  if (r.proc_ticks > 0) {
    j["bootId"] = r.boot_id;
    j["pidNs"] = r.pid_ns;
    j["timeNs"] = r.time_ns;
    j["procTicks"] = r.proc_ticks;
    if (r.keeper_ticks > 0) {
      j["keeperPid"] = r.keeper_pid;
      j["keeperTicks"] = r.keeper_ticks;
    }
  }
  // Labels are the caller's bytes: invalid UTF-8 is replaced rather than
  // made a JSON error.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

record decode(std::string_view value) {
  record r;
  if (value.size() > max_record_bytes) {
    r.problem = "a value of " + std::to_string(value.size()) + " bytes (at most " + std::to_string(max_record_bytes) + ")";
    return r;
  }
  // Depth-limited by the size above; invalid UTF-8 is a parse error.
  json j = json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    r.problem = "not a JSON object";
    return r;
  }
  reader rd{j, {}};
  rd.number("pid", r.pid, 0, 2147483647);
  rd.number("startedAt", r.since, 0, max_epoch_ms);
  rd.text("label", r.label, max_label_bytes);
  rd.text("host", r.host, 255);
  rd.text("token", r.token, 128);
  std::int64_t priority = 0;
  rd.number("priority", priority, -100, 100);
  r.priority = static_cast<int>(priority);
  rd.number("expectMs", r.expect_ms, 0, max_duration_ms);
  rd.number("maxHoldMs", r.max_hold_ms, 0, max_duration_ms);
  rd.flag("canYield", r.can_yield);
  rd.text("tool", r.tool, 128);
  rd.text("bootId", r.boot_id, 64);
  rd.number("pidNs", r.pid_ns, 0, INT64_MAX);
  rd.number("timeNs", r.time_ns, 0, INT64_MAX);
  rd.number("procTicks", r.proc_ticks, 0, INT64_MAX);
  rd.number("keeperPid", r.keeper_pid, 0, 2147483647);
  rd.number("keeperTicks", r.keeper_ticks, 0, INT64_MAX);
  if (rd.problem.empty() && !r.token.empty() && !valid_token(r.token)) rd.problem = "token has characters a token never has";
  if (!rd.problem.empty()) {
    record bad;
    bad.problem = rd.problem;
    return bad;
  }
  return r;
}

}  // namespace offload_lock::detail::etcd
