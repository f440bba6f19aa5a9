// Reclaim (doc/protocol.md A2 step 3 with B4): removing exactly the lock directory
// that was judged, and the leftovers of processes that died mid-step.
#ifndef OFFLOAD_LOCK_SRC_RECLAIM_HPP
#define OFFLOAD_LOCK_SRC_RECLAIM_HPP

#include <cstdint>
#include <string>

#include "judge.hpp"
#include "lock_dir.hpp"
#include "timing.hpp"

namespace offload_lock::detail {

enum class removal {
  removed,    // the judged directory is gone from the path
  changed,    // the path no longer names that directory (or it is no longer stale); nothing removed
  contended,  // another offload-lock process is reclaiming it (its flock is held); nothing removed
};

// One mover at a time (doc/protocol.md B5): a release, a handoff and a
// reclaim of a lock directory each hold flock(2) on it from the look that
// decides to move it until the move is done. Of two offload-lock processes
// acting on one lock (a keeper releasing as its holder exits, and a
// `release --token` of the same lock), the second then finds that the path
// no longer names it, and moves nothing: it never swaps a waiter in over the
// lock the first one handed on. Waited for up to contended_giveup_ms: anyone
// who can open the directory can take that flock, so one held longer is no
// mover's, and the move goes ahead without it. `dir_fd` must stay open for
// the guard's lifetime. (tests/multiprocess/handoff_test.cpp)
class mover_lock {
 public:
  explicit mover_lock(int dir_fd);
  mover_lock(const mover_lock&) = delete;
  mover_lock& operator=(const mover_lock&) = delete;
  ~mover_lock();

 private:
  int fd_ = -1;  // -1: not taken
};

// Removes the directory at the path only if it is the one with identity
// `id`: checks, moves it aside under a unique name, checks the moved one
// (another participant may have replaced it between the check and the move:
// that one is live, and goes back), then deletes it without following
// symlinks. A directory that turns out to hold what a lock never holds goes
// back untouched (ENOTEMPTY). `failure` is the message of a failed move;
// `op` names the crash points ("reclaim", "release"). With `own`, the
// directory is the caller's own held lock, open as `own` (a release): it is
// emptied through `own`, its own meta.json first, so one that goes back for
// holding anything else goes back without it (what is not ours untouched).
result<removal> remove_exact(const target& t, const sys::file_id& id, const std::string& failure, const char* op,
                             int own = -1);

// B4: under a flock on the judged directory (which serializes offload-lock
// reclaimers), checks again that no live offload-lock process holds it and
// that it is still stale, refuses a directory that is not a lock, then
// removes exactly it (remove_exact). Anyone who can open the directory can
// take that flock, so it only orders reclaimers, never guards the lock:
// with `serialize` false (the flock has been held longer than any reclaim
// takes, see contended_giveup_ms) the reclaim goes ahead without it.
result<removal> reclaim(const target& t, observed& o, const verdict& why, std::int64_t ttl, std::int64_t grace,
                        const process_view& pv, bool serialize = true);


// Staging, moved-aside and staged directories of processes that died
// mid-step, and this user's dead waiters' registry entries. Best effort;
// touches nothing but directories with our private names whose creating
// process is gone.
void clean_leftovers(const target& t);
// clean_leftovers() once per lock per process (a directory made again is
// another lock), and again from a wait that begins at least a minute after
// the last look.
void clean_leftovers_once(const target& t);
void clean_leftovers_again(const target& t);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_RECLAIM_HPP
