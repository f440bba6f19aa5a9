// A lock directory that is gpulease's lease directory too: GPU_LOCK names
// both (doc/protocol-gpulease.md, "GPU_LOCK shared by both"). Each side
// keeps its own rules there, so offload-lock takes part in both at once:
//
// - One record. offload-lock's meta.json is its v1 record with the keys of
//   a complete gpulease claim after it (record.hpp append_record): v1
//   runners and Go readers read a holder pid and startedAt, gpulease reads
//   a live holder with an epoch, a window and a heartbeat (hb.<epoch>,
//   renewed with the lock's own refresh). Lock and lease are taken,
//   lost and released together, as one file.
// - The directory is gpulease's container. gpulease makes it when missing
//   and never removes it, and its acquirers create their claim inside it
//   with O_EXCL after making it: removing the directory would fail such an
//   acquirer with ENOENT. So offload-lock never removes it (neither when
//   it releases nor when it takes over a dead holder), and claims inside
//   it by moving a complete, write-locked file onto meta.json without
//   replacing, which O_EXCL creates and renames exclude both ways. Where no
//   directory is there, it is made with its meta.json in place (B1).
// - A directory without a claim may be a v1 runner's, between its mkdir
//   and its write (B3): left alone until it is `grace` old by its birth
//   time, which emptying it does not change (its mtime, where the file
//   system keeps no birth time), unless it holds a lease's files (hb.*,
//   unloaded.*), which no new directory of a v1 runner holds. Every other
//   container is claimed at once.
// - Judging: a claim without a v1 pid by gpulease's rules alone
//   (judge_lease), a v1 record without an epoch by the v1 rules alone,
//   one with both by both (held while either calls it held), a held OFD
//   lock on it as for any lock (a live offload-lock holder). An unparseable
//   meta.json is left gpulease's 10 s (a gpulease claim between its create
//   and its write), never the v1 grace alone.
// - Taking over a dead holder moves its meta.json aside and removes it only
//   if it is the file judged, under the flock every offload-lock mover of
//   the directory takes (reclaim.hpp, gpulease::take_over); the holder's
//   hb.<epoch> goes too when offload-lock wrote it. gpulease's other files
//   (hb.*, unloaded.*, epoch, its lock) and the directory stay.
//
// No handoff: a staged directory swapped in would carry gpulease's files
// away with the old one. A releasing holder removes its files, and the
// first offload-lock waiter in line, woken by the removal, claims.
#ifndef OFFLOAD_LOCK_SRC_SHARED_DIR_HPP
#define OFFLOAD_LOCK_SRC_SHARED_DIR_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "claim.hpp"
#include "gpulease/hold.hpp"
#include "inspect.hpp"
#include "reclaim.hpp"

namespace offload_lock::detail {

// What an acquisition in a shared directory needs besides its plan: where
// the lease is (its counter beside the directory), what its claims record,
// and the kernel's answers by gpulease's rules.
struct shared_lease {
  gpulease::lease_location loc;
  gpulease::take_options options;
  gpulease::lease_process_view pv = gpulease::lease_process_view::real();
};

// What is at a shared lock path: the lock's snapshot (meta.json read once;
// without one, the directory listed by the shared rule: what a lock holds
// and what gpulease makes there), that same meta.json as gpulease's claim
// with the heartbeat of its epoch, and the directory's birth time where
// the file system keeps one. Only a failure to stat the path is an error.
struct shared_observed {
  observed o;
  gpulease::lease_snapshot lease;
  std::optional<std::int64_t> born_ms;
  // Without a meta.json: the directory holds a lease's files (hb.*,
  // unloaded.*), so it is no v1 runner's new directory.
  bool lease_files = false;
};
result<shared_observed> observe_shared(const target& t);

// The judgment of a shared directory (see above). Pure. absent for a
// directory without a claim that no v1 runner can still be writing into:
// free to claim inside; not_a_lock for one holding anything neither side
// makes there.
verdict judge_shared(const shared_observed& s, std::int64_t now_ms, std::int64_t ttl_ms, std::int64_t grace_ms,
                     const process_view& pv, const gpulease::lease_process_view& lpv);

// inspect_target() for a shared directory: observe_shared, judge_shared,
// and the holder described as views show it.
result<detailed> inspect_shared(const target& t, std::int64_t ttl, std::int64_t grace, const process_view& pv,
                                const gpulease::lease_process_view& lpv, watch_clock* seen = nullptr,
                                bool idle_mark = true);

// Takes over the dead holder judged in `judged` (its directory still open
// there): under the movers' flock (contended when another offload-lock
// process holds it; with `serialize` false, without it), looks and judges
// again, moves meta.json aside and removes it only if it is the file
// judged (another goes back), then the holder's heartbeat when
// offload-lock wrote it. removed, changed (no longer that file, or no
// longer dead), contended; an error when the move fails.
result<removal> take_over_shared(const target& t, const observed& judged, std::int64_t ttl, std::int64_t grace,
                                 const process_view& pv, const gpulease::lease_process_view& lpv,
                                 bool serialize = true);

// `release --token/--pid/--force` of the holder matched in `judged`
// (release_by): under the movers' flock, if meta.json still names that
// holder, it is removed as take_over_shared removes one; the directory
// stays. removed or changed (another holder's now: judge again).
result<removal> give_back_shared(const target& t, const observed& judged);

// One claim of the lock judged free in `judged` (absent, or a directory
// without a claim): issues the next epoch, and writes `record` (the v1
// record, serialize()) followed by the lease's keys; into a new directory
// moved into place where none is (try_claim), else inside the directory
// judged, by a private file renamed onto meta.json without replacing.
// Not taken when anything got there first or the directory is no longer
// the one judged. Taken: claim::lease is the lease that same meta.json
// holds, and claim::written its bytes.
result<claim> claim_shared(const target& t, const snapshot& judged, const std::string& record,
                           const shared_lease& lease);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_SHARED_DIR_HPP
