// Taking, holding, releasing and inspecting the machine-wide GPU lock.
//
// The lock is a directory (see path.hpp) holding meta.json. Every call here
// keeps the rules of the existing Node runners and Go readers (PROTOCOL part
// A) and adds the guarantees of PROTOCOL part B: a lock never visible without
// a complete meta.json, reclaim of exactly the lock judged stale, release only
// by its owner, a heartbeat that keeps a live holder from ever looking stale.
#ifndef OFFLOAD_LOCK_LOCK_HPP
#define OFFLOAD_LOCK_LOCK_HPP

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"

namespace offload_lock {

using milliseconds = std::chrono::milliseconds;

// A wait that never ends by itself.
inline constexpr milliseconds wait_forever = milliseconds::max();
// The TTL of PROTOCOL A3: a holder whose meta.json mtime is older than this is
// stale for every participant. offload-lock holders refresh the mtime (B7).
inline constexpr milliseconds default_ttl = std::chrono::hours(1);
// How long a lock directory with a missing or unparseable meta.json is left
// alone, so a Node runner between its mkdir and its write is never robbed (B3).
inline constexpr milliseconds default_grace = std::chrono::seconds(2);

// One point-in-time view of the lock, as `status` shows it.
struct info {
  std::string path;
  bool present = false;  // something exists at path
  bool held = false;     // present and not stale by offload-lock's rules
  std::optional<std::int64_t> pid;         // recorded holder pid, when a number
  std::optional<std::int64_t> started_at;  // recorded startedAt, epoch ms
  milliseconds held_for{0};  // now - startedAt (or - the meta mtime when no startedAt)
  milliseconds age{0};       // now - meta.json mtime, the clock the TTL rule uses
  std::string label, host, token, tool;
  std::optional<std::uint32_t> owner_uid;  // uid owning the lock directory
  // Why a present lock does not count as held (nullopt when held or absent).
  std::optional<std::string> stale;
  // What the other participants conclude from the same bytes.
  bool node_stale = false;  // the Node runners' isStale() (PROTOCOL A3)
  bool go_held = false;     // the Go readers' Inspect().Held (PROTOCOL A5)
  // Set when the lock could not be looked at (for example EACCES on its
  // parent); held is then false and the message names the path and errno.
  std::string problem;
};

// Inspects the lock at `path` without changing anything. Never blocks on the
// lock. A system error (for example EACCES reading meta.json) is not fatal:
// the meta then reads as unreadable, as it does for the other participants.
info inspect(const std::string& path, milliseconds ttl = default_ttl,
             milliseconds grace = default_grace);

// Waits until the lock at `path` is free (not present, or stale) or `wait`
// has passed, and returns the last inspection. Wakes on the lock directory's
// removal and on the holder's death; `poll` bounds how long it sleeps when the
// file system gives no notifications. Reclaims nothing.
info wait_free(const std::string& path, milliseconds wait, milliseconds poll = std::chrono::seconds(1),
               milliseconds ttl = default_ttl);

// One process waiting for the lock, from the waiter registry: every
// offload-lock process that waits registers itself in a directory next to
// the lock (`.<name>.waiters`) until it stops waiting.
struct waiter {
  std::int64_t pid = 0;    // the waiting process
  std::string label, host;
  std::int64_t since = 0;  // when its wait began, epoch ms
  milliseconds waited{0};  // now - since
  int gpu = -1;            // the GPU slot it asked for; -1: the first free of `gpus`
  int gpus = 1;            // how many slots it waits among
};

// The processes waiting for the lock at `path` (slot 0's path when there are
// several GPU slots), oldest first. Entries whose process is gone (dead, a
// zombie, its pid reused, or from before a reboot) are left out. Never
// blocks; an unreadable registry reads as no waiters.
std::vector<waiter> waiters(const std::string& path);

// The lock path of GPU slot `gpu`: slot 0 is `path` itself (so single-GPU
// participants keep contending on GPU 0), slot k the sibling `path.gpu<k>`.
std::string gpu_slot_path(const std::string& path, int gpu);

// The most GPU slots one lock can have.
inline constexpr int max_gpus = 1024;

// What a waiting acquisition reports through lock_options::on_progress.
struct wait_progress {
  std::vector<info> holders;  // the lock, or each GPU slot waited for, as last seen
  milliseconds waited{0};     // since this acquisition began
  bool changed = false;       // a holder differs from the previous report
};

struct lock_options {
  std::string path;              // empty: resolve_path().path
  milliseconds wait = wait_forever;  // 0: try once; otherwise how long to wait
  milliseconds ttl = default_ttl;    // TTL for judging others, and heartbeat period base
  milliseconds grace = default_grace;
  // The process recorded as the holder; 0 records the calling process. The
  // lock is stale for everyone once this process dies.
  std::int64_t pid = 0;
  std::string label;             // empty: the program's name
  // The token recorded in meta.json; empty: a new random one. Letters,
  // digits, '-' and '_' only, at most 128 of them.
  std::string token;
  bool heartbeat = true;         // refresh meta.json's mtime while held (B7)
  // Pass straight through when this process was started under this same
  // lock (OFFLOAD_LOCK_PATH / OFFLOAD_LOCK_TOKEN in the environment, as
  // `offload-lock run` and child_environment() set them) and it is still
  // held with that token (B11). The parent's lock is then never released
  // from here.
  bool inherit = true;
  // While waiting, give up with errc::cancelled as soon as one of these
  // descriptors becomes readable or hangs up (a self-pipe a signal handler
  // writes to, the read end of a pipe whose writer may die).
  std::vector<int> cancel_fds;
  // Called from the waiting thread each time the holder being waited for
  // changes (and once at the start of a wait). Must not throw.
  std::function<void(const info&)> on_wait;
  // Called from the waiting thread while it waits for another process: when
  // a holder changes (changed = true), and every `progress_every` besides
  // when that is above 0 (for a status line that shows the time passing).
  // Must not throw.
  std::function<void(const wait_progress&)> on_progress;
  milliseconds progress_every{0};
  // Several GPUs: with gpus = N > 1 the acquisition takes the first free of
  // N slots (gpu_slot_path(path, k) for k in 0..N-1) and waits for whichever
  // frees first; with gpu = K >= 0 it takes slot K only. lock::gpu() says
  // which slot is held.
  int gpus = 1;
  int gpu = -1;
  // Register in the waiter registry while waiting, so `status` and
  // waiters() list this process.
  bool register_waiter = true;
  // Called from the heartbeat thread when the lock turns out to have been
  // removed or replaced by someone else. Must not throw.
  std::function<void(const error&)> on_lost;
};

namespace detail {
struct handle;
struct acquirer;
}  // namespace detail

// A held lock. Move-only; the destructor releases it (errors ignored). One
// lock object is used by one thread at a time; its heartbeat runs on a
// thread of its own.
//
// Threads (B10): the threads of one process that acquire the same lock queue
// inside the process in arrival order, and only the one at the front makes
// the file claim (no second claim, no polling). An acquire on the thread that
// already holds the lock passes straight through (nested() is true); the
// lock is released by the outermost acquisition's release.
//
// Child processes (B11): a process started with child_environment() in its
// environment (`offload-lock run` does this) that acquires the same lock
// while its parent's acquisition is still held passes straight through
// (inherited() is true) and never releases the parent's lock.
class lock {
 public:
  // Takes the lock, waiting up to options.wait. Returns errc::busy (wait 0)
  // or errc::timed_out when another live holder keeps it; a system error (with
  // errno and path) when the lock cannot be taken or a stale lock cannot be
  // removed. Reclaims a stale lock by moving exactly the judged directory aside
  // and deleting it. Never throws for contention.
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
  // this object took, with its token? Call before an irreversible step.
  bool still_held() const;

