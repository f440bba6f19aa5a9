// What the command writes: messages, status lines, label values, JSON.
// Messages go to stderr one line each, with control characters escaped.
#ifndef OFFLOAD_LOCK_SRC_CLI_OUTPUT_HPP
#define OFFLOAD_LOCK_SRC_CLI_OUTPUT_HPP

#include <nlohmann/json.hpp>
#include <string>

#include "offload_lock/lock.hpp"

namespace offload_lock::cli {

using ojson = nlohmann::ordered_json;

// `s` with control characters shown escaped (\n, \xHH), so every message
// stays one line and a terminal shows what is there instead of obeying it.
std::string printable(const std::string& s);
// `v` as a quoted label value of the Prometheus text format.
std::string prom_quote(const std::string& v);

// "offload-lock: <line>" on stderr, made printable.
void say(const std::string& line);

// "label (pid N, host H)" of a lock's holder: the library's
// describe_holder (offload_lock/describe.hpp), not escaped.
std::string who(const info& i);
// "held by ... for ...", "free", or "free (stale lock of ...: reason)"
// (describe_state), with who owns the directory and what the other
// participants would conclude, escaped.
std::string status_line(const info& i);

// A lock's state as the command's JSON object (`status --json` and others).
ojson to_json(const info& i);
// One line of JSON; invalid UTF-8 is replaced, never thrown on.
std::string dump(const ojson& j);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_OUTPUT_HPP
