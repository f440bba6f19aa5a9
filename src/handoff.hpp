// The handoff without a gap (doc/protocol.md, "Handing the lock to the
// next waiter").
//
// A waiter near the front of the queue keeps a staged lock: a complete lock
// directory beside the lock, `.<name>.next-<its entry's stem>`, with its
// meta.json written, made readable, and write-locked (its proof of life).
// A releasing holder that finds the first waiter in line for its slot
// staged swaps the two names with renameat2(RENAME_EXCHANGE): at no moment
// is the lock path absent or without a meta.json naming a live holder, so
// a v1 runner's mkdir never finds it free and a Go reader never sees it
// free. The waiter is woken by the swap itself (its staged directory moves)
// and holds on waking. The releaser then removes its own old directory,
// now under the staged name. Whenever the swap cannot be made safely (no
// staged waiter, a stopped one, one that is withdrawing, a file system
// without RENAME_EXCHANGE, another user's directory in a sticky parent), the
// holder releases plainly and the head claims as before.
#ifndef OFFLOAD_LOCK_SRC_HANDOFF_HPP
#define OFFLOAD_LOCK_SRC_HANDOFF_HPP

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "lock_dir.hpp"
#include "offload_lock/error.hpp"
#include "os/files.hpp"

namespace offload_lock::detail {

// A waiter's staged lock for one slot. Not thread-safe.
class staged_lock {
 public:
  // Builds the staged directory for the lock `t` under the name made from
  // `stem`, holding `meta` as meta.json. Best effort: nullptr when it cannot
  // be made (the waiter then simply claims when the lock frees). Without
  // `publish` it stays under its private building name, where no releaser
  // looks, until publish(): a waiter far back in line makes it as it joins,
  // so that moving up makes no file (on a file system that skips inode
  // numbers freed in the last half minute, as ext4 without a journal does,
  // a file made where many were just removed costs a scan of them).
  static std::unique_ptr<staged_lock> make(const target& t, const std::string& stem, const std::string& meta,
                                           bool publish = true);
  // Puts a private one under its staged name, its meta.json now saying
  // `meta` (rewritten in place while nobody else can read it). An error
  // leaves it private (withdraw() removes it).
  error publish(const target& t, const std::string& meta);
  bool published() const { return published_; }
  // Withdraws it (see withdraw()) unless it was taken over by held_state.
  ~staged_lock();
  staged_lock(const staged_lock&) = delete;
  staged_lock& operator=(const staged_lock&) = delete;

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const sys::file_id& id() const { return id_; }
  // Whether the lock path now holds this directory: the releasing holder
  // swapped it in. Then it is this waiter's lock. Never once it has been
  // withdrawn or taken (its inode number may name another directory since).
  bool at_lock_path(const target& t) const;
  // The same answer for a directory already looked at: whether `seen` (its
  // identity, as a look at the lock path found it) is this one.
  bool is(const sys::file_id& seen) const { return dir_.valid() && seen == id_; }
  // Takes a free lock path with this directory (renameat2 RENAME_NOREPLACE):
  // true when taken, false when something is there; a system error otherwise.
  result<bool> claim(const target& t);
  // Out of the handoff: moves the staged directory to a private name first
  // (so that no swap can pick it any more), then removes it. Returns true
  // when that finds the swap already made: the lock path holds this
  // directory, which is then this waiter's lock.
  bool withdraw(const target& t);
  // Refreshes meta.json's mtime: the staged lock may wait longer than a TTL
  // before it is swapped in, and must not look stale the moment it is.
  void touch();
  // Becoming the holder: replaces meta.json atomically with `meta` (the
  // record at the moment of taking: its startedAt, those passed over),
  // write-locked before it is renamed in, so that meta.json is never
  // partial nor without its proof of life.
  error rewrite_meta(const std::string& meta);
  // The bytes of its meta.json as last written.
  const std::string& meta_bytes() const { return bytes_; }
  // The identity of its meta.json as last written (kept by the holder:
  // heartbeat.hpp held_state::meta_id); nothing when it was not looked at.
  const std::optional<sys::file_id>& meta_id() const { return meta_id_; }
  // Hands the directory and its meta.json over to the holder.
  sys::fd take_dir();
  sys::fd take_meta();

 private:
  staged_lock() = default;
  sys::fd parent_, dir_, meta_;
  std::string name_, path_, shown_, lock_name_, lock_path_, bytes_, building_;
  // The name it is under now: its building name until published.
  const std::string& current_name() const { return published_ ? name_ : building_; }
  sys::file_id id_;
  bool published_ = false;
  std::optional<sys::file_id> meta_id_;
  bool taken_ = false;
};

// The releasing holder's side. Hands the lock at `t` (this holder's
// directory `own_id`, open as `own_dir`) for slot `slot` of the lock whose
// queue is beside `base` to the first live waiter in line that would take
// it and is neither in `skip` (passed over) nor stopped, by swapping its
// staged lock in. Returns true when the lock now is that waiter's (and this
// holder's old directory is removed); false when it could not (nothing was
// changed: release plainly); errc::lost when the lock path turned out not
// to hold this holder's directory (it was put back as it was). Once the
// swap is made it is never undone: the waiter may have taken the lock,
// rewritten its meta.json, even released it, at once. `own_queue_dir`: the
// registry directory this holder waited in (empty: none), tidied after a
// handoff unless the new holder waited there too (its release tidies it).
result<bool> hand_to_next(const target& t, const sys::file_id& own_id, int own_dir, int slot, const std::string& base,
                          const std::set<std::string>& skip, const std::string& own_queue_dir = {});

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_HANDOFF_HPP
