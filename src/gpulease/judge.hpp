// Judging a gpulease claim by gpulease's own rules (doc/protocol-gpulease.md,
// "When a lease may be taken over"), with three answers: the holder is
// alive, it is provably dead (the claim may be reclaimed), or it cannot be
// told (unknown: never reclaimed). Pure functions of what was read and what
// the kernel says of the holder's pid, so every row is a unit test
// (tests/unit/lease_judge_test.cpp).
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_JUDGE_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_JUDGE_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "gpulease/record.hpp"
#include "os/types.hpp"

namespace offload_lock::detail::gpulease {

// gpulease's timings.
inline constexpr std::int64_t heartbeat_ttl_ms = 120'000;     // a heartbeat older than this is stale
inline constexpr std::int64_t claim_grace_ms = 10'000;        // an unparseable claim younger than this is being written
inline constexpr std::int64_t renew_every_ms = 15'000;        // how often holders renew
inline constexpr std::int64_t poll_every_ms = 1'000;          // how often gpulease's waiters look again
inline constexpr std::int64_t default_window_ms = 3'600'000;  // the declared window when none is given

// One file as read: not there, there but not readable (any error but
// ENOENT: EACCES, EIO, a symlink, not a regular file, over the cap), or its
// bytes.
struct file_read {
  enum class state { absent, unreadable, present } st = state::absent;
  std::string bytes;
  std::int64_t mtime_ms = 0;
  sys::file_id id;
  std::string error;  // unreadable: the operation, the path and the errno text
};

// What is in a lease directory: the claim, and the heartbeat of the claim's
// epoch (read only when the claim parses).
struct lease_snapshot {
  bool dir_present = true;
  file_read claim, heartbeat;
};

// The kernel's answers, injectable for tests: liveness by kill(pid, 0) with
// EPERM alive, and the start of the process now at a pid (clock ticks since
// boot), nullopt when it cannot be read.
struct lease_process_view {
  std::function<sys::liveness(std::int64_t)> probe;
  std::function<std::optional<std::uint64_t>(std::int64_t)> start_ticks;
  static lease_process_view real();
};

enum class lease_state {
  free,     // no claim
  alive,    // held: its holder lives by gpulease's rules, or its claim is being written
  dead,     // held by nobody: gpulease's rules let it be taken over now
  unknown,  // it cannot be told (something could not be read): never taken over
};
const char* to_string(lease_state s) noexcept;

struct lease_verdict {
  lease_state state = lease_state::free;
  std::string why;                 // in words, for people
  std::optional<record> rec;       // the claim, when it parses
  std::int64_t renewed_at_ms = 0;  // the heartbeat that counts: hb.<epoch>, else the claim's own stamp
  bool in_progress = false;        // an unparseable claim inside the grace
  // The verdict may change by time alone at this wall-clock ms (the grace,
  // the heartbeat going stale and the window ending); 0: only an event.
  std::int64_t changes_at_ms = 0;
  // Whose exit changes it (0: nobody's).
  std::int64_t holder_pid = 0;
  // What gpulease itself does with the same files: its acquirers remove
  // the claim (TryAcquire), and its readers (InspectDir) call it held.
  // They differ from `state` where offload-lock is more careful (unknown,
  // a zombie holder) and are shown by `status`.
  bool gpulease_reclaims = false;
  bool gpulease_readers_held = false;
};

// The rules, in gpulease's order:
//  1. no claim: free;
//  2. the claim cannot be read: unknown (gpulease would read it as
//     unparseable; offload-lock takes over nothing it cannot read);
//  3. the claim does not parse: alive ("being written") while its mtime is
//     less than claim_grace_ms old, dead after;
//  4. no holder pid (<= 0): alive until the declared window ends, dead after;
//  5. the holder pid names no process: dead; a zombie (exited, unreaped)
//     is dead for offload-lock, alive for gpulease (kill(pid, 0) succeeds);
//  6. a start time recorded, readable now, and different: a reused pid, dead;
//  7. else dead exactly when the heartbeat (hb.<epoch> when it parses and is
//     not older than the claim's own renewed_at_ms stamp, else that stamp;
//     0 never goes stale) is more than heartbeat_ttl_ms old AND the window
//     (expires_at_ms) has ended; alive otherwise. A heartbeat file that
//     cannot be read makes this unknown where it would decide.
// A pid above the kernel's range is not signalled (gpulease's kill would
// address its low 32 bits): it counts as alive, its start unknown, and
// rule 7 decides.
lease_verdict judge_lease(const lease_snapshot& s, std::int64_t now_ms, const lease_process_view& pv);

// The holder in words: "media lease (pid 4242, epoch 17, reason \"render\")".
// The strings are the claim's: escape them before a terminal sees them.
std::string describe_holder(const record& r);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_JUDGE_HPP
