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

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_ESCAPE_HPP
