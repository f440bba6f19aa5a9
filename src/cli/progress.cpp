// The waiting line on a terminal and in a log, and the JSON progress
// stream of --json. See progress.hpp.
#include "cli/progress.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cli/output.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

// The slot whose lock is at `slot_path`, a slot of the lock at `base`.
std::string slot_name(const std::string& base, const std::string& slot_path) {
  const std::string prefix = base + ".gpu";
  if (slot_path.size() > prefix.size() && slot_path.compare(0, prefix.size(), prefix) == 0)
    return "gpu" + slot_path.substr(prefix.size());
  return "gpu0";
}

std::string holders_text(const std::string& base, const std::vector<info>& hs) {
  if (hs.size() == 1) {
    const info& i = hs[0];
    return who(i) + ", held for " + describe_duration(i.held_for);
  }
  std::string s = "any of " + std::to_string(hs.size()) + " GPUs:";
  for (std::size_t k = 0; k < hs.size(); ++k)
    s += std::string(k ? ";" : "") + " " + slot_name(base, hs[k].path) + " " + who(hs[k]) + " " +
         describe_duration(hs[k].held_for);
  return s;
}

bool g_waiting_line = false;  // a waiting line is on the terminal now

// One holder as the progress stream shows it: the `--json` object of the
// lock, plus what the holder declared (null when undeclared).
ojson holder_json(const info& i) {
  ojson j = to_json(i);
  j["priority"] = i.held ? ojson(i.priority) : ojson();
  j["expectMs"] = i.held && i.expected.count() > 0 ? ojson(i.expected.count()) : ojson();
  j["freeInMs"] = !i.held ? ojson(0) : i.expected_free_in ? ojson(i.expected_free_in->count()) : ojson();
  return j;
}

// One line of the stream. Printable ASCII only: every control character,
// and every non-ASCII one (C1 controls, bidi overrides), reaches the reader
// as a JSON escape, so the line can be shown on a terminal as it is.
std::string progress_line(const wait_progress& p) {
  ojson j;
  j["event"] = "waiting";
  j["changed"] = p.changed;
  j["waitedMs"] = p.waited.count();
  j["position"] = p.position > 0 ? ojson(p.position) : ojson();
  ojson hs = ojson::array();
  for (const auto& h : p.holders) hs.push_back(holder_json(h));
  j["holders"] = std::move(hs);
  // ensure_ascii: DEL and everything above it escaped too.
  return j.dump(-1, ' ', true, ojson::error_handler_t::replace) + "\n";
}

}  // namespace

void report_waiting(lock_options& o, const args& a) {
  if (a.quiet) return;
  if (a.json) {
    // For programs (compat/node's onProgress): one object per line, when
    // the holder changes and every --remind, on a terminal too (no line
    // rewritten in place).
    o.progress_every = a.remind == std::chrono::milliseconds::max() ? std::chrono::milliseconds(0) : a.remind;
    o.on_progress = [](const wait_progress& p) { os::write_stderr(progress_line(p)); };
    return;
  }
  const int width = os::terminal_width(os::standard_error);
  if (width > 0) {
    // A terminal: one line, rewritten in place every second.
    o.progress_every = std::chrono::seconds(1);
    o.on_progress = [width, base = o.path](const wait_progress& p) {
      std::string line =
          "offload-lock: waiting " + describe_duration(p.waited) + " for " + printable(holders_text(base, p.holders));
      if (static_cast<int>(line.size()) >= width) line.resize(static_cast<std::size_t>(std::max(1, width - 1)));
      os::write_stderr("\r\x1b[K" + line);
      g_waiting_line = true;
    };
  } else {
    // A log: a line when the holder changes, and a reminder now and then.
    o.progress_every = a.remind == std::chrono::milliseconds::max() ? std::chrono::milliseconds(0) : a.remind;
    o.on_progress = [base = o.path](const wait_progress& p) {
      if (p.changed) say("waiting for " + holders_text(base, p.holders));
      else say("still waiting for " + holders_text(base, p.holders) + "; waited " + describe_duration(p.waited));
    };
  }
}

void end_waiting_line() {
  if (g_waiting_line) os::write_stderr("\r\x1b[K");
  g_waiting_line = false;
}

}  // namespace offload_lock::cli
