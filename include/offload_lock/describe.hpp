// The words of offload-lock, one home for all of them: the grammar of a
// duration and of a priority as the command takes them, and the sentences
// that name a holder, a lock's state and a wait. The command, the C API's
// messages and every binding (through offload_lock.h) use these, so a
// duration, a priority or a holder reads the same wherever it is shown.
#ifndef OFFLOAD_LOCK_DESCRIBE_HPP
#define OFFLOAD_LOCK_DESCRIBE_HPP

#include <optional>
#include <string>
#include <string_view>

#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"

namespace offload_lock {

struct wait_progress;  // offload_lock/lock.hpp

// ---- durations ----

// Parses a duration as the command's DUR: "0"; seconds as a decimal number
// (fractions allowed: "1.5"); a number with ms, s, m, h or d ("500ms",
// "2h", "1d"); a compound of those, each unit smaller than the one before
// ("1h30m", "2m30s", "1d12h", "1m0.5s"); or "forever" (wait_forever).
// Rounded up to whole milliseconds. nullopt for anything else: empty,
// negative, a sign, spaces, junk, a unit repeated or out of order, more than
// ten years. Pure.
OFFLOAD_LOCK_API std::optional<milliseconds> parse_duration(std::string_view text);

// (describe_duration, the other direction, is declared in inspect.hpp:
// "850ms", "42s", "5m12s", "2h03m".)

// ---- priorities ----

// The bounds of a queue priority (lock_options::priority).
inline constexpr int min_priority = -100;
inline constexpr int max_priority = 100;
// The named priorities.
inline constexpr int priority_batch = -10;
inline constexpr int priority_normal = 0;
inline constexpr int priority_interactive = 10;

// Parses a priority as the command's --priority: an integer from -100 to 100
// written with digits and an optional '-' (no '+', no spaces), or batch,
// normal, interactive. nullopt for anything else. Pure.
OFFLOAD_LOCK_API std::optional<int> parse_priority(std::string_view text);

// ---- holders, states, waits ----
// The strings come from meta.json and the waiter registry: escape the
// results before a terminal or a parser sees them.

// "LABEL (pid N, host H)": who holds (or held) the lock `i` shows. A holder
// without a label (a v1 Node runner) on this host is named by its process's
// kernel name (/proc/<pid>/comm); else "an unnamed holder". ", host H" only
// when a host is recorded; "pid unknown" when no pid is.
OFFLOAD_LOCK_API std::string describe_holder(const info& i);

// The lock's state in the words of `offload-lock status`: "held by HOLDER
// for 5m12s", "free", or "free (stale lock of HOLDER: REASON)". `more`, when
// not empty, is said last (after the duration, or after the reason inside
// the parentheses): the command adds who owns the directory there.
OFFLOAD_LOCK_API std::string describe_state(const info& i, const std::string& more = {});

// The holder of a gpulease lease (lease.hpp): "media lease (pid 4242,
// epoch 17, reason "render", origin "batch")", the reason and origin only
// when the claim gives them; "unclassed lease" without a class.
OFFLOAD_LOCK_API std::string describe_lease_holder(const lease_info& i);

// This waiter's place in its lock's queue, as `status` shows it (the
// registry's entry of this process): position 1 is next, 0 unknown; the ETA
// nullopt when unknown.
struct wait_place {
  int position = 0;
  std::optional<milliseconds> eta;
};

// The place of the calling process among the waiters of the lock at `path`
// (slot 0's path when there are GPU slots). Reads the waiter registry;
// never blocks; {0, nullopt} when this process is not listed.
OFFLOAD_LOCK_API wait_place place_in_line(const std::string& path);

// What a wait is for, as the waiting line says it after "waiting for ":
// "render (pid 4534, host gpu1), held for 5m12s; #2 in line, ETA ~20m", or
// for several GPU slots "any of 2 GPUs: gpu0 A (pid 1) 3s; gpu1 B (pid 2)
// 9s"; while the lock is held and the gpulease lease is waited for (the
// progress's lease), "the gpulease lease: HOLDER, held for 5m12s", the
// holder as describe_lease_holder names it. The place comes from `place`
// (its position, else the progress's);
// "; #N in line" only when known, ", ETA ~D" only with it. `base` is the
// lock's path (slot 0's), used to name the slots. Pure but for the holders'
// names (describe_holder).
OFFLOAD_LOCK_API std::string describe_wait(const wait_progress& p, const std::string& base,
                                           const wait_place& place = {});

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_DESCRIBE_HPP
