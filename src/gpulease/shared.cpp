// A directory shared by both protocols. See shared.hpp.
#include "gpulease/shared.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "gpulease/judge.hpp"
#include "gpulease/location.hpp"
#include "gpulease/record.hpp"

namespace offload_lock::detail::gpulease {

lease_marks lease_marks_of(const std::vector<std::string>& names, const std::optional<std::string>& meta) {
  lease_marks m;
  for (const auto& n : names)
    if (is_gpulease_name(n)) {
      if (!m.lease_files || n < m.first_lease_file) m.first_lease_file = n;
      m.lease_files = true;
    }
  if (meta) {
    auto r = parse_record(*meta);
    m.claim = r && r->epoch >= 1;
    if (m.claim) {
      // Node's view: meta.pid is a number (parse_record accepted the JSON,
      // but Node's JSON.parse refuses what Go repairs: read it again).
      auto j = nlohmann::json::parse(*meta, nullptr, /*allow_exceptions=*/false);
      m.v1_record = j.is_object() && j.contains("pid") && j["pid"].is_number();
    }
  }
  return m;
}

std::int64_t incomplete_claim_grace_ms(const lease_marks& m, std::int64_t v1_grace_ms) {
  return m.lease_files ? std::max(v1_grace_ms, claim_grace_ms) : v1_grace_ms;
}

bool allowed_in_shared_lock_dir(const std::string& name) {
  return name == claim_name || name.rfind(".meta.json.", 0) == 0 || is_gpulease_name(name);
}

}  // namespace offload_lock::detail::gpulease
