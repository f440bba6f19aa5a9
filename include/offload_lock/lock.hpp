// Taking, holding and releasing the machine-wide GPU lock.
//
// The lock is a directory (see path.hpp) holding meta.json. Every call here
// keeps the rules of the existing Node runners and Go readers (doc/protocol.md part
// A) and adds the guarantees of doc/protocol.md part B: a lock never visible without
// a complete meta.json, reclaim of exactly the lock judged stale, release only
// by its owner, a heartbeat that keeps a live holder from ever looking stale.
#ifndef OFFLOAD_LOCK_LOCK_HPP
#define OFFLOAD_LOCK_LOCK_HPP

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"
#include "offload_lock/export.h"
#include "offload_lock/inspect.hpp"
// Declared there since 0.2; code written against 0.1 found them here.
#include "offload_lock/release.hpp"
#include "offload_lock/slots.hpp"
#include "offload_lock/waiters.hpp"

namespace offload_lock {

// The environment variables that pass a held lock down to child processes
// (doc/protocol.md B11): the lock's path and its token.
inline constexpr const char* env_lock_path = "OFFLOAD_LOCK_PATH";
inline constexpr const char* env_lock_token = "OFFLOAD_LOCK_TOKEN";

// What a waiting acquisition reports through lock_options::on_progress.
struct wait_progress {
  std::vector<info> holders;  // the lock, or each GPU slot waited for, as last seen
  milliseconds waited{0};     // since this acquisition began
  bool changed = false;       // a holder differs from the previous report
  // This waiter's place in the lock's queue: 1 is next; 0 when unknown (a
  // wait among several slots, or one that is not queued).
  int position = 0;
  // Set while the lock is held and the acquisition waits for the gpulease
  // lease that goes with it (lease.hpp): that lease, as last seen; holders
  // is then empty and changed says its holder changed.
  std::optional<lease_info> lease;
};

struct lock_options {
  std::string path;                  // empty: resolve_path().path
  // How long acquire() waits for another holder: 0 (or negative) tries once
  // and returns errc::busy; wait_forever never gives up by itself.
  milliseconds wait = wait_forever;
  milliseconds ttl = default_ttl;    // TTL for judging others, and the heartbeat period's base
  milliseconds grace = default_grace;
  // The process recorded as the holder; 0 records the calling process. The
  // lock is stale for everyone once this process dies.
  std::int64_t pid = 0;
  std::string label;                 // empty: the program's name
  // The token recorded in meta.json; empty: a new random one. Letters,
  // digits, '-' and '_' only, at most 128 of them (else errc::bad_input).
  std::string token;
  bool heartbeat = true;             // refresh meta.json's mtime while held (B7)
  // Pass straight through when this process was started under this same
  // lock (env_lock_path / env_lock_token in the environment, as
  // `offload-lock run` and lock::child_environment() set them) and it is
  // still held with that token (B11). The parent's lock is then never
  // released from here.
  bool inherit = true;
  // While waiting, give up with errc::cancelled as soon as one of these
  // descriptors becomes readable or hangs up (a self-pipe a signal handler
  // writes to, the read end of a pipe whose writer may die).
  std::vector<int> cancel_fds;
  // Called on the waiting thread each time the holder waited for changes
  // (and once at the start of a wait). Must not throw.
  std::function<void(const info&)> on_wait;
  // Called on the waiting thread while it waits for another process: when a
  // holder changes (changed = true), and every `progress_every` besides when
  // that is above 0 (for a status line that shows the time passing). Must
  // not throw.
  std::function<void(const wait_progress&)> on_progress;
  milliseconds progress_every{0};
  // Several GPUs: with gpus = N > 1 the acquisition takes the first free of
  // N slots (gpu_slot_path(path, k) for k in 0..N-1) and waits for whichever
  // frees first; with gpu = K >= 0 it takes slot K only, whatever N is (a
  // slot beyond the count a discovery found is still that slot). lock::gpu()
  // says which slot is held. N outside 1..max_gpus, or K >= max_gpus, is
  // bad_input.
  int gpus = 1;
  int gpu = -1;
  // With gpus = N > 1 and gpu = -1: the slots the acquisition may take
  // (each in 0..N-1, else bad_input); empty allows all N. The command uses
  // it for the GPUs a CUDA_VISIBLE_DEVICES list allows.
  std::vector<int> allowed_gpus;
  // Register in the waiter registry while waiting, so `status` and
  // waiters() list this process. The registry is also the queue: a waiter
  // that does not register does not queue (it claims whenever it finds the
  // lock free, as a v1 runner does).
  bool register_waiter = true;
  // The queue (one lock, or one named slot): waiters are served by
  // priority, highest first, then by arrival. A waiter joins when it starts
  // to wait and claims only when no live waiter is ahead of it; a waiter
  // ahead that does not claim a free lock within 200 ms (stopped, hung) is
  // passed over. From -100 to 100 (else errc::bad_input); recorded in the
  // entry and in meta.json (`priority`). Threads of one process are served
  // in the same order. A wait among several slots (gpus > 1, gpu < 0) is
  // in the same queue: a slot that frees goes to the first waiter in order
  // that would take it.
  int priority = 0;
  // How long the holder expects to keep the lock, for the ETAs others see
  // (meta.json `expectMs`, the waiter's entry); 0: undeclared. Advisory:
  // the lock is not released when it passes.
  milliseconds expected{0};
  // The holder can make way: called once per hold, on the library's
  // heartbeat thread, when a waiter of a higher priority than this holder's
  // queues for the same lock (slot). The holder that yields releases and
  // acquires again (it queues behind the waiter it made way for). Needs the
  // heartbeat. Must not throw; keep it short. Recorded in meta.json
  // (`canYield`), so that `status` shows who asked.
  std::function<void(const yield_request&)> on_yield_request;
  // The maximum hold: how long this holder may keep the lock; 0: no limit.
  // Negative is bad_input. Recorded in meta.json (`maxHoldMs`) for `status`.
  // When it passes, on_yield_request is called (on the heartbeat thread,
  // unless a waiter has asked already: the call stays once per hold) with
  // the first waiter of the lock (slot), or with pid 0 and label "max hold"
  // when none waits; lock::max_hold_passed() turns true either way. The
  // library releases nothing by itself: the holder decides what ending
  // means (`offload-lock run` stops CMD).
  milliseconds max_hold{0};
  // Called on the library's heartbeat thread when the lock turns out to
  // have been removed or replaced by someone else: at once (inotify) from
  // the lock's 20th millisecond on, at that moment for a loss before it.
  // Must not throw; keep it short (it delays the heartbeat of every lock of
  // the process).
  std::function<void(const error&)> on_lost;
  // Where the upstream's current runners keep a gpulease lease (a state
  // root exists: OFFLOAD_LOCK_LEASE_ROOT, LOCAL_OFFLOAD_STATE_DIR or
  // /var/lib/local-offload), the acquisition of a plain lock also holds
  // the lease, recording this class in it: "media" (the default when
  // empty) or "text" (else errc::bad_input). lock::lease_epoch() is its
  // fencing epoch. doc/protocol-gpulease.md.
  std::string lease_class;
};

namespace detail {
struct handle;
struct acquirer;
}  // namespace detail

// A held lock. Move-only; the destructor releases it (errors ignored).
//
// Thread safety: one lock object is used by one thread at a time. Different
// objects may be used from any threads; the heartbeat of every lock the
// process holds runs on one thread of the library's own.
//
// Threads (B10): the threads of one process that acquire the same lock queue
// inside the process by priority, then arrival, and only the one at the front makes
// the file claim (no second claim, no polling). An acquire on the thread that
// already holds the lock passes straight through (nested() is true); the
// lock is released by the outermost acquisition's release.
//
// Child processes (B11): a process started with child_environment() in its
// environment (`offload-lock run` does this) that acquires the same lock
// while its parent's acquisition is still held passes straight through
// (inherited() is true) and never releases the parent's lock.
//
// fork: in a forked child the parent's locks are neither held nor releasable:
// the child's copies do nothing (still_held() is false, release() returns
// errc::lost and touches nothing), and the recorded holder's death frees the
// lock whatever its children still hold. A child that should hold the GPU
// takes it through child_environment() instead. The one exception is
// hold_until_holder_exits(), by which a forked keeper takes the lock over.
class OFFLOAD_LOCK_API lock {
 public:
  // Takes the lock.
  // - Blocks up to options.wait (see lock_options::wait), waking at once on
  //   a release or the holder's death; a stale lock (dead holder, TTL passed,
  //   recycled pid, another boot) is reclaimed by moving exactly the judged
  //   directory aside and deleting it.
  // - Outcomes, never thrown: errc::busy (wait 0) or errc::timed_out when a
  //   live holder keeps it; errc::cancelled through cancel_fds;
  //   errc::bad_input for bad options; a system error with errno and path
  //   (missing parent, EACCES, ENOSPC, ENOTDIR for a file at the path,
  //   ENOTEMPTY for a directory that is not a lock).
  // - Thread-safe (threads queue, see above).
  static result<lock> acquire(const lock_options& options);
  static result<lock> acquire(const std::string& path, milliseconds wait = wait_forever);

