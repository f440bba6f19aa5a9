// One line of the history as bytes (history_line.hpp): the writer's
// serializer and the reader's strict parser of flat JSON objects. Written
// by hand rather than with a JSON library: a reader goes through a million
// lines in well under a second this way, and accepts nothing but the one
// shape it knows.
#include "history_line.hpp"

#include <cstring>

#include "meta.hpp"

namespace offload_lock::detail {

namespace {

// `s` cut to at most `cap` bytes, as a JSON string: invalid UTF-8 repaired
// (a cut sequence included), quote, backslash and control characters
// escaped; other characters as they are (UTF-8).
void append_string(std::string& out, std::string_view s, std::size_t cap) {
  if (s.size() > cap) s = s.substr(0, cap);
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  std::string repaired;
  if (!ascii) {
    repaired = repair_utf8(s);
    s = repaired;
  }
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c < 0x20 || c == 0x7f) {
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
}

void key(std::string& out, const char* k) {
  out += ",\"";
  out += k;
  out += "\":";
}

void number(std::string& out, const char* k, std::int64_t v) {
  key(out, k);
  out += std::to_string(v);
}

void text(std::string& out, const char* k, std::string_view v, std::size_t cap) {
  key(out, k);
  append_string(out, v, cap);
}

// ---- the parser ----

// The keys the reader knows, one bit each (a key twice is malformed).
enum key_bit : std::uint32_t {
  k_v = 1U << 0, k_at = 1U << 1, k_event = 1U << 2, k_outcome = 1U << 3, k_uid = 1U << 4, k_pid = 1U << 5,
  k_label = 1U << 6, k_host = 1U << 7, k_gpu = 1U << 8, k_priority = 1U << 9, k_token = 1U << 10,
  k_since = 1U << 11, k_waited = 1U << 12, k_held = 1U << 13, k_expect = 1U << 14, k_reason = 1U << 15,
  k_by = 1U << 16, k_other_pid = 1U << 17, k_other_label = 1U << 18, k_other_priority = 1U << 19,
  k_holder_uid = 1U << 20, k_yield = 1U << 21,
};

struct cursor {
  std::string_view s;
  std::size_t i = 0;
  bool at_end() const { return i >= s.size(); }
  char peek() const { return s[i]; }
  bool eat(char c) {
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool read_hex4(cursor& c, std::uint32_t& v) {
  if (c.i + 4 > c.s.size()) return false;
  v = 0;
  for (int k = 0; k < 4; ++k) {
    const int h = hex_value(c.s[c.i++]);
    if (h < 0) return false;
    v = (v << 4) | static_cast<std::uint32_t>(h);
  }
  return true;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// A JSON string (after its opening quote) into `out`. Raw control
// characters are malformed, as in JSON; a lone surrogate escape is U+FFFD,
// invalid UTF-8 is repaired.
bool read_string(cursor& c, std::string& out) {
  out.clear();
  const std::size_t start = c.i;
  // The common case: no escape, plain ASCII.
  while (c.i < c.s.size()) {
    const auto ch = static_cast<unsigned char>(c.s[c.i]);
    if (ch == '"') {
      out.assign(c.s.data() + start, c.i - start);
      ++c.i;
      return true;
    }
    if (ch == '\\' || ch < 0x20 || ch >= 0x80) break;
    ++c.i;
  }
  out.assign(c.s.data() + start, c.i - start);
  bool non_ascii = false;
  while (c.i < c.s.size()) {
    const char ch = c.s[c.i++];
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"') {
      if (non_ascii) out = repair_utf8(out);
      return true;
    }
    if (u < 0x20) return false;
    if (u >= 0x80) non_ascii = true;
    if (ch != '\\') {
      out += ch;
      continue;
    }
    if (c.at_end()) return false;
    const char e = c.s[c.i++];
    switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!read_hex4(c, cp)) return false;
        if (cp >= 0xd800 && cp <= 0xdbff && c.i + 6 <= c.s.size() && c.s[c.i] == '\\' && c.s[c.i + 1] == 'u') {
          cursor look = c;
          look.i += 2;
          std::uint32_t lo = 0;
          if (read_hex4(look, lo) && lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            c.i = look.i;
          }
        }
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;
        append_utf8(out, cp);
        break;
      }
      default: return false;
    }
  }
  return false;
}

// An integer as history_line() writes one: optional '-', 1 to 18 digits,
// no leading zero. Fractions and exponents are malformed.
bool read_int(cursor& c, std::int64_t& v) {
  const bool neg = c.eat('-');
  const std::size_t start = c.i;
  v = 0;
  while (c.i < c.s.size() && c.s[c.i] >= '0' && c.s[c.i] <= '9') {
    v = v * 10 + (c.s[c.i] - '0');
    ++c.i;
  }
  const std::size_t n = c.i - start;
  if (n == 0 || n > 18 || (n > 1 && c.s[start] == '0')) return false;
  if (c.i < c.s.size() && (c.s[c.i] == '.' || c.s[c.i] == 'e' || c.s[c.i] == 'E')) return false;
  if (neg) v = -v;
  return true;
}

bool read_word(cursor& c, const char* w) {
  const std::size_t n = std::strlen(w);
  if (c.s.compare(c.i, n, w) != 0) return false;
  c.i += n;
  return true;
}

// Any value, for a key the reader does not know: a string, an integer,
// true, false or null (nothing nests).
bool skip_value(cursor& c, std::string& scratch) {
  if (c.at_end()) return false;
  if (c.eat('"')) return read_string(c, scratch);
  if (c.peek() == '-' || (c.peek() >= '0' && c.peek() <= '9')) {
    std::int64_t v = 0;
    return read_int(c, v);
  }
  return read_word(c, "true") || read_word(c, "false") || read_word(c, "null");
}

// An event or outcome name: 1 to 32 of [a-z-].
bool is_word(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  for (char ch : s)
    if (!((ch >= 'a' && ch <= 'z') || ch == '-')) return false;
  return true;
}

// The known key `k` is, as its bit; 0 for another. By length first: one
// comparison for most keys, at a million lines a read.
std::uint32_t key_of(std::string_view k) {
  switch (k.size()) {
    case 1: return k == "v" ? k_v : key_bit{};
    case 2: return k == "at" ? k_at : k == "by" ? k_by : key_bit{};
    case 3: return k == "uid" ? k_uid : k == "pid" ? k_pid : k == "gpu" ? k_gpu : key_bit{};
    case 4: return k == "host" ? k_host : key_bit{};
    case 5: return k == "event" ? k_event : k == "label" ? k_label : k == "token" ? k_token : k == "since" ? k_since : key_bit{};
    case 6: return k == "heldMs" ? k_held : k == "reason" ? k_reason : key_bit{};
    case 7: return k == "outcome" ? k_outcome : key_bit{};
    case 8:
      return k == "priority" ? k_priority : k == "waitedMs" ? k_waited : k == "expectMs" ? k_expect
             : k == "otherPid" ? k_other_pid : key_bit{};
    case 9: return k == "holderUid" ? k_holder_uid : key_bit{};
    case 10: return k == "otherLabel" ? k_other_label : k == "yieldAsked" ? k_yield : key_bit{};
    case 13: return k == "otherPriority" ? k_other_priority : key_bit{};
    default: return 0;
  }
}

}  // namespace

