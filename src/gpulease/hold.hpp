// Taking, renewing and releasing a gpulease lease, and taking over a dead
// one, as gpulease does each (doc/protocol-gpulease.md, "Taking a lease",
// "Renewing", "Releasing", "Taking over"). Built to be driven by an
// acquisition loop: try_take() never blocks on the lease (it returns busy
// with what to wake on), and a held lease says what to watch for its loss.
//
// Files: the claim is written complete under a private name in the lease
// directory (".meta.json.claim-<pid>-<hex>") and renamed into place without
// replacing (gpulease's O_EXCL create, with no moment in which the claim is
// empty; O_EXCL itself where the file system refuses the rename flag). A
// dead claim is moved aside (".meta.json.reclaim-<pid>-<hex>") and removed
// only if it is the file judged. Nothing else gpulease owns is ever removed:
// not the directory, not the counter or its lock (see epoch.hpp for the one
// exception gpulease itself makes), not another epoch's hb.* or unloaded.*.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_HOLD_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_HOLD_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpulease/judge.hpp"
#include "gpulease/location.hpp"
#include "offload_lock/error.hpp"

namespace offload_lock::detail::gpulease {

// What the holder means to do with the card (gpulease's two classes, both
// exclusive): `media` may unload models, `text` reserves the card for a
// measurement.
enum class lease_class { media, text };
const char* to_string(lease_class c) noexcept;
std::optional<lease_class> parse_lease_class(std::string_view s);

inline constexpr const char* claim_temp_prefix = ".meta.json.claim-";
inline constexpr const char* claim_aside_prefix = ".meta.json.reclaim-";

struct take_options {
  lease_class cls = lease_class::media;
  std::string reason, origin, job_id;  // recorded in the claim (job_id, origin and reason)
  // The declared window: expires_at_ms = now + window_ms. A holder that
  // renews is never taken over inside or after it while it lives; a holder
  // that stops renewing is taken over once both its heartbeat is stale and
  // its window has ended.
  std::int64_t window_ms = default_window_ms;
  // A JSON object whose keys go first in the claim ("{}"-like; empty: none):
  // a v1 lock record, to make one meta.json that is both (record.hpp
  // append_record). Not validated here.
  std::string leading_object;
  // The process the claim names as the holder (its pid and start time);
  // 0: this one. offload-lock's `acquire` names the recorded holder, which
  // outlives the command that took the lease.
  std::int64_t holder_pid = 0;
};

// What a waiter arms while a lease is not free.
struct lease_wake {
  std::string dir;         // watch its entries: the claim made, removed or replaced, a heartbeat written
  std::int64_t pid = 0;    // watch this process's exit (0: none to watch)
  std::int64_t at_ms = 0;  // look again by this wall-clock ms at the latest (0: only on an event)
  // How often to look where the directory cannot be watched: gpulease's own
  // poll, so a release is seen no later than a gpulease waiter sees it.
  std::int64_t poll_ms = poll_every_ms;
};

class lease_hold;

enum class take_status {
  held,     // hold is ours
  busy,     // another holder lives (or its claim is being written): `seen` names it
  unknown,  // the claim in the way cannot be judged: `seen` says why; wait, never take over
  error,    // a system failure: `err`
};
const char* to_string(take_status s) noexcept;

class lease_hold {
 public:
  struct take_result;

  // One attempt to take the lease at `loc`, never blocking on the lease
  // (the counter's lock is waited for, at most 2 s): looks at the claim;
  // takes over a dead one (removing only the claim); makes the lease
  // directory if it is missing (and the gpu directory under a root; made as
  // open as their parent, where gpulease leaves 0777 less the umask);
  // issues the next epoch; and claims. A claim
  // made by someone else in between is busy (the epoch is burnt, as
  // gpulease burns it). Thread-safe as far as the file system is; one
  // process may hold the lease only once (a second try is busy: its own
  // holder is alive).
  static take_result try_take(const lease_location& loc, const take_options& o,
                              const lease_process_view& pv = lease_process_view::real());

  // The claim at `dir` when it names `holder_pid` as its holder and was
  // made by `origin`: a hold of it for this process to release, as the
  // process that kept it would have (`release --pid` of a lock whose keeper
  // is gone). nullopt otherwise, or when it cannot be read.
  static std::optional<lease_hold> left_by(const std::string& dir, std::int64_t holder_pid, std::string_view origin);