  // Releases: removes the lock directory only if it is still this holder's
  // (same directory inode and token). Returns no error when released,
  // errc::lost when it was removed or replaced by someone else (then nothing
  // is touched), or a system error. After the call owns() is false.
  error release();

  // Blocks while the recorded holder process lives, refreshing meta.json's
  // mtime (B7); releases the lock when that process exits (pidfd, or a
  // periodic check where pidfd is unavailable). Returns no error once it has
  // released, errc::lost when someone else removed or replaced the lock (a
  // release by token included). For a lock taken on behalf of another pid.
  error hold_for_holder();

  // True for a nested acquisition on the thread that already held the lock.
  bool nested() const noexcept;
  // True when the lock is the parent process's, passed down (B11).
  bool inherited() const noexcept;
  // OFFLOAD_LOCK_PATH and OFFLOAD_LOCK_TOKEN for the environment of a child
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

// Releasing a lock that this process does not hold as a `lock` object: by
// the token printed at acquisition, or by the recorded pid.
struct release_request {
  std::string token;      // matches the lock's token
  std::int64_t pid = 0;   // or matches the lock's recorded pid
  bool force = false;     // remove whatever lock directory is there
};
enum class release_status {
  released,      // the lock was the requested one and is gone
  already_free,  // nothing held the lock (absent, or stale and not ours)
  not_owner,     // a live holder other than the requested one holds it; untouched
};
struct release_outcome {
  release_status status = release_status::already_free;
  info before;  // the lock as it was found
};
// Removes the lock only if it matches the request (B5), moving exactly the
// matched directory aside before deleting it. Never removes something that
// is not a directory. System errors carry errno and path.
result<release_outcome> release_lock(const std::string& path, const release_request& request,
                                     milliseconds ttl = default_ttl);

// The version written into meta.json's "tool" key.
const char* version() noexcept;

// A new random token (32 hex digits), unique per acquisition.
std::string new_token();

// A duration for people: "850ms", "42s", "5m12s", "2h03m".
std::string describe_duration(milliseconds d);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_LOCK_HPP