std::string history_line(const history_entry& e) {
  std::string out;
  out.reserve(256 + e.label.size() + e.other_label.size());
  out += "{\"v\":1,\"at\":";
  out += std::to_string(e.at);
  text(out, "event", e.event, 32);
  if (!e.outcome.empty()) text(out, "outcome", e.outcome, 32);
  number(out, "uid", e.uid);
  number(out, "pid", e.pid);
  text(out, "label", e.label, 1024);
  if (!e.host.empty()) text(out, "host", e.host, 256);
  key(out, "gpu");
  out += e.gpu >= 0 ? std::to_string(e.gpu) : std::string("null");
  number(out, "priority", e.priority);
  if (!e.token.empty()) text(out, "token", e.token, 128);
  if (e.since > 0) number(out, "since", e.since);
  if (e.waited_ms >= 0) number(out, "waitedMs", e.waited_ms);
  if (e.held_ms >= 0) number(out, "heldMs", e.held_ms);
  if (e.expect_ms > 0) number(out, "expectMs", e.expect_ms);
  if (!e.reason.empty()) text(out, "reason", e.reason, 512);
  if (!e.by.empty()) text(out, "by", e.by, 32);
  if (e.other_pid != 0) {
    number(out, "otherPid", e.other_pid);
    text(out, "otherLabel", e.other_label, 1024);
    number(out, "otherPriority", e.other_priority);
  }
  if (e.holder_uid) number(out, "holderUid", *e.holder_uid);
  if (e.yield_asked) out += ",\"yieldAsked\":true";
  out += "}\n";
  return out;
}

