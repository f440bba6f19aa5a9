// The sums of a lock's history. See history_summary.hpp.
#include "cli/history_summary.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace offload_lock::cli {

std::int64_t usage_sums::count(const std::map<std::string, std::int64_t>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

std::int64_t usage_sums::held_total_ms() const {
  std::int64_t t = held_now_ms;
  for (const auto& [outcome, ms] : held_ms) t += ms;
  return t;
}

std::vector<std::int64_t> usage_sums::all_waits() const {
  std::vector<std::int64_t> all;
  for (const auto& [outcome, v] : waited_ms) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  return all;
}

std::optional<std::int64_t> quantile(const std::vector<std::int64_t>& sorted, double q) {
  if (sorted.empty()) return std::nullopt;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

namespace {

// An acquisition whose holder has written no end of its own yet.
struct open_hold {
  std::uint32_t uid = 0;
  std::int64_t at = 0;
  std::string label;
  int gpu = 0;
};

// The end of a hold that waits for the whole read: reported by someone
// else, or its acquisition is not in what was read.
struct pending_end {
  std::uint32_t uid = 0;
  std::int64_t at = 0, held_ms = -1;
  std::string token, outcome, label;
  int gpu = 0;
  std::optional<std::uint32_t> holder_uid;
};

// The end of each author's file read for the most recent entries: a few
// hundred lines each, far more than any view shows.
constexpr std::size_t kRecentTailBytes = std::size_t{64} * 1024;

std::string gpu_key(int gpu) { return gpu >= 0 ? "gpu" + std::to_string(gpu) : "any"; }

class summer {
 public:
  summer(grouping by, std::size_t recent) : by_(by), recent_(recent) {}

  void visit(const history_entry& e) {
    keep_recent(e);
    if (e.event == "acquire" && !e.outcome.empty()) {
      for (usage_sums* u : {&total_, group(e.label, e.uid, e.gpu)}) {
        if (!u) continue;
        ++u->waits[e.outcome];
        if (e.waited_ms >= 0) u->waited_ms[e.outcome].push_back(e.waited_ms);
      }
      if (e.outcome == "acquired" && !e.token.empty()) open_[e.token] = {e.uid, e.at, e.label, e.gpu};
    } else if (e.event == "hold" && !e.outcome.empty()) {
      auto it = e.token.empty() ? open_.end() : open_.find(e.token);
      const bool own = it != open_.end() && it->second.uid == e.uid && e.by.empty() && e.outcome != "crashed";
      if (own) {
        add_hold(e.outcome, e.held_ms, it->second.label, it->second.uid, it->second.gpu);
        open_.erase(it);
      } else {
        pending_.push_back({e.uid, e.at, e.held_ms, e.token, e.outcome, e.label, e.gpu, e.holder_uid});
      }
    }
  }

  summary finish(const std::vector<std::string>& current_tokens, std::int64_t now) {
    for (const auto& p : pending_) {
      auto it = p.token.empty() ? open_.end() : open_.find(p.token);
      if (it != open_.end()) {
        // The holder's own acquisition is here: the report ends it.
        const open_hold& h = it->second;
        const std::int64_t end = std::min(p.at, now);
        add_hold(p.outcome, std::max<std::int64_t>(0, end - h.at), h.label, h.uid, h.gpu);
        open_.erase(it);
        continue;
      }
      // Nothing confirms whose hold it was: the reporter's word, and held
      // time only when the reporter speaks of its own hold.
      const bool about_itself = p.outcome != "crashed" || p.holder_uid == p.uid;
      add_hold(p.outcome, about_itself ? p.held_ms : -1, p.label, p.uid, p.gpu);
    }
    for (const auto& [token, h] : open_)
      if (std::find(current_tokens.begin(), current_tokens.end(), token) != current_tokens.end()) {
        const std::int64_t so_far = std::max<std::int64_t>(0, now - h.at);
        total_.held_now_ms += so_far;
        if (usage_sums* u = group(h.label, h.uid, h.gpu)) u->held_now_ms += so_far;
      }
    summary s;
    s.total = std::move(total_);
    for (auto& [key, u] : groups_) s.groups.push_back(std::move(u));
    std::sort(s.groups.begin(), s.groups.end(), [](const usage_sums& a, const usage_sums& b) {
      if (a.held_total_ms() != b.held_total_ms()) return a.held_total_ms() > b.held_total_ms();
      return a.key < b.key;
    });
    // Oldest first; entries of one moment in the order they were read.
    std::stable_sort(recent_heap_.begin(), recent_heap_.end(),
                     [](const history_entry& a, const history_entry& b) { return a.at < b.at; });
    s.recent = std::move(recent_heap_);
    return s;
  }

 private:
  // A min-heap on `at`: the front is the oldest of those kept.
  static bool later(const history_entry& a, const history_entry& b) { return a.at > b.at; }

  void keep_recent(const history_entry& e) {
    if (recent_ == 0) return;
    if (recent_heap_.size() < recent_) {
      recent_heap_.push_back(e);
      std::push_heap(recent_heap_.begin(), recent_heap_.end(), later);
    } else if (e.at >= recent_heap_.front().at) {
      std::pop_heap(recent_heap_.begin(), recent_heap_.end(), later);
      recent_heap_.back() = e;
      std::push_heap(recent_heap_.begin(), recent_heap_.end(), later);
    }
  }

  usage_sums* group(const std::string& label, std::uint32_t uid, int gpu) {
    std::string key;
    switch (by_) {
      case grouping::none: return nullptr;
      case grouping::label: key = label; break;
      case grouping::user: key = std::to_string(uid); break;
      case grouping::gpu: key = gpu_key(gpu); break;
    }
    auto it = groups_.find(key);
    if (it == groups_.end()) {
      it = groups_.emplace(key, usage_sums{}).first;
      it->second.key = key;
    }
    return &it->second;
  }

  void add_hold(const std::string& outcome, std::int64_t held_ms, const std::string& label, std::uint32_t uid, int gpu) {
    for (usage_sums* u : {&total_, group(label, uid, gpu)}) {
      if (!u) continue;
      ++u->holds[outcome];
      if (held_ms >= 0) u->held_ms[outcome] += held_ms;
    }
  }

  grouping by_;
  std::size_t recent_;
  usage_sums total_;
  std::unordered_map<std::string, usage_sums> groups_;
  std::unordered_map<std::string, open_hold> open_;
  std::vector<pending_end> pending_;
  std::vector<history_entry> recent_heap_;
};

}  // namespace

summary summarize(const std::string& path, std::int64_t since_ms, grouping by, std::size_t recent,
                  const std::vector<std::string>& current_tokens, std::int64_t now_ms, std::size_t tail_bytes) {
  // The sums from every line; the recent entries from the ends of the files
  // only (they are there), which spares copying each line that is, for a
  // moment, among the newest read so far.
  summer s(by, tail_bytes > 0 ? recent : 0);
  history_read read = read_history(path, since_ms, [&](const history_entry& e) { s.visit(e); }, tail_bytes);
  summary out = s.finish(current_tokens, now_ms);
  out.read = std::move(read);
  if (tail_bytes == 0 && recent > 0 && out.read.kept) {
    summer last(grouping::none, recent);
    (void)read_history(path, since_ms, [&](const history_entry& e) { last.visit(e); }, kRecentTailBytes);
    out.recent = last.finish({}, now_ms).recent;
  }
  return out;
}

}  // namespace offload_lock::cli