  // A lease claimed by the caller itself: `claim_id` is the claim file it
  // placed at `dir`/meta.json holding `rec` (a lock directory shared with
  // gpulease, where one meta.json is the lock's record and the claim:
  // shared_dir.hpp). Renewed and released by this process.
  static lease_hold claimed(std::string dir, record rec, lease_class cls, const sys::file_id& claim_id);

  lease_hold(lease_hold&& o) noexcept;
  lease_hold& operator=(lease_hold&& o) noexcept;
  lease_hold(const lease_hold&) = delete;
  lease_hold& operator=(const lease_hold&) = delete;
  // Releases what is still held, ignoring errors.
  ~lease_hold();
  // Not thread-safe: one owner thread. In a forked child, renew() is lost
  // and release() (and the destructor) does nothing: the lease is the
  // parent's (the process that took it) until the child adopt()s it.

  std::uint64_t epoch() const noexcept { return rec_.epoch; }
  lease_class cls() const noexcept { return cls_; }
  const std::string& dir() const noexcept { return dir_; }
  const record& claim() const noexcept { return rec_; }
  bool released() const noexcept { return released_; }
  // The claim's path and identity: what to watch for a loss in place.
  std::string claim_path() const { return dir_ + "/" + claim_name; }
  sys::file_id claim_id() const noexcept { return id_; }

  // gpulease's Check(): the claim at the lease directory is still the one
  // this holder made (the same file and epoch). errc::lost when it is gone
  // or another's; a system error when it cannot be read (not a loss).
  error check() const;
  // check(), then the heartbeat hb.<epoch> := now (epoch ms in decimal,
  // written aside and renamed into place, so no reader sees it empty).
  // Holders call it every renew_every_ms.
  error renew();
  // Once: if the claim is still ours, removes unloaded.<epoch> and
  // hb.<epoch>, then the claim; errc::lost when it was not ours any more
  // (nothing is removed then). Later calls return no error.
  error release();

  // The forked child that keeps the lease from now on (a keeper of
  // `offload-lock acquire`): renew() and release() work here, not in the
  // process that took it.
  void adopt();
  // Leaves the claim in place and forgets it: nothing is released here,
  // ever (its holder, or a process that adopted it, releases it).
  void abandon() noexcept { released_ = true; }

  // GPU_LEASE_DIR, GPU_LEASE_EPOCH and GPU_LEASE_CLASS for a process started
  // under this lease, as gpulease passes its lease to its children.
  std::vector<std::pair<std::string, std::string>> child_environment() const;

 private:
  lease_hold(std::string dir, record rec, lease_class cls, sys::file_id id, std::int64_t owner)
      : dir_(std::move(dir)), rec_(std::move(rec)), cls_(cls), id_(id), owner_pid_(owner) {}
  std::string dir_;
  record rec_;
  lease_class cls_ = lease_class::media;
  sys::file_id id_;
  std::int64_t owner_pid_ = 0;  // the process that renews and releases it
  bool released_ = false;
};

struct lease_hold::take_result {
  take_status status = take_status::error;
  std::optional<lease_hold> hold;  // when held
  lease_verdict seen;              // busy, unknown: the claim in the way (also held: the one taken over, if any)
  lease_wake wake;                 // busy, unknown: what to wait on before the next try
  error err;                       // error
  bool took_over = false;          // a dead claim was removed on the way
};

// The record a claim taken now with epoch `epoch` says (try_take's):
// the holder (o.holder_pid or this process) with its start, the class, the
// reason, origin and job, acquired and renewed now, the window from now.
record lease_record_for(std::uint64_t epoch, const take_options& o);

// Removes our private names in the open lease directory `dir` (shown as
// `shown`) left by offload-lock processes killed while they made them:
// .meta.json.claim-*, .meta.json.reclaim-*, hb.<epoch>.<pid>-<hex>.tmp whose
// pid is dead. Best effort.
void clean_private_leftovers(int dir, const std::string& shown);

// Takes over the claim of `dir` judged dead as `judged` (its file identity):
// re-reads and re-judges it while holding flock(2) on the directory (which
// offload-lock's reclaimers of a lock directory take too), moves it aside,
// and removes it only if it is that file; a different file moved is put
// back. true when it was removed, false when it had changed or another
// offload-lock process was doing the same; an error when it could not be
// moved. Removes nothing but the claim.
result<bool> take_over(const std::string& dir, const sys::file_id& judged, const lease_process_view& pv);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_HOLD_HPP
