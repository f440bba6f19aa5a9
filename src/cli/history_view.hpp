// The lock's history as people and programs see it: one entry as a line of
// text or a JSON object, the sums as JSON, and the counters and the wait
// histogram of the Prometheus exposition. Every string of an entry is its
// author's word: the text forms are escaped here, the JSON forms escaped
// by the JSON writer.
#ifndef OFFLOAD_LOCK_SRC_CLI_HISTORY_VIEW_HPP
#define OFFLOAD_LOCK_SRC_CLI_HISTORY_VIEW_HPP

#include <string>

#include "cli/history_summary.hpp"
#include "cli/output.hpp"

namespace offload_lock::cli {

// "render-video (pid 4242, alice) acquired gpu0 after waiting 1.2s", escaped.
// `slots`: name the GPU slot (several slots exist).
std::string entry_text(const history_entry& e, bool slots);
// "2026-06-01 12:00:03" in local time.
std::string local_time(std::int64_t epoch_ms);
// "alice", or the uid when the password database has no name for it.
std::string user_of(std::uint32_t uid);

ojson entry_json(const history_entry& e);
// {key, acquisitions, timedOut, cancelled, released, lost, crashes, heldMs,
//  heldNowMs, waits, waitP50Ms, waitP90Ms, waitMaxMs}
ojson usage_json(const usage_sums& u);
// {path, kept, since, totals, by, groups, recent, files, skipped{malformed,
//  untrusted, foreignFiles, unreadBytes}, problem}
ojson summary_json(const summary& s, const std::string& path, std::int64_t since_ms, const char* by);

// The history's families of the exposition format, labelled by lock, gpu
// and outcome: offload_lock_acquisitions_total, offload_lock_holds_total,
// offload_lock_held_seconds_total, the offload_lock_wait_seconds histogram,
// offload_lock_history_kept and offload_lock_history_skipped_lines. `s`:
// summed by GPU slot.
std::string history_metrics(const summary& s, const std::string& path);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_HISTORY_VIEW_HPP
