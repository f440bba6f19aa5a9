// Writing and reading meta.json. See meta.hpp.
#include "meta.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "os/types.hpp"

namespace offload_lock::detail {

using ojson = nlohmann::ordered_json;

std::string serialize(const meta_record& m) {
  ojson j;
  // Insertion order is the byte order: pid, startedAt first (doc/protocol.md B2).
  j["pid"] = m.pid;
  j["startedAt"] = m.started_at;
  j["token"] = m.token;
  j["label"] = m.label;
  j["host"] = m.host;
  j["bootId"] = m.boot_id;
  j["procStart"] = m.proc_start;
  j["procTicks"] = m.proc_ticks;
  if (m.pid_ns) j["pidNs"] = m.pid_ns;
  if (m.priority) j["priority"] = m.priority;
  if (m.expect_ms > 0) j["expectMs"] = m.expect_ms;
  if (m.max_hold_ms > 0) j["maxHoldMs"] = m.max_hold_ms;
  if (!m.passed_over.empty()) {
    ojson p = ojson::array();
    for (std::size_t k = 0; k < m.passed_over.size() && k < max_passed_over; ++k) p.push_back(m.passed_over[k]);
    j["passedOver"] = std::move(p);
  }
  if (m.gpu >= 0) j["gpu"] = m.gpu;
  if (m.can_yield) j["canYield"] = true;
  j["tool"] = std::string("offload-lock/") + OFFLOAD_LOCK_VERSION;
  // replace: a label with invalid UTF-8 is written with U+FFFD, never thrown.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string repair_utf8(std::string_view in) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(in.size());
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(in[i]); };
  std::size_t i = 0;
  while (i < in.size()) {
    unsigned char c = byte(i);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    int need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    // NOLINTNEXTLINE(bugprone-branch-clone): one branch per row of Unicode's table of well-formed UTF-8
    else if (c >= 0xE1 && c <= 0xEC) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    if (need == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    std::size_t j = i + 1;
    int got = 0;
    while (got < need && j < in.size()) {
      unsigned char d = byte(j);
      unsigned char l = got == 0 ? lo : 0x80, h = got == 0 ? hi : 0xBF;
      if (d < l || d > h) break;
      ++j;
      ++got;
    }
    if (got == need) {
      out.append(in.substr(i, j - i));
    } else {
      out += kReplacement;  // the maximal subpart becomes one U+FFFD
    }
    i = j;
  }
  return out;
}

namespace {

// Nesting depth outside strings; used to refuse pathological inputs before
// handing them to the parser.
int max_depth(std::string_view s) {
  int depth = 0, most = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') most = std::max(most, ++depth);
    else if (c == ']' || c == '}') --depth;
  }
  return most;
}

bool js_falsy(const ojson& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v.get<double>() == 0.0;
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  return false;
}

std::optional<std::int64_t> integral(const ojson& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

std::string string_or_empty(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

bool ascii_iequal(const std::string& a, const char* b) {
  std::size_t n = 0;
  for (; b[n]; ++n) {
    if (n >= a.size()) return false;
    char x = a[n], y = b[n];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return n == a.size();
}

// Go's encoding/json into struct{Pid int `json:"pid"`; StartedAt int64
// `json:"startedAt"`}: null is a no-op, keys match case-insensitively, only
// integer literals fit an int, any other type is an error.
void go_decode(const ojson& v, parsed_meta& m) {
  m.go_ok = false;
  if (v.is_null()) {
    m.go_ok = true;
    return;
  }
  if (!v.is_object()) return;
  bool ok = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    std::int64_t* target = nullptr;
    if (ascii_iequal(it.key(), "pid")) target = &m.go_pid;
    else if (ascii_iequal(it.key(), "startedAt")) target = &m.go_started_at;
    if (!target) continue;
    const ojson& f = it.value();
    if (f.is_null()) continue;
    if (f.is_number_integer()) *target = f.get<std::int64_t>();
    else if (f.is_number_unsigned() && f.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX))
      *target = static_cast<std::int64_t>(f.get<std::uint64_t>());
    else ok = false;
  }
  m.go_ok = ok;
}

}  // namespace

parsed_meta parse_meta(std::string_view bytes) {
  parsed_meta m;
  // JSON.parse refuses a byte-order mark (Node does not strip it when
  // reading utf8); nlohmann would skip it, so refuse it here.
  if (bytes.size() >= 3 && bytes.substr(0, 3) == "\xEF\xBB\xBF") return m;
  if (max_depth(bytes) > meta_max_depth) return m;
  std::string text = repair_utf8(bytes);
  ojson v = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return m;
  m.parsed = true;
  m.node_null = js_falsy(v);
  go_decode(v, m);
  if (!v.is_object()) return m;
  m.is_object = true;
  if (auto it = v.find("pid"); it != v.end() && it->is_number()) m.js_pid = it->get<double>();
  if (auto it = v.find("startedAt"); it != v.end()) m.started_at = integral(*it);
  if (auto it = v.find("procStart"); it != v.end()) m.proc_start = integral(*it);
  if (auto it = v.find("procTicks"); it != v.end()) {
    auto t = integral(*it);
    if (t && *t >= 0) m.proc_ticks = static_cast<std::uint64_t>(*t);
  }
  if (auto it = v.find("pidNs"); it != v.end()) {
    auto t = integral(*it);
    if (t && *t > 0) m.pid_ns = static_cast<std::uint64_t>(*t);
  }
  if (auto it = v.find("priority"); it != v.end()) m.priority = integral(*it);
  if (auto it = v.find("passedOver"); it != v.end() && it->is_array())
    for (const auto& e : *it) {
      if (m.passed_over.size() >= max_passed_over) break;
      if (e.is_string() && e.get_ref<const std::string&>().size() <= 128) m.passed_over.push_back(e.get<std::string>());
    }
  if (auto it = v.find("expectMs"); it != v.end()) {
    auto e = integral(*it);
    if (e && *e > 0) m.expect_ms = e;
  }
  if (auto it = v.find("maxHoldMs"); it != v.end()) {
    auto e = integral(*it);
    if (e && *e > 0) m.max_hold_ms = e;
  }
  if (auto it = v.find("gpu"); it != v.end()) {
    auto g = integral(*it);
    if (g && *g >= 0 && *g < 1024) m.gpu = g;
  }
  if (auto it = v.find("canYield"); it != v.end()) m.can_yield = it->is_boolean() && it->get<bool>();
  m.token = string_or_empty(v, "token");
  m.label = string_or_empty(v, "label");
  m.host = string_or_empty(v, "host");
  m.boot_id = string_or_empty(v, "bootId");
  m.tool = string_or_empty(v, "tool");
  return m;
}

}  // namespace offload_lock::detail
