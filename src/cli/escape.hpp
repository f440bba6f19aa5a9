// The escaping core of every one-line text the command writes.
// Its messages on a terminal, its usage errors and the Prometheus label
// values each pick which bytes to escape, and how, over this one loop.
#ifndef OFFLOAD_LOCK_SRC_CLI_ESCAPE_HPP
#define OFFLOAD_LOCK_SRC_CLI_ESCAPE_HPP

#include <string>
#include <string_view>

namespace offload_lock::cli {

// A control character: below 0x20, or DEL.
constexpr bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Appends the byte as "\xHH" (lower-case hex).
inline void append_hex_escape(std::string& out, unsigned char c) {
  const char* hex = "0123456789abcdef";
  out += "\\x";
  out += hex[c >> 4];
  out += hex[c & 15];
}

// Copies `s`; for each byte, `escape(byte, out)` may append an escape in
// its place and return true, or return false to keep the byte.
template <class Escape>
std::string escape_bytes(std::string_view s, Escape escape) {
  std::string out;
  out.reserve(s.size());
  for (char c : s)
    if (!escape(static_cast<unsigned char>(c), out)) out += c;
  return out;
}

// Where a text that came from a file or another process is shown.
enum class shown_in {
  terminal,    // messages and screens: escapes as \n, \xHH, \uHHHH, \\ for a backslash
  prometheus,  // a label value of the exposition format: the same escapes, themselves escaped
};

// A code point a terminal or a reader could be fooled by: C1 controls, the
// bidirectional embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) and marks, and the line and paragraph separators.
constexpr bool is_deceptive(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) ||
         cp == 0x200e || cp == 0x200f || cp == 0x061c || cp == 0x2028 || cp == 0x2029;
}

// The length of the well-formed UTF-8 sequence at s[i] and its code point;
// 0 when the bytes there are not one.
inline std::size_t utf8_at(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c == 0xe0) n = 3, cp = c & 0x0f, lo = 0xa0;
  else if (c == 0xed) n = 3, cp = c & 0x0f, hi = 0x9f;
  else if (c >= 0xe1 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c == 0xf0) n = 4, cp = c & 0x07, lo = 0x90;
  else if (c == 0xf4) n = 4, cp = c & 0x07, hi = 0x8f;
  else if (c >= 0xf1 && c <= 0xf3) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const unsigned char d = b(i + k);
    if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  return n;
}

// `s` with everything a terminal would obey, or a reader mistake, escaped:
// control bytes, a backslash (so a literal "\n" never looks like an escaped
// newline), deceptive code points, and bytes that are not UTF-8 (U+FFFD in
// the exposition format, which must be UTF-8). In a Prometheus label value
// the quote is escaped too.
inline std::string escape_text(std::string_view s, shown_in where) {
  const bool prom = where == shown_in::prometheus;
  const char* bs = prom ? "\\\\" : "\\";  // how a backslash of an escape is written
  const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\\') out += "\\\\";
      else if (c == '"' && prom) out += "\\\"";
      else if (c == '\n') out += "\\n";
      else if (is_control(c)) (out += bs) += std::string{'x', hex[c >> 4], hex[c & 15]};
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t n = utf8_at(s, i, cp);
    if (n == 0) {
      if (prom) out += "\xEF\xBF\xBD";
      else (out += bs) += std::string{'x', hex[c >> 4], hex[c & 15]};
      ++i;
    } else if (is_deceptive(cp)) {
      (out += bs) += std::string{'u', hex[(cp >> 12) & 15], hex[(cp >> 8) & 15], hex[(cp >> 4) & 15], hex[cp & 15]};
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_ESCAPE_HPP