  lock() noexcept;
  lock(lock&&) noexcept;
  // NOLINTNEXTLINE(bugprone-exception-escape): see lock::operator= in lock.cpp
  lock& operator=(lock&&) noexcept;
  lock(const lock&) = delete;
  lock& operator=(const lock&) = delete;
  // NOLINTNEXTLINE(bugprone-exception-escape): see lock::operator= in lock.cpp
  ~lock();

  // True while this object holds an acquisition (until release or move).
  bool owns() const noexcept;
  explicit operator bool() const noexcept { return owns(); }

  // Checks the file system: is the lock directory at the path still the one
  // this object took, with its token? A few system calls; never blocks. Call
  // before an irreversible step.
  bool still_held() const;

  // Whether a waiter of a higher priority than this holder's has asked it
  // to make way (lock_options::on_yield_request has been called). Never
  // blocks; false for a lock taken without on_yield_request.
  bool yield_requested() const;

  // Whether the lock has been held longer than lock_options::max_hold.
  // Never blocks; false for a lock taken without one.
  bool max_hold_passed() const;

  // Releases: removes the lock directory only if it is still this holder's
  // (same directory inode and token). Never blocks on others. Returns no
  // error when released, errc::lost when it was removed or replaced by
  // someone else (then nothing is touched), or a system error. After the
  // call owns() is false.
  error release();