std::optional<std::int64_t> history_line_at(std::string_view line) {
  static constexpr std::string_view prefix = "{\"v\":1,\"at\":";
  if (line.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  cursor c{line, prefix.size()};
  std::int64_t v = 0;
  if (!read_int(c, v) || c.at_end() || c.peek() != ',') return std::nullopt;
  return v;
}

bool parse_history_line(std::string_view line, history_entry& out) {
  if (line.size() > history_line_cap) return false;
  cursor c{line};
  if (!c.eat('{')) return false;
  // Reused between lines by a reader: every field is reset.
  out.at = 0;
  out.uid = 0;
  out.event.clear();
  out.outcome.clear();
  out.pid = 0;
  out.label.clear();
  out.host.clear();
  out.token.clear();
  out.gpu = -1;
  out.priority = 0;
  out.since = 0;
  out.waited_ms = -1;
  out.held_ms = -1;
  out.expect_ms = 0;
  out.reason.clear();
  out.by.clear();
  out.other_pid = 0;
  out.other_label.clear();
  out.other_priority = 0;
  out.holder_uid.reset();
  out.yield_asked = false;
  std::uint32_t seen = 0;
  std::string name, scratch;
  bool first = true;
  for (;;) {
    if (c.eat('}')) break;
    if (!first && !c.eat(',')) return false;
    first = false;
    if (!c.eat('"')) return false;
    // A key as the writer writes it (no escape) is looked at in place; one
    // with escapes is decoded first.
    std::string_view key;
    std::size_t close = c.i;
    while (close < line.size() && line[close] != '"' && line[close] != '\\' &&
           static_cast<unsigned char>(line[close]) >= 0x20)
      ++close;
    if (close < line.size() && line[close] == '"') {
      key = line.substr(c.i, close - c.i);
      c.i = close + 1;
    } else {
      if (!read_string(c, name)) return false;
      key = name;
    }
    if (!c.eat(':') || c.at_end()) return false;
    auto once = [&](std::uint32_t bit) {
      if (seen & bit) return false;
      seen |= bit;
      return true;
    };
    auto integer = [&](std::uint32_t bit, std::int64_t& into) { return once(bit) && read_int(c, into); };
    auto string = [&](std::uint32_t bit, std::string& into) { return once(bit) && c.eat('"') && read_string(c, into); };
    auto small = [&](std::uint32_t bit, int& into, std::int64_t lo, std::int64_t hi) {
      std::int64_t v = 0;
      if (!integer(bit, v) || v < lo || v > hi) return false;
      into = static_cast<int>(v);
      return true;
    };
    bool ok = true;
    std::int64_t v = 0;
    switch (key_of(key)) {
      case k_v: ok = integer(k_v, v) && v == 1; break;
      case k_at: ok = integer(k_at, out.at) && out.at >= 0; break;
      case k_event: ok = string(k_event, out.event) && is_word(out.event); break;
      case k_outcome: ok = string(k_outcome, out.outcome) && is_word(out.outcome); break;
      case k_uid:
        ok = integer(k_uid, v) && v >= 0 && v <= 0xffffffffLL;
        out.uid = static_cast<std::uint32_t>(v);
        break;
      case k_pid: ok = integer(k_pid, out.pid); break;
      case k_label: ok = string(k_label, out.label); break;
      case k_host: ok = string(k_host, out.host); break;
      case k_gpu:
        ok = once(k_gpu) &&
             (read_word(c, "null") || (read_int(c, v) && v >= 0 && v < 1024 && (out.gpu = static_cast<int>(v), true)));
        break;
      case k_priority: ok = small(k_priority, out.priority, -100, 100); break;
      case k_token: ok = string(k_token, out.token); break;
      case k_since: ok = integer(k_since, out.since); break;
      case k_waited: ok = integer(k_waited, out.waited_ms) && out.waited_ms >= 0; break;
      case k_held: ok = integer(k_held, out.held_ms) && out.held_ms >= 0; break;
      case k_expect: ok = integer(k_expect, out.expect_ms) && out.expect_ms >= 0; break;
      case k_reason: ok = string(k_reason, out.reason); break;
      case k_by: ok = string(k_by, out.by); break;
      case k_other_pid: ok = integer(k_other_pid, out.other_pid); break;
      case k_other_label: ok = string(k_other_label, out.other_label); break;
      case k_other_priority: ok = small(k_other_priority, out.other_priority, -100, 100); break;
      case k_holder_uid:
        ok = integer(k_holder_uid, v) && v >= 0 && v <= 0xffffffffLL;
        out.holder_uid = static_cast<std::uint32_t>(v);
        break;
      case k_yield: ok = once(k_yield) && (read_word(c, "true") ? (out.yield_asked = true) : read_word(c, "false")); break;
      default: ok = skip_value(c, scratch); break;
    }
    if (!ok) return false;
  }
  if (!c.at_end()) return false;
  const std::uint32_t required = k_v | k_at | k_event | k_uid | k_pid;
  return (seen & required) == required;
}

}  // namespace offload_lock::detail
