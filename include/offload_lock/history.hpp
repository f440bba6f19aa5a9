// The history of a lock: who held it, for how long, who waited and how long,
// kept as one JSON line per event beside the lock, where the operator has
// started it (`offload-lock history --start`).
//
// Where: the directory `.<name>.history` next to the lock (slot 0's path for
// every GPU slot), one file per author, `<uid>.jsonl` (the older half
// `<uid>.jsonl.1` after a rotation). A file's owner is its author: a reader
// takes every line of a file as its owner's word and nobody else's, so no
// user can write entries in another's name (a line that claims another uid
// is skipped and counted).
//
// What: the library appends, best effort (it never blocks, slows by more
// than an append or fails an acquisition), an entry when an acquisition
// ends its wait (acquired, timed out, cancelled), when a hold ends
// (released, lost, or the holder crashed and another process took the lock
// over), when a holder is asked to make way, and when a waiter passes over
// another.
#ifndef OFFLOAD_LOCK_HISTORY_HPP
#define OFFLOAD_LOCK_HISTORY_HPP

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "offload_lock/error.hpp"
#include "offload_lock/export.h"

namespace offload_lock {

// One line of the history. The strings are its author's own words: escape
// them before a terminal or a parser sees them.
//
// event "acquire": a wait ended. outcome "acquired" (then token is the
//   lock's), "timed-out" or "cancelled"; since and waited_ms.
// event "hold": a hold ended. outcome "released", "lost" (someone else had
//   removed or replaced the lock), or "crashed" (written by the process that
//   took over the lock of a dead holder: pid, label and token are the dead
//   holder's, reason why its lock was stale, other_pid the process that took
//   it over, holder_uid the owner of its lock directory); held_ms. A release
//   by token, pid or --force from another process has `by` "token", "pid" or
//   "force". Later versions may add outcomes (a maximum hold reached:
//   "max-hold"); readers keep what they do not know out of their sums.
// event "yield-asked": a waiter of a higher priority (other_*) asked this
//   holder to make way.
// event "passed-over": this acquisition passed over waiter other_pid, which
//   left the lock unclaimed ahead of it.
struct history_entry {
  std::int64_t at = 0;    // when it was written, epoch ms (by its author's clock)
  std::uint32_t uid = 0;  // its author: the owner of the file it was read from
  std::string event, outcome;
  std::int64_t pid = 0;   // the holder or waiter it is about
  std::string label, host, token;
  int gpu = -1;           // the GPU slot; -1: any of several (a wait among slots)
  int priority = 0;
  std::int64_t since = 0;       // acquire: when the wait began, epoch ms
  std::int64_t waited_ms = -1;  // acquire; -1: not said
  std::int64_t held_ms = -1;    // hold; -1: not said
  std::int64_t expect_ms = 0;   // the declared duration; 0: undeclared
  std::string reason, by;
  std::int64_t other_pid = 0;
  std::string other_label;
  int other_priority = 0;
  std::optional<std::uint32_t> holder_uid;
  bool yield_asked = false;     // hold: it had been asked to make way
};

// What a read of the history found besides the entries.
struct history_read {
  bool kept = false;  // the history directory exists (readable or not)
  std::string problem;  // why it could not be read at all; empty when it could
  std::size_t files = 0;           // files read
  std::size_t malformed = 0;       // lines that are not an entry (not our JSON, too long, cut short)
  std::size_t untrusted = 0;       // lines claiming another uid than their file's owner
  std::size_t foreign_files = 0;   // names that are not <uid>.jsonl[.1] of their owner, links, not regular
  std::size_t unread_bytes = 0;    // beyond a file's read cap (a file no writer makes that large)
};

// The history directory of the lock at `path` (slot 0's path): its parent,
// then `.<name>.history`. Pure.
OFFLOAD_LOCK_API std::string history_dir(const std::string& path);

// Reads the history of the lock at `path`: calls `visit` with each entry
// written at or after `since_ms` (epoch ms; 0: all), author after author
// and in the order each wrote them (the older file first). With
// `tail_bytes` > 0 only the last that many bytes of each file are read (the
// recent entries, cheaply).
// - Never blocks on a lock; reads at most 32 MiB of any one file, at most
//   4096 files. Missing history: kept is false, nothing visited.
// - Lines that are not entries, and lines of one file claiming another
//   author, are skipped and counted, never visited.
// - `visit` must not throw. Thread-safe.
OFFLOAD_LOCK_API history_read read_history(const std::string& path, std::int64_t since_ms,
                                           const std::function<void(const history_entry&)>& visit,
                                           std::size_t tail_bytes = 0);

// Starts keeping the history of the lock at `path`: makes its directory,
// as open as the lock's parent (so that every user who can take the lock
// can add to it) and sticky where others can write it (so that nobody can
// remove another's file). Already started is no error. Errors: the mkdir's
// (EACCES, ENOENT for a missing parent, EEXIST for something else there).
OFFLOAD_LOCK_API error start_history(const std::string& path);

// How large one author's file grows before it is rotated (renamed to
// `<uid>.jsonl.1`, replacing the previous one): each author keeps at most
// twice this.
inline constexpr std::int64_t history_rotate_bytes = std::int64_t{16} * 1024 * 1024;

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_HISTORY_HPP
