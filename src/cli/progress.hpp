// The waiting line on a terminal and in a log, and the JSON progress stream.
// While a command waits for the lock: one line rewritten in place on a
// terminal, or in a log a line when the holder changes and a reminder now
// and then (--remind). With --json, wherever stderr goes, one JSON object
// per line at those same moments:
//   {"event":"waiting","changed":B,"waitedMs":N,"position":P|null,
//    "etaMs":E|null,"holders":[{...the --json object of each lock waited
//    for, plus "priority","expectMs","freeInMs"}],"gpulease":null|{...}}
// (gpulease: once the lock is held and the gpulease lease that goes with it
// is waited for, that lease as `status --json` shows it, holders empty)
// (position 1 is next; null when unknown; etaMs as `status` gives this
// waiter's ETA; freeInMs counts down as heldForMs counts up). The line
// names the place too: "waiting 12s for X (pid N), held for 3m; #2 in
// line, ETA ~20m" (offload_lock::describe_wait).
#ifndef OFFLOAD_LOCK_SRC_CLI_PROGRESS_HPP
#define OFFLOAD_LOCK_SRC_CLI_PROGRESS_HPP

#include "cli/args.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::cli {

// Makes an acquisition with `o` report its wait on stderr, as above; with
// --quiet, nothing (--quiet wins over --json).
void report_waiting(lock_options& o, const args& a);

// Ends the in-place line, if one is shown, before anything else is written
// to stderr.
void end_waiting_line();

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_PROGRESS_HPP
