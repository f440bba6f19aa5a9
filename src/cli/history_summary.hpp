// The sums of a lock's history: held time, acquisitions, waits, crashes,
// in all and by label, user or GPU slot, and its most recent entries; what
// `history`, `status --prometheus`, `top` and `serve` show of it.
#ifndef OFFLOAD_LOCK_SRC_CLI_HISTORY_SUMMARY_HPP
#define OFFLOAD_LOCK_SRC_CLI_HISTORY_SUMMARY_HPP

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "offload_lock/history.hpp"

namespace offload_lock::cli {

enum class grouping { none, label, user, gpu };

// One group's sums (or all of them). Outcomes are the entries' own words:
// "acquired", "timed-out", "cancelled" for waits, "released", "lost",
// "crashed" (and whatever later versions add) for holds.
struct usage_sums {
  std::string key;  // the label, the uid, "gpu0" / "any"; empty for the totals
  std::map<std::string, std::int64_t> waits;                   // acquire outcome -> count
  std::map<std::string, std::vector<std::int64_t>> waited_ms;  // acquire outcome -> each wait
  std::map<std::string, std::int64_t> holds;                   // hold outcome -> count
  std::map<std::string, std::int64_t> held_ms;                 // hold outcome -> time held
  std::int64_t held_now_ms = 0;  // the current holders, so far

  std::int64_t acquisitions() const { return count(waits, "acquired"); }
  std::int64_t crashes() const { return count(holds, "crashed"); }
  std::int64_t held_total_ms() const;
  // Every wait, whatever it ended in, sorted.
  std::vector<std::int64_t> all_waits() const;
  static std::int64_t count(const std::map<std::string, std::int64_t>& m, const std::string& k);
};

// The value at quantile q (0 to 1) of sorted values, nearest rank; nullopt
// when there are none.
std::optional<std::int64_t> quantile(const std::vector<std::int64_t>& sorted, double q);

struct summary {
  usage_sums total;
  std::vector<usage_sums> groups;          // with a grouping: by held time, then key
  std::vector<history_entry> recent;  // the last ones, oldest first
  history_read read;
};

// Reads the history of the lock at `path` from `since_ms` (0: all) and sums
// it. Each end of a hold counts once: a holder's own entry gives its held
// time; an end another process reported (a takeover after a crash, a
// release by token from elsewhere) adds to the holder's sums only when the
// holder's own entry of that acquisition is there (held time from its
// acquisition to the report), else it is counted under its reporter and
// adds no held time. `current_tokens`: the tokens of the locks held now,
// whose held time so far is held_now_ms. `recent`: how many of the last
// entries to keep.
summary summarize(const std::string& path, std::int64_t since_ms, grouping by, std::size_t recent,
                  const std::vector<std::string>& current_tokens, std::int64_t now_ms, std::size_t tail_bytes = 0);

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_HISTORY_SUMMARY_HPP
