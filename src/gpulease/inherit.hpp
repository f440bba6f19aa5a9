// A lease passed down by a parent (doc/protocol-gpulease.md, "Children"):
// gpulease hands a child GPU_LEASE_DIR, GPU_LEASE_EPOCH and GPU_LEASE_CLASS,
// and the child holds through its parent's lease instead of acquiring
// again (which would wait on its own parent). The rules are those of
// gpulease's own inheriting side: all three or none; an epoch that is a
// positive decimal number; a class media or text; and the lease still
// current at that directory with that epoch. Anything else is refused,
// never silently replaced by a fresh acquisition.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_INHERIT_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_INHERIT_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpulease/hold.hpp"
#include "gpulease/judge.hpp"

namespace offload_lock::detail::gpulease {

inline constexpr const char* env_lease_dir = "GPU_LEASE_DIR";
inline constexpr const char* env_lease_epoch = "GPU_LEASE_EPOCH";
inline constexpr const char* env_lease_class = "GPU_LEASE_CLASS";

struct inherited_lease {
  std::string dir;  // as given, trimmed
  std::uint64_t epoch = 0;
  lease_class cls = lease_class::media;
  // The same three variables, to pass on to a grandchild.
  std::vector<std::pair<std::string, std::string>> child_environment() const;
};

struct inheritance {
  enum class kind {
    none,     // no GPU_LEASE_* at all
    offered,  // well-formed, not yet confirmed against the lease directory
    current,  // confirmed: the lease is held with that epoch now
    refused,  // malformed, or no longer current: `why`
  } k = kind::none;
  std::optional<inherited_lease> lease;  // offered, current (and refused once well-formed)
  std::string why;
};

using env_lookup_fn = std::function<std::optional<std::string>(const std::string&)>;

// The variables as given (trimmed as gpulease trims them). Pure.
inheritance read_inheritance(const env_lookup_fn& env);
// An offered lease checked against its directory: current when the claim
// there is alive by judge_lease and carries that epoch; refused otherwise
// (naming what is there). Other kinds are returned as they are.
inheritance confirm_inheritance(inheritance in, std::int64_t now_ms, const lease_process_view& pv);
// Both, from this process's environment, with the real kernel's answers.
inheritance inheritance_now();

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_INHERIT_HPP
