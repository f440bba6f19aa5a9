// The waiting line on a terminal and in a log, and the JSON progress
// stream of --json. See progress.hpp.
#include "cli/progress.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "cli/lease_view.hpp"
#include "cli/output.hpp"
#include "offload_lock/describe.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

namespace {

bool g_waiting_line = false;  // a waiting line is on the terminal now

// One holder as the progress stream shows it: the `--json` object of the
// lock, plus what the holder declared (null when undeclared).
ojson holder_json(const info& i) {
  ojson j = to_json(i);
  j["priority"] = i.held ? ojson(i.priority) : ojson();
  j["expectMs"] = i.held && i.expected.count() > 0 ? ojson(i.expected.count()) : ojson();
  // From the holder's declared duration and how long it has held the lock
  // now: the library advances held_for between looks, and freeInMs must
  // count down with it.
  j["freeInMs"] = !i.held                     ? ojson(0)
                  : i.expected.count() > 0    ? ojson(std::max<std::int64_t>(0, (i.expected - i.held_for).count()))
                                              : ojson();
  return j;
}

// One line of the stream. Printable ASCII only: every control character,
// and every non-ASCII one (C1 controls, bidi overrides), reaches the reader
// as a JSON escape, so the line can be shown on a terminal as it is.
std::string progress_line(const wait_progress& p, const wait_place& place, int& last_position) {
  ojson j;
  j["event"] = "waiting";
  const int position = place.position > 0 ? place.position : p.position;
  // A new place in line is a change too, whichever look saw it first.
  j["changed"] = p.changed || position != last_position;
  last_position = position;
  j["waitedMs"] = p.waited.count();
  j["position"] = position > 0 ? ojson(position) : ojson();
  j["etaMs"] = place.eta ? ojson(place.eta->count()) : ojson();
  ojson hs = ojson::array();
  for (const auto& h : p.holders) hs.push_back(holder_json(h));
  j["holders"] = std::move(hs);
  // The lock is held: the gpulease lease is what it waits for (null
  // otherwise), as `status --json` shows the lease.
  std::optional<lease_board> lease;
  if (p.lease) lease = lease_board{find_lease(), *p.lease};
  j["gpulease"] = lease_json(lease);
  // ensure_ascii: DEL and everything above it escaped too.
  return j.dump(-1, ' ', true, ojson::error_handler_t::replace) + "\n";
}

// A wait that could not look at the lock says why, once (an etcd lock
// whose cluster cannot be reached: the library keeps trying): the one
// holder reported carries the problem.
const std::string* problem_of(const wait_progress& p) {
  return p.holders.size() == 1 && !p.holders[0].problem.empty() ? &p.holders[0].problem : nullptr;
}

std::string problem_line(const std::string& problem) {
  ojson j;
  j["event"] = "problem";
  j["message"] = problem;
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
    o.on_progress = [base = o.path, last = -1](const wait_progress& p) mutable {
      if (const std::string* problem = problem_of(p)) {
        if (p.changed) os::write_stderr(problem_line(*problem));
        return;
      }
      os::write_stderr(progress_line(p, place_in_line(base), last));
    };
    return;
  }
  const int width = os::terminal_width(os::standard_error);
  if (width > 0) {
    // A terminal: one line, rewritten in place every second.
    o.progress_every = std::chrono::seconds(1);
    o.on_progress = [width, base = o.path](const wait_progress& p) {
      if (const std::string* problem = problem_of(p)) {
        if (!p.changed) return;
        end_waiting_line();
        say(*problem);
        return;
      }
      std::string line = "offload-lock: waiting " + describe_duration(p.waited) + " for " +
                         printable(describe_wait(p, base, place_in_line(base)));
      if (static_cast<int>(line.size()) >= width) line.resize(static_cast<std::size_t>(std::max(1, width - 1)));
      os::write_stderr("\r\x1b[K" + line);
      g_waiting_line = true;
    };
  } else {
    // A log: a line when the holder changes, and a reminder now and then.
    o.progress_every = a.remind == std::chrono::milliseconds::max() ? std::chrono::milliseconds(0) : a.remind;
    o.on_progress = [base = o.path](const wait_progress& p) {
      if (const std::string* problem = problem_of(p)) {
        if (p.changed) say(*problem);
        return;
      }
      const std::string what = describe_wait(p, base, place_in_line(base));
      if (p.changed) say("waiting for " + what);
      else say("still waiting for " + what + "; waited " + describe_duration(p.waited));
    };
  }
}

void end_waiting_line() {
  if (g_waiting_line) os::write_stderr("\r\x1b[K");
  g_waiting_line = false;
}

}  // namespace offload_lock::cli
