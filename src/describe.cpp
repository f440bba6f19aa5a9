// The grammar of durations and priorities, and the sentences naming a
// holder, a state and a wait. See include/offload_lock/describe.hpp.
#include "offload_lock/describe.hpp"

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <utility>

#include "offload_lock/lock.hpp"
#include "offload_lock/waiters.hpp"
#include "os/process.hpp"
#include "os/programs.hpp"

namespace offload_lock {

namespace {

namespace sys = detail::sys;

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// A plain decimal number: digits, at most one '.', at least one digit.
std::optional<double> decimal(std::string_view s) {
  int dots = 0, digits = 0;
  for (char c : s) {
    if (c == '.') ++dots;
    else if (c >= '0' && c <= '9') ++digits;
    else return std::nullopt;
  }
  if (dots > 1 || digits == 0 || digits > 18) return std::nullopt;
  return std::strtod(std::string(s).c_str(), nullptr);
}

// Ten years is far beyond any real wait; a larger value is a typo.
constexpr double longest_ms = 315'360'000'000.0;

// The slot whose lock is at `slot_path`, a slot of the lock at `base`.
std::string slot_name(const std::string& base, const std::string& slot_path) {
  const std::string prefix = base + ".gpu";
  if (slot_path.size() > prefix.size() && slot_path.compare(0, prefix.size(), prefix) == 0)
    return "gpu" + slot_path.substr(prefix.size());
  return "gpu0";
}

}  // namespace

std::optional<milliseconds> parse_duration(std::string_view text) {
  if (text == "forever") return wait_forever;
  double total = 0;
  if (auto v = decimal(text)) {
    total = *v * 1000.0;  // a bare number is seconds
  } else {
    // Groups of a number and a unit, each unit smaller than the one before.
    static const std::pair<std::string_view, double> units[] = {
        {"d", 86'400'000.0}, {"h", 3'600'000.0}, {"m", 60'000.0}, {"s", 1000.0}, {"ms", 1.0}};
    std::size_t at = 0, next_unit = 0;
    if (text.empty()) return std::nullopt;
    while (at < text.size()) {
      const std::size_t num_end = text.find_first_not_of("0123456789.", at);
      if (num_end == std::string_view::npos || num_end == at) return std::nullopt;
      std::size_t unit_end = text.find_first_not_of("abcdefghijklmnopqrstuvwxyz", num_end);
      if (unit_end == std::string_view::npos) unit_end = text.size();
      const std::string_view unit = text.substr(num_end, unit_end - num_end);
      std::size_t u = next_unit;
      while (u < std::size(units) && unit != units[u].first) ++u;
      if (u == std::size(units)) return std::nullopt;
      auto v = decimal(text.substr(at, num_end - at));
      if (!v) return std::nullopt;
      total += *v * units[u].second;
      next_unit = u + 1;
      at = unit_end;
    }
  }
  total = std::ceil(total);
  if (!std::isfinite(total) || total > longest_ms) return std::nullopt;
  return milliseconds(static_cast<long long>(total));
}

std::string describe_duration(milliseconds d) {
  long long ms = d.count();
  std::string sign = ms < 0 ? "-" : "";
  // -ms of the most negative value does not exist: one millisecond less.
  if (ms < 0) ms = ms == std::numeric_limits<long long>::min() ? std::numeric_limits<long long>::max() : -ms;
  auto two = [](long long v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (ms < 1000) return sign + std::to_string(ms) + "ms";
  long long s = ms / 1000;
  if (s < 60) return sign + std::to_string(s) + "s";
  if (s < 3600) return sign + std::to_string(s / 60) + "m" + two(s % 60) + "s";
  return sign + std::to_string(s / 3600) + "h" + two(s / 60 % 60) + "m";
}

std::optional<int> parse_priority(std::string_view text) {
  if (text == "batch") return priority_batch;
  if (text == "normal") return priority_normal;
  if (text == "interactive") return priority_interactive;
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.size() > 3 || !all_digits(digits)) return std::nullopt;
  int magnitude = 0;
  for (const char d : digits) magnitude = magnitude * 10 + (d - '0');
  const int v = negative ? -magnitude : magnitude;
  if (v < min_priority || v > max_priority) return std::nullopt;
  return v;
}

std::string describe_holder(const info& i) {
  std::string label = i.label;
  // A v1 holder records no label: the kernel's name of its process, when
  // that process is on this host.
  if (label.empty() && i.pid && (i.host.empty() || i.host == sys::host_name()))
    if (auto comm = sys::command_name(*i.pid); comm && !comm->empty()) label = *comm;
  if (label.empty()) label = "an unnamed holder";
  std::string s = label + " (pid " + (i.pid ? std::to_string(*i.pid) : "unknown");
  if (!i.host.empty()) s += ", host " + i.host;
  return s + ")";
}

std::string describe_state(const info& i, const std::string& more) {
  if (i.held) return "held by " + describe_holder(i) + " for " + describe_duration(i.held_for) + more;
  if (!i.present) return "free";
  return "free (stale lock of " + describe_holder(i) + ": " + i.stale_reason.value_or("unknown") + more + ")";
}

wait_place place_in_line(const std::string& path) {
  const std::int64_t self = sys::self_pid();
  for (const auto& w : waiters(path))
    if (w.pid == self) return {w.position, w.eta};
  return {};
}

std::string describe_lease_holder(const lease_info& i) {
  std::string s = (i.lease_class.empty() ? std::string("unclassed") : i.lease_class) + " lease (pid " +
                  std::to_string(i.pid) + ", epoch " + std::to_string(i.epoch);
  if (!i.reason.empty()) s += ", reason \"" + i.reason + "\"";
  if (!i.origin.empty()) s += ", origin \"" + i.origin + "\"";
  return s + ")";
}

std::string describe_wait(const wait_progress& p, const std::string& base, const wait_place& place) {
  std::string s;
  if (p.lease) {
    // The lock is this waiter's already: only the lease keeps it waiting.
    const lease_info& l = *p.lease;
    if (l.state == lease_state::unknown) return "the gpulease lease, which cannot be judged (" + l.why + ")";
    if (l.in_progress || l.pid == 0) return "the gpulease lease, whose claim is being written";
    return "the gpulease lease: " + describe_lease_holder(l) + ", held for " + describe_duration(l.held_for);
  }
  if (p.holders.size() == 1) {
    const info& i = p.holders[0];
    s = describe_holder(i) + ", held for " + describe_duration(i.held_for);
  } else {
    s = "any of " + std::to_string(p.holders.size()) + " GPUs:";
    for (std::size_t k = 0; k < p.holders.size(); ++k)
      s += std::string(k ? ";" : "") + " " + slot_name(base, p.holders[k].path) + " " +
           describe_holder(p.holders[k]) + " " + describe_duration(p.holders[k].held_for);
  }
  const int position = place.position > 0 ? place.position : p.position;
  if (position > 0) {
    s += "; #" + std::to_string(position) + " in line";
    if (place.eta) s += ", ETA ~" + describe_duration(*place.eta);
  }
  return s;
}

}  // namespace offload_lock
