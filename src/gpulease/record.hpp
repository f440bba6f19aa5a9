// A gpulease claim: the meta.json of a gpulease lease directory, and the
// small numeric files beside it (the heartbeat hb.<epoch>, the fencing
// counter `epoch`), read exactly as gpulease's Go code reads them and
// written the way it writes them (doc/protocol-gpulease.md, "The claim").
// Pure: no file system, no clock.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_RECORD_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_RECORD_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace offload_lock::detail::gpulease {

// Reads of a claim stop here; a larger file is unreadable (an unknown, never
// a reclaim), where gpulease would read it whole.
inline constexpr std::size_t claim_cap = std::size_t{1024} * 1024;
// Go's encoding/json refuses JSON nested deeper than this.
inline constexpr int go_max_depth = 10000;

// The claim's fields under gpulease's key names (in brackets).
struct record {
  std::uint64_t epoch = 0;  // [epoch] the fencing token of this lease
  std::string lease_class;  // [class] "media" or "text" when gpulease wrote it; read as any string
  std::int64_t pid = 0;     // [holder.pid]
  // [holder.start_time_ms]: despite the name, on Linux the holder's start in
  // clock ticks since boot (field 22 of /proc/<pid>/stat), compared only for
  // equality; 0 when not recorded.
  std::int64_t start_ticks = 0;
  std::string job_id, origin, reason;  // [job_id] [origin] [reason], omitted when empty
  std::int64_t acquired_at_ms = 0;     // [acquired_at_ms] epoch ms
  std::int64_t expires_at_ms = 0;      // [expires_at_ms] the end of the declared window
  std::int64_t renewed_at_ms = 0;      // [renewed_at_ms] stamped at acquisition, never rewritten
};

// What Go's json.Unmarshal into gpulease's record type makes of `bytes`:
// nullopt exactly when it returns an error. Its rules: strict JSON (no byte
// order mark, nothing after the value, nesting at most go_max_depth); the
// top-level `null` is no error and leaves every field zero; keys match the
// field names case-insensitively (and U+017F, U+212A fold to s, k), the
// last occurrence winning; unknown keys are ignored; a JSON null leaves a
// field as it is; any other type mismatch (a string epoch, a fraction or an
// exponent, a negative or too large number for its type, an array for the
// holder) is an error, even when a later occurrence of the key is fine.
// Invalid UTF-8 and unpaired surrogate escapes in strings are read as
// U+FFFD, as Go does. Never throws.
std::optional<record> parse_record(std::string_view bytes);

// The bytes gpulease writes for `r` (Go's json.Marshal): the keys in the
// order above, no spaces, job_id, origin and reason left out when empty,
// strings escaped as Go escapes them (<, >, & and U+2028/9 as \u00XX).
std::string serialize_record(const record& r);

// The same keys appended to another JSON object: `object` is a complete
// JSON object ("{...}"); the result has its keys first, then the record's.
// A meta.json made so is a v1 lock record and a gpulease claim at once
// (doc/protocol-gpulease.md, "One record for both").
std::string append_record(std::string_view object, const record& r);

// Go's strings.TrimSpace: leading and trailing Unicode white space.
std::string_view trim_space(std::string_view s);
// strings.TrimSpace then strconv.ParseInt(s, 10, 64): the heartbeat file.
// An optional sign, decimal digits, within int64.
std::optional<std::int64_t> parse_go_int(std::string_view s);
// strings.TrimSpace then strconv.ParseUint(s, 10, 64): the fencing counter
// and GPU_LEASE_EPOCH. Decimal digits only, within uint64.
std::optional<std::uint64_t> parse_go_uint(std::string_view s);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_RECORD_HPP
