// One line of the history (include/offload_lock/history.hpp) as bytes: what
// a writer appends and what a reader accepts. Pure, so that every shape of
// line, hostile ones included, is a unit test.
//
// A line is one flat JSON object ending in '\n':
//   {"v":1,"at":MS,"event":"acquire","outcome":"acquired","uid":U,"pid":P,
//    "label":"...","host":"...","gpu":K,"priority":N,"token":"...",...}
// "v" and "at" come first, so that a reader skips a line older than what it
// asks for without parsing the rest. Values are strings, integers, true,
// false or null; nothing nests. Keys it does not know are ignored (a later
// version's), a key given twice makes the line malformed.
#ifndef OFFLOAD_LOCK_SRC_HISTORY_LINE_HPP
#define OFFLOAD_LOCK_SRC_HISTORY_LINE_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "offload_lock/history.hpp"

namespace offload_lock::detail {

// The longest line read or written; a longer one is malformed. Strings are
// cut to keep every line well below it.
inline constexpr std::size_t history_line_cap = 8192;

// The line of `e`, '\n' included. Strings are cut (label 1024 bytes, token
// 128, host 256, reason 512) and repaired to UTF-8; control characters are
// JSON escapes.
std::string history_line(const history_entry& e);

// "at" of a line that starts as history_line() writes it (`{"v":1,"at":`),
// without parsing the rest; nullopt otherwise.
std::optional<std::int64_t> history_line_at(std::string_view line);

// Parses one line (without its '\n'). False for anything history_line()
// does not write: not one flat JSON object, "v" not 1, "at", "uid", "event"
// or "pid" missing or of the wrong type, an event or outcome that is not a
// short lower-case word, a key twice, a line over history_line_cap.
bool parse_history_line(std::string_view line, history_entry& out);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_HISTORY_LINE_HPP
