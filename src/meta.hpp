// meta.json: the bytes offload-lock writes (doc/protocol.md B2, B8) and how every
// participant — Node's readMeta(), Go's json.Unmarshal, offload-lock — reads
// whatever bytes it finds there (doc/protocol.md A3, A5).
#ifndef OFFLOAD_LOCK_SRC_META_HPP
#define OFFLOAD_LOCK_SRC_META_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace offload_lock::detail {

// The file in a lock directory that names its holder.
inline constexpr const char* meta_file_name = "meta.json";
// Reads of meta.json stop here; a larger file counts as unreadable.
inline constexpr std::size_t meta_cap = std::size_t{1024} * 1024;
// Deeper JSON nesting than this counts as unparseable (a bound on work).
inline constexpr int meta_max_depth = 256;

// What offload-lock writes.
struct meta_record {
  std::int64_t pid = 0;
  std::int64_t started_at = 0;  // epoch ms
  std::string token;
  std::string label;
  std::string host;
  std::string boot_id;
  std::int64_t proc_start = 0;   // the holder process's start, epoch ms
  std::uint64_t proc_ticks = 0;  // the same, in clock ticks since boot (exact)
  std::uint64_t pid_ns = 0;      // the inode of the holder's pid namespace; 0: unknown (not written)
  int priority = 0;              // lock_options::priority (written when not 0)
  std::int64_t expect_ms = 0;    // lock_options::expected; 0: undeclared (not written)
  std::int64_t max_hold_ms = 0;  // lock_options::max_hold; 0: none (not written)
  // The queue entries ("<user dir>/<name>") this holder's acquisition passed
  // over and still queued, so that those behind it pass them over too, and
  // so that each of those waiters learns it and queues again (not written
  // when empty).
  std::vector<std::string> passed_over;
  int gpu = -1;                  // the GPU slot this lock is (written when >= 0)
  bool can_yield = false;        // lock_options::on_yield_request is set (written when true)
};

// At most this many passed-over pids are written or read.
inline constexpr std::size_t max_passed_over = 64;

// `{"pid":N,"startedAt":MS,...}`: the first two keys byte for byte as the Node
// runners write them, then the extra keys. No spaces, no newline.
std::string serialize(const meta_record& m);

// The bytes of one meta.json, as each participant understands them.
struct parsed_meta {
  bool parsed = false;     // strict JSON (Node's JSON.parse would accept it)
  // Node's readMeta() yields something falsy: unparseable, or JSON null,
  // false, 0 or "". Node's isStale() calls that stale.
  bool node_null = true;
  bool is_object = false;  // a JSON object (not an array)
  // `meta.pid` when `typeof meta.pid === 'number'` in Node.
  std::optional<double> js_pid;
  // Go's json.Unmarshal into struct{Pid int; StartedAt int64}.
  bool go_ok = false;
  std::int64_t go_pid = 0;
  std::int64_t go_started_at = 0;
  // The keys offload-lock reads, present only with the right JSON type.
  std::optional<std::int64_t> started_at;
  std::string token, label, host, boot_id, tool;
  std::optional<std::int64_t> proc_start;
  std::optional<std::uint64_t> proc_ticks;
  std::optional<std::uint64_t> pid_ns;  // "pidNs": the holder's pid namespace
  std::optional<std::int64_t> priority, expect_ms;  // "priority", "expectMs"
  std::optional<std::int64_t> max_hold_ms;          // "maxHoldMs"
  std::vector<std::string> passed_over;             // "passedOver": entry names of the registry's form
  std::optional<std::int64_t> gpu;                  // "gpu": the slot, 0 to 1023
  bool can_yield = false;                           // "canYield": true
};

// Never throws, whatever the bytes. Invalid UTF-8 is read as U+FFFD the way
// Node's utf8 decoding and Go's decoder do; a byte-order mark is refused as
// JSON.parse refuses it.
parsed_meta parse_meta(std::string_view bytes);

// Replaces each invalid UTF-8 sequence with U+FFFD (maximal subparts, as the
// WHATWG decoder Node uses).
std::string repair_utf8(std::string_view in);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_META_HPP
