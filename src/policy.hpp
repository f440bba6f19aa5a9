// The site policy's rules and their one reading (offload_lock/policy.hpp).
#ifndef OFFLOAD_LOCK_SRC_POLICY_HPP
#define OFFLOAD_LOCK_SRC_POLICY_HPP

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "offload_lock/policy.hpp"

namespace offload_lock::detail {

// What a valid policy sets; 0 and empty: not set.
struct site_rules {
  std::optional<int> max_priority;
  std::map<std::string, int> user_max, group_max;
  std::int64_t default_max_hold_ms = 0, max_hold_ms = 0, default_expect_ms = 0;
  // Idle holders (idle.hpp): idle after this long with no process of its
  // own on its GPU and the GPU at most idle_percent busy; asked to yield
  // then when idle_yield.
  std::int64_t idle_after_ms = 0;
  int idle_percent = 5;
  bool idle_yield = false;
};

struct site_policy_look {
  policy_report report;
  site_rules rules;  // when honoured
};

// `<lock_path>.policy.json`.
std::string policy_path_of(const std::string& lock_path);
// The policy beside the lock at `lock_path`: looked at, trusted or not, parsed.
site_policy_look look_at_policy(const std::string& lock_path);
// `o` with the policy of the lock at `base` applied; notices as in
// with_site_policy. errc::bad_input for an invalid policy. `rules`, when
// given, gets the rules applied (none when the policy is not honoured).
result<lock_options> apply_policy(const lock_options& o, const std::string& base, std::vector<std::string>* notices,
                                  site_rules* rules = nullptr);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_POLICY_HPP
