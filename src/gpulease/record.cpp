// Reading and writing gpulease claims. See record.hpp.
#include "gpulease/record.hpp"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

namespace offload_lock::detail::gpulease {

namespace {

using ojson = nlohmann::json;

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// The length of the well-formed UTF-8 sequence at in[i] (Unicode's table
// 3-7), 0 when the byte there starts none.
std::size_t utf8_sequence(std::string_view in, std::size_t i) {
  auto at = [&](std::size_t k) { return static_cast<unsigned char>(in[k]); };
  const unsigned char c = at(i);
  if (c < 0x80) return 1;
  // Lead bytes C2..DF start two bytes, E0..EF three, F0..F4 four; the
  // second byte's range is narrower after E0, ED, F0 and F4.
  if (c < 0xC2 || c > 0xF4) return 0;
  const std::size_t need = c >= 0xF0 ? 3 : (c >= 0xE0 ? 2 : 1);
  const unsigned char lo = (c == 0xE0) ? 0xA0 : (c == 0xF0 ? 0x90 : 0x80);
  const unsigned char hi = (c == 0xED) ? 0x9F : (c == 0xF4 ? 0x8F : 0xBF);
  if (i + need >= in.size()) return 0;  // the sequence is cut off
  for (std::size_t k = 1; k <= need; ++k) {
    const unsigned char d = at(i + k);
    if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) return 0;
  }
  return need + 1;
}

// Go's decoder turns each byte that starts no well-formed sequence into one
// U+FFFD (utf8.DecodeRune reports such a byte with size 1).
std::string go_repair_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size();) {
    const std::size_t n = utf8_sequence(in, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(in.substr(i, n));
      i += n;
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of a "\uXXXX" escape at s[i], -1 when there is none.
long escape_at(const std::string& s, std::size_t i) {
  if (i + 6 > s.size() || s[i] != '\\' || s[i + 1] != 'u') return -1;
  long v = 0;
  for (std::size_t k = 2; k < 6; ++k) {
    const int h = hex_value(s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Go reads a surrogate escape that is not the first half of a pair with its
// second as U+FFFD; nlohmann refuses it. Rewrite such escapes as \ufffd.
std::string replace_lone_surrogates(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool in_string = false;
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (!in_string) {
      in_string = c == '"';
      out += c;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = false;
      out += c;
      ++i;
      continue;
    }
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      ++i;
      continue;
    }
    const long u = escape_at(s, i);
    if (u >= 0xD800 && u <= 0xDFFF) {
      const long low = escape_at(s, i + 6);
      if (u <= 0xDBFF && low >= 0xDC00 && low <= 0xDFFF) {
        out.append(s, i, 12);
        i += 12;
      } else {
        out += "\\ufffd";
        i += 6;
      }
      continue;
    }
    out.append(s, i, 2);  // any other escape: its two characters, then the rest as it is
    i += 2;
  }
  return out;
}

// Go's case folding of a key for comparison with an ASCII field name: ASCII
// letters, and the two non-ASCII letters whose simple folding is ASCII.
std::string go_fold(const std::string& key) {
  std::string out;
  out.reserve(key.size());
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (c >= 'A' && c <= 'Z') {
      out += static_cast<char>(c - 'A' + 'a');
    } else if (key.compare(i, 2, "\xC5\xBF") == 0) {  // U+017F LATIN SMALL LETTER LONG S
      out += 's';
      i += 1;
    } else if (key.compare(i, 3, "\xE2\x84\xAA") == 0) {  // U+212A KELVIN SIGN
      out += 'k';
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

enum class field { none, epoch, lease_class, holder, job_id, origin, reason, acquired, expires, renewed, pid, start };

field top_field(const std::string& key) {
  const std::string k = go_fold(key);
  if (k == "epoch") return field::epoch;
  if (k == "class") return field::lease_class;
  if (k == "holder") return field::holder;
  if (k == "job_id") return field::job_id;
  if (k == "origin") return field::origin;
  if (k == "reason") return field::reason;
  if (k == "acquired_at_ms") return field::acquired;
  if (k == "expires_at_ms") return field::expires;
  if (k == "renewed_at_ms") return field::renewed;
  return field::none;
}

field holder_field(const std::string& key) {
  const std::string k = go_fold(key);
  if (k == "pid") return field::pid;
  if (k == "start_time_ms") return field::start;
  return field::none;
}

struct scalar {
  enum kind_t { null, boolean, negative, non_negative, fraction, text } kind = null;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  std::string s;
  static scalar of(kind_t k) {
    scalar v;
    v.kind = k;
    return v;
  }
};

// The SAX events of one document, decoded into a record the way Go's
// decoder fills a struct: every occurrence of a key in document order.
class decoder {
 public:
  record r;
  bool type_error = false;

  bool null() { return value({}); }
  bool boolean(bool) { return value(scalar::of(scalar::boolean)); }
  bool number_integer(std::int64_t v) {
    scalar s = scalar::of(scalar::negative);
    s.i = v;
    return value(s);
  }
  bool number_unsigned(std::uint64_t v) {
    scalar s = scalar::of(scalar::non_negative);
    s.u = v;
    return value(s);
  }
  bool number_float(double, const std::string&) { return value(scalar::of(scalar::fraction)); }
  // cppcheck-suppress constParameter ; nlohmann's SAX interface passes a mutable reference
  bool string(std::string& v) {
    scalar s = scalar::of(scalar::text);
    s.s = v;
    return value(s);
  }
  static bool binary(ojson::binary_t&) { return false; }
  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  // cppcheck-suppress constParameter ; nlohmann's SAX interface passes a mutable reference
  bool key(std::string& k) {
    if (!stack_.empty() && stack_.back() == ctx::top)
      pending_ = top_field(k);
    else if (!stack_.empty() && stack_.back() == ctx::holder)
      pending_ = holder_field(k);
    else
      pending_ = field::none;
    return true;
  }
  static bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum class ctx { top, holder, skip };
  std::vector<ctx> stack_;
  field pending_ = field::none;
  bool root_done_ = false;

  // Where a value now goes: nullopt for the root, else the pending field
  // of the open object (none inside skipped values and arrays).
  field target() const {
    if (stack_.empty() || stack_.back() == ctx::skip) return field::none;
    return pending_;
  }

  bool open(bool object) {
    if (static_cast<int>(stack_.size()) >= go_max_depth) return false;
    if (stack_.empty() && !root_done_) {
      root_done_ = true;
      if (!object) type_error = true;
      stack_.push_back(object ? ctx::top : ctx::skip);
      return true;
    }
    if (!stack_.empty() && stack_.back() == ctx::skip) {
      stack_.push_back(ctx::skip);
      return true;
    }
    const field f = pending_;
    if (f == field::holder && object && stack_.back() == ctx::top) {
      stack_.push_back(ctx::holder);
      return true;
    }
    if (f != field::none) type_error = true;  // an object or array for a number, a string or (an array) the holder
    stack_.push_back(ctx::skip);
    return true;
  }

  bool close() {
    if (!stack_.empty()) stack_.pop_back();
    pending_ = field::none;
    return true;
  }

  static bool to_int64(const scalar& v, std::int64_t& out) {
    if (v.kind == scalar::negative) {
      out = v.i;
      return true;
    }
    if (v.kind == scalar::non_negative && v.u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      out = static_cast<std::int64_t>(v.u);
      return true;
    }
    return false;
  }

  bool value(const scalar& v) {
    if (stack_.empty()) {
      // The root: null leaves the record zero; any other non-object is an error.
      root_done_ = true;
      if (v.kind != scalar::null) type_error = true;
      return true;
    }
    const field f = target();
    if (v.kind == scalar::null || f == field::none) return true;
    bool ok = true;
    switch (f) {
      case field::epoch:
        if (v.kind == scalar::non_negative)
          r.epoch = v.u;
        else
          ok = false;
        break;
      case field::acquired: ok = to_int64(v, r.acquired_at_ms); break;
      case field::expires: ok = to_int64(v, r.expires_at_ms); break;
      case field::renewed: ok = to_int64(v, r.renewed_at_ms); break;
      case field::pid: ok = to_int64(v, r.pid); break;
      case field::start: ok = to_int64(v, r.start_ticks); break;
      case field::lease_class:
      case field::job_id:
      case field::origin:
      case field::reason: {
        if (v.kind != scalar::text) {
          ok = false;
          break;
        }
        std::string& dst = f == field::lease_class ? r.lease_class
                           : f == field::job_id    ? r.job_id
                           : f == field::origin    ? r.origin
                                                   : r.reason;
        dst = v.s;
        break;
      }
      case field::holder: ok = false; break;  // a scalar for the holder object
      case field::none: break;
    }
    if (!ok) type_error = true;
    return true;
  }
};

void append_go_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&')
        out += static_cast<char>(c);
      else if (c == '"' || c == '\\')
        (out += '\\') += static_cast<char>(c);
      else if (c == '\n')
        out += "\\n";
      else if (c == '\r')
        out += "\\r";
      else if (c == '\t')
        out += "\\t";
      else
        ((out += "\\u00") += hex[c >> 4]) += hex[c & 0xF];
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else if (s.compare(i, 3, "\xE2\x80\xA8") == 0 || s.compare(i, 3, "\xE2\x80\xA9") == 0) {
      out += s[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 3;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  out += '"';
}

// The record's members, without the braces.
std::string members(const record& r) {
  std::string out = "\"epoch\":" + std::to_string(r.epoch) + ",\"class\":";
  append_go_string(out, r.lease_class);
  out += ",\"holder\":{\"pid\":" + std::to_string(r.pid) + ",\"start_time_ms\":" + std::to_string(r.start_ticks) + "}";
  auto optional_text = [&](const char* key, const std::string& v) {
    if (v.empty()) return;
    (out += ",\"") += key;
    out += "\":";
    append_go_string(out, v);
  };
  optional_text("job_id", r.job_id);
  optional_text("origin", r.origin);
  optional_text("reason", r.reason);
  out += ",\"acquired_at_ms\":" + std::to_string(r.acquired_at_ms);
  out += ",\"expires_at_ms\":" + std::to_string(r.expires_at_ms);
  out += ",\"renewed_at_ms\":" + std::to_string(r.renewed_at_ms);
  return out;
}

// One white-space rune (unicode.IsSpace) at the start (or the end) of s:
// its length in bytes, 0 when there is none.
std::size_t space_at(std::string_view s, bool at_end) {
  static const std::string_view spaces[] = {
      "\t",           "\n",           "\v",           "\f",           "\r",           " ",
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82",
      "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88",
      "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F",
      "\xE3\x80\x80"};
  for (std::string_view sp : spaces) {
    if (s.size() < sp.size()) continue;
    if (at_end ? s.substr(s.size() - sp.size()) == sp : s.substr(0, sp.size()) == sp) return sp.size();
  }
  return 0;
}

}  // namespace

std::optional<record> parse_record(std::string_view bytes) {
  // Go refuses a byte-order mark; nlohmann would skip it.
  if (bytes.size() >= 3 && bytes.substr(0, 3) == "\xEF\xBB\xBF") return std::nullopt;
  const std::string text = replace_lone_surrogates(go_repair_utf8(bytes));
  decoder d;
  if (!ojson::sax_parse(text, &d, nlohmann::detail::input_format_t::json, /*strict=*/true)) return std::nullopt;
  if (d.type_error) return std::nullopt;
  return d.r;
}

std::string serialize_record(const record& r) { return "{" + members(r) + "}"; }

std::string append_record(std::string_view object, const record& r) {
  object = trim_space(object);
  // The object's members, without its braces and the white space inside them.
  const std::string_view inside =
      object.size() >= 2 ? trim_space(object.substr(1, object.size() - 2)) : std::string_view();
  std::string out = "{";
  out.append(inside);
  if (!inside.empty()) out += ',';
  return out + members(r) + "}";
}

std::string_view trim_space(std::string_view s) {
  while (std::size_t n = space_at(s, false)) s.remove_prefix(n);
  while (std::size_t n = space_at(s, true)) s.remove_suffix(n);
  return s;
}

std::optional<std::int64_t> parse_go_int(std::string_view s) {
  s = trim_space(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  const std::uint64_t limit = negative ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (limit - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  if (negative)
    return v == (std::uint64_t{1} << 63) ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(v);
  return static_cast<std::int64_t>(v);
}

std::optional<std::uint64_t> parse_go_uint(std::string_view s) {
  s = trim_space(s);
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

}  // namespace offload_lock::detail::gpulease
