// Reclaim (reclaim.hpp): exact removal of the judged directory, serialized
// among offload-lock reclaimers, and the leftovers of crashes (doc/protocol.md B4).
#include "reclaim.hpp"

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "history.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "registry.hpp"

namespace offload_lock::detail {

namespace {

// overlayfs will not rename a directory of its lower layer (a stale lock
// baked into a container image): EXDEV. Such a lock is removed where it is,
// after the same identity check; what could then be removed by mistake is
// at most an empty directory put there between the check and the rmdir,
// since a lock offload-lock makes is never empty (B1) and rmdir removes only
// empty ones. Tested on a real overlay mount (tests/cli/overlay_test.sh).
result<removal> remove_in_place(const target& t, const sys::file_id& id, const char* op) {
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) return removal::changed;
  auto st = sys::stat_fd(d->get(), t.path);
  if (!st || st->id != id) return removal::changed;
  d->reset();
  if (auto e = remove_lock_dir_at(t.parent.get(), t.name, t.path, op)) return e;
  return removal::removed;
}

}  // namespace

mover_lock::mover_lock(int dir_fd) {
  if (dir_fd < 0) return;
  const std::int64_t until = sys::monotonic_ms() + contended_giveup_ms;
  for (;;) {
    error e = sys::try_flock_exclusive(dir_fd);
    if (!e) {
      fd_ = dir_fd;
      return;
    }
    // Any failure but another holder (ENOLCK, say): go ahead unserialized,
    // as 0.2 did.
    if (e.code() != std::errc::operation_would_block || sys::monotonic_ms() >= until) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

mover_lock::~mover_lock() { sys::flock_unlock(fd_); }

result<removal> remove_exact(const target& t, const sys::file_id& id, const std::string& failure, const char* op,
                             int own) {
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st || st->id != id) return removal::changed;
  const std::string aside = aside_prefix(t) + unique_suffix();
  if (auto e = sys::rename_at(t.parent.get(), t.name, aside, t.path)) {
    if (e.code() == std::errc::no_such_file_or_directory) return removal::changed;
    if (e.code() == std::errc::cross_device_link) return remove_in_place(t, id, op);
    return error(e.code(), failure);
  }
  sys::crash_point(op, "moved-aside");
  auto moved = sys::stat_at(t.parent.get(), aside, aside);
  if (moved && moved->id != id) {
    // Another participant replaced the directory between the check and the
    // rename: that one is live. Put it back (tests/multiprocess/fault_test.cpp).
    if (auto e = sys::rename_noreplace(t.parent.get(), aside, t.name, t.path))
      return error(e.code(), "moved a live lock aside at " + t.path + " and could not put it back; it is at " + aside);
    return removal::changed;
  }
  // Only what a lock holds is removed. A directory that turns out to hold
  // anything else (put there since it was checked) is not a lock: it goes
  // back where it was, untouched. Any other failure leaves only our
  // moved-aside name, which the next acquisition cleans up; the lock path
  // itself is already free.
  // Through `own` only when the name moved is seen to be that directory.
  if (auto e = remove_lock_dir_at(t.parent.get(), aside, t.path, op, moved ? own : -1)) {
    if (e.code() != std::errc::directory_not_empty) return removal::removed;
    if (sys::rename_noreplace(t.parent.get(), aside, t.name, t.path))
      return error(e.code(), e.context() + "; it is at " + aside + " beside it now");
    return e;
  }
  return removal::removed;
}

result<removal> reclaim(const target& t, observed& o, const verdict& why, std::int64_t ttl, std::int64_t grace,
                        const process_view& pv, bool serialize) {
  std::string failure = "cannot remove stale lock " + t.path + " (" + why.reason + ")";
  if (o.snap.owner_uid != sys::effective_uid()) failure += " owned by uid " + std::to_string(o.snap.owner_uid);
  if (o.dir.valid()) {
    if (auto e = serialize ? sys::try_flock_exclusive(o.dir.get()) : error{}) {
      if (e.code() == std::errc::operation_would_block) return removal::contended;
    }
    sys::crash_point("reclaim.flocked");
    const bool had_meta = o.snap.meta_exists;
    const std::int64_t had_mtime = o.snap.meta_mtime_ms;
    read_state(o.dir.get(), t.path, o.snap);
    // Refreshed since it was judged: the time seen unchanged starts again.
    if (o.snap.meta_exists != had_meta || o.snap.meta_mtime_ms != had_mtime) o.snap.unchanged_for_ms = 0;
    if (!judge(o.snap, sys::now_ms(), ttl, grace, pv).stale()) return removal::changed;
    // A directory holding what a lock never holds is not a lock (a mistyped
    // GPU_LOCK naming a real directory, say): refuse, and touch nothing.
    if (auto e = check_lock_contents(o.dir.get(), t.path)) return e;
  }
  auto r = remove_exact(t, o.snap.id, failure, "reclaim");
  if (r && *r == removal::removed) history::record(t.path, history::takeover(o.snap, why.reason));
  return r;
}

void clean_leftovers(const target& t) {
  auto names = sys::list_dir(t.parent.get(), "parent of " + t.path);
  if (!names) return;
  for (const auto& n : *names) {
    if (n == queue_dir_name(t.name)) {
      // Entries of this user's waiters killed while they waited, and the
      // registry with them once it is empty.
      sweep_registry(t.path);
      continue;
    }
    const std::int64_t pid = private_name_pid(t, n);
    if (pid <= 0 || sys::probe(pid) == sys::liveness::alive) continue;
    auto st = sys::stat_at(t.parent.get(), n, n);
    sys::crash_point("cleanup.leftover");
    if (st && st->is_dir) (void)remove_lock_dir_at(t.parent.get(), n, n);
  }
}

namespace {

// The leftovers of processes that died mid-step (staging, moved-aside and
// staged directories) are looked for once per lock per process, and again
// when a wait begins at least a minute after the last look: a listing of the
// lock's parent (a busy /tmp, say) is on no acquisition's path, not even a
// contended one's (every acquisition of a busy lock waits). Left there, they
// cost nothing but the space: nothing judges them.
constexpr std::int64_t kLeftoversAgainMs = 60'000;
std::mutex cleaned_mu;
std::set<std::string>& cleaned() {
  static std::set<std::string> done;
  return done;
}
std::map<std::string, std::int64_t>& cleaned_at() {
  static std::map<std::string, std::int64_t> at;
  return at;
}

// fork() copies only the calling thread: the mutex is taken around it, so
// a child never starts with it copied locked by another thread's acquisition.
struct fork_guard {
  fork_guard() noexcept { sys::on_fork([] { cleaned_mu.lock(); }, [] { cleaned_mu.unlock(); }, [] { cleaned_mu.unlock(); }); }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif

}  // namespace

void clean_leftovers_once(const target& t) {
  std::string key = t.path;
  if (auto id = parent_identity(t))
    key += "@" + std::to_string(id->dev) + ":" + std::to_string(id->ino);  // a directory made again is new
  {
    std::lock_guard<std::mutex> g(cleaned_mu);
    if (!cleaned().insert(key).second) return;
    cleaned_at()[t.path] = sys::monotonic_ms();
  }
  clean_leftovers(t);
}

void clean_leftovers_again(const target& t) {
  {
    std::lock_guard<std::mutex> g(cleaned_mu);
    const std::int64_t now = sys::monotonic_ms();
    auto [it, made] = cleaned_at().emplace(t.path, now);
    if (!made && now - it->second < kLeftoversAgainMs) return;
    it->second = now;
  }
  clean_leftovers(t);
}

}  // namespace offload_lock::detail
