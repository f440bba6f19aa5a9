// The value of an etcd lock's keys: what a holder or a waiter says of
// itself, as JSON ({"pid":N,"startedAt":MS,"label":...}), written by us and
// read as untrusted: anyone who may write the keys may write anything.
#ifndef OFFLOAD_LOCK_SRC_ETCD_RECORD_HPP
#define OFFLOAD_LOCK_SRC_ETCD_RECORD_HPP

#include <cstdint>
#include <string>
#include <string_view>

namespace offload_lock::detail::etcd {

// The most a record may be; a larger value is unreadable, not truncated.
inline constexpr std::size_t max_record_bytes = std::size_t{8} * 1024;
inline constexpr std::size_t max_label_bytes = 1024;

struct record {
  // The holder: the recorded holder process (`run`'s CMD, `acquire --pid`);
  // a waiter: the waiting process. On `host`.
  std::int64_t pid = 0;
  std::int64_t since = 0;  // epoch ms: when it took the lock, or began to wait
  std::string label, host, token, tool;
  int priority = 0;
  std::int64_t expect_ms = 0;    // declared duration; 0: undeclared
  std::int64_t max_hold_ms = 0;  // 0: none
  bool can_yield = false;
  // Who the pid is, for a reader on the same machine (a holder's record
  // only): the boot, the pid and time namespaces it is counted in, and its
  // start in clock ticks since boot (/proc/<pid>/stat). Empty and 0 when
  // unknown; a reader judges the pid only when all are its own.
  std::string boot_id;
  std::int64_t pid_ns = 0, time_ns = 0, proc_ticks = 0;
  // And the process that took the lock and keeps its lease (`run`, the
  // library's caller), the same way; 0 when unknown.
  std::int64_t keeper_pid = 0, keeper_ticks = 0;
  // Why the value could not be read as a record ("not JSON", "pid is not a
  // number" ...); the fields above are then their defaults. The key still
  // counts: a holder's unreadable record still holds the lock.
  std::string problem;
};

// The JSON of a record (its own values are ours, and valid).
std::string encode(const record& r);
// Reads a value: every field checked for its type and range, every string
// for its length (a token for its characters too); the first field found
// wrong makes the whole record unreadable (problem set).
record decode(std::string_view value);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_RECORD_HPP