  // For a lock taken on behalf of another pid (lock_options::pid): blocks
  // while that process lives, refreshing meta.json's mtime (B7), and
  // releases the lock when it exits (pidfd, or a check every second where
  // pidfd is unavailable). Returns no error once released, errc::lost when
  // someone else removed or replaced the lock (a release by token included).
  // Called in a forked child, the child takes the lock over from its parent
  // (which should then detach() its own copy).
  error hold_until_holder_exits();
  // hold_until_holder_exits() under its 0.1 name.
  [[deprecated("use hold_until_holder_exits()")]] error hold_for_holder() { return hold_until_holder_exits(); }

  // True for a nested acquisition on the thread that already held the lock.
  bool nested() const noexcept;
  // True when the lock is the parent process's, passed down (B11).
  bool inherited() const noexcept;
  // The fencing epoch of the gpulease lease held with this lock, or of the
  // one this process runs under (GPU_LEASE_EPOCH); 0 when there is none.
  std::uint64_t lease_epoch() const;
  // An etcd lock's fencing token (offload_lock/etcd.hpp): the etcd revision
  // at which this acquisition took the lock, greater than any earlier
  // holder's; for a lock passed down by the parent, the parent's. 0 for a
  // local lock. Never blocks.
  std::uint64_t fence() const noexcept;
  // env_lock_path and env_lock_token for the environment of a child
  // process, so that its own acquisitions of this lock pass through.
  std::vector<std::pair<std::string, std::string>> child_environment() const;

  // Stops managing the lock without removing it: the directory stays, held
  // for the recorded pid until that process dies or someone releases it by
  // token. owns() is false afterwards.
  void detach() noexcept;

  const std::string& path() const;
  // The GPU slot held (0 unless lock_options::gpus or gpu chose another).
  int gpu() const noexcept;
  const std::string& token() const;
  std::int64_t pid() const;
  // The exact bytes written to meta.json.
  const std::string& meta_json() const;

 private:
  explicit lock(std::unique_ptr<detail::handle> h) noexcept;
  friend struct detail::acquirer;
  std::unique_ptr<detail::handle> h_;
};

// The version written into meta.json's "tool" key ("0.2.0").
OFFLOAD_LOCK_API const char* version() noexcept;

// A new random token (32 hex digits), unique per acquisition. Thread-safe.
OFFLOAD_LOCK_API std::string new_token();

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_LOCK_HPP
