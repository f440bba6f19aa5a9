// `offload-lock history`: the sums of the lock's history and its recent
// entries, as text or JSON; `--start` begins keeping it.
#include "cli/history.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "cli/exit_codes.hpp"
#include "cli/gpus.hpp"
#include "cli/history_view.hpp"
#include "cli/output.hpp"
#include "offload_lock/history.hpp"
#include "offload_lock/lock.hpp"
#include "posix/os.hpp"

namespace offload_lock::cli {

namespace {

constexpr std::size_t kRecent = 20;

std::string dur(std::int64_t ms) { return describe_duration(milliseconds(ms)); }

std::string plural(std::int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// "p50 1.2s, p90 3m04s, max 20m01s (45 waits)", or "none".
std::string waits_text(const usage_sums& u) {
  const auto w = u.all_waits();
  if (w.empty()) return "none";
  return "p50 " + dur(*quantile(w, 0.5)) + ", p90 " + dur(*quantile(w, 0.9)) + ", max " + dur(w.back()) + " (" +
         plural(static_cast<std::int64_t>(w.size()), "wait", "waits") + ")";
}

std::string totals_text(const usage_sums& u) {
  std::string s = "  acquisitions " + std::to_string(u.acquisitions()) + "; timed out " +
                  std::to_string(usage_sums::count(u.waits, "timed-out")) + ", cancelled " +
                  std::to_string(usage_sums::count(u.waits, "cancelled")) + "; crashes " + std::to_string(u.crashes()) + "\n";
  s += "  held " + dur(u.held_total_ms() - u.held_now_ms);
  std::string parts;
  for (const auto& [outcome, ms] : u.held_ms) parts += (parts.empty() ? "" : ", ") + printable(outcome) + " " + dur(ms);
  if (!parts.empty()) s += " (" + parts + ")";
  if (u.held_now_ms > 0) s += "; the current holders so far " + dur(u.held_now_ms);
  s += "\n  waits " + waits_text(u) + "\n";
  return s;
}

// The width of `s` in code points (the escaped texts are UTF-8).
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string groups_text(const summary& s, grouping by) {
  std::vector<std::vector<std::string>> rows;
  const char* head = by == grouping::label ? "LABEL" : by == grouping::user ? "USER" : "GPU";
  rows.push_back({head, "ACQUIRED", "HELD", "WAIT P50", "P90", "MAX", "CRASHES"});
  for (const auto& g : s.groups) {
    std::string key = g.key;
    if (by == grouping::user) key = user_of(static_cast<std::uint32_t>(std::stoul(g.key)));
    if (key.empty()) key = "(no label)";
    const auto w = g.all_waits();
    auto q = [&](double p) { return w.empty() ? std::string("-") : dur(*quantile(w, p)); };
    rows.push_back({printable(key), std::to_string(g.acquisitions()), dur(g.held_total_ms()), q(0.5), q(0.9),
                    w.empty() ? std::string("-") : dur(w.back()), std::to_string(g.crashes())});
  }
  std::vector<std::size_t> wid(rows.front().size(), 0);
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) wid[i] = std::max(wid[i], width(r[i]));
  std::string out;
  for (const auto& r : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < r.size(); ++i) {
      const std::string pad(wid[i] - width(r[i]), ' ');
      line += (i == 0 ? " " : "  ") + (i == 0 ? r[i] + pad : pad + r[i]);
    }
    out += line + "\n";
  }
  return out;
}

std::string skipped_text(const history_read& r) {
  std::vector<std::string> parts;
  if (r.malformed) parts.push_back(plural(static_cast<std::int64_t>(r.malformed), "line that is not an entry", "lines that are not entries"));
  if (r.untrusted)
    parts.push_back(plural(static_cast<std::int64_t>(r.untrusted), "line claiming another user than its file's owner",
                           "lines claiming another user than their file's owner"));
  if (r.foreign_files)
    parts.push_back(plural(static_cast<std::int64_t>(r.foreign_files), "file that is not a user's own history",
                           "files that are not a user's own history"));
  if (r.unread_bytes) parts.push_back(std::to_string(r.unread_bytes) + " bytes past a file's read limit");
  if (parts.empty()) return {};
  std::string s = "skipped: ";
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s + "\n";
}

}  // namespace

std::int64_t now_epoch_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> current_tokens(const std::string& path) {
  std::vector<std::string> tokens;
  const int n = discover_slots(path);
  for (int k = 0; k < n; ++k) {
    info i = inspect(gpu_slot_path(path, k));
    if (i.held && !i.token.empty()) tokens.push_back(i.token);
  }
  return tokens;
}

int cmd_history(const args& a, const std::string& path) {
  if (a.start_history) {
    if (auto e = start_history(path)) {
      say(e.message());
      return exit_code_for(e);
    }
    if (!a.quiet) say("the history of " + path + " is kept in " + history_dir(path));
    return exit_ok;
  }
  const std::int64_t now = now_epoch_ms();
  const std::int64_t since = a.since ? now - a.since->count() : 0;
  grouping by = grouping::none;
  if (a.by == "label") by = grouping::label;
  else if (a.by == "user") by = grouping::user;
  else if (a.by == "gpu") by = grouping::gpu;
  const summary s = summarize(path, since, by, kRecent, current_tokens(path), now);
  if (a.json) {
    std::cout << dump(summary_json(s, path, since, a.by.empty() ? nullptr : a.by.c_str())) << "\n";
    return s.read.problem.empty() ? exit_ok : exit_system;
  }
  if (!s.read.problem.empty()) {
    say(s.read.problem);
    return exit_system;
  }
  if (!s.read.kept) {
    std::cout << printable("no history is kept for " + path + " (offload-lock history --start begins one, in " +
                           history_dir(path) + ")")
              << "\n";
    return exit_ok;
  }
  std::string out = printable("history of " + path) +
                    (a.since ? ", since " + local_time(since) + " (" + dur(a.since->count()) + ")" : std::string(", all that is kept")) +
                    "\n";
  out += totals_text(s.total);
  if (by != grouping::none) out += "by " + a.by + ":\n" + groups_text(s, by);
  const bool slots = std::any_of(s.recent.begin(), s.recent.end(), [](const history_entry& e) { return e.gpu != 0; });
  if (!s.recent.empty()) out += "recent:\n";
  for (const auto& e : s.recent) out += "  " + local_time(e.at) + "  " + entry_text(e, slots) + "\n";
  out += skipped_text(s.read);
  std::cout << out;
  return exit_ok;
}

}  // namespace offload_lock::cli
