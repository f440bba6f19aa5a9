// The judgment: given what is on disk and what the kernel says of the
// recorded process, is a lock held? Pure functions of their inputs, so every
// row of doc/protocol.md A3, A5, B3 and B6 is a table-driven unit test
// (tests/unit/judge_test.cpp).
//
// Every judgment has three answers besides "absent": held (alive), stale
// (provably dead: reclaim it) and unknown (something could not be read or
// asked). Unknown is treated as held by every caller: it is waited for and
// looked at again, never reclaimed. A fourth, not_a_lock, is a directory no
// participant's claim makes: it is refused, never touched.
#ifndef OFFLOAD_LOCK_SRC_JUDGE_HPP
#define OFFLOAD_LOCK_SRC_JUDGE_HPP

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "meta.hpp"
#include "os/types.hpp"

namespace offload_lock::detail {

// What is at the lock path, read without following symlinks.
struct snapshot {
  bool present = false;      // anything at the path
  bool is_dir = false;       // a directory (not a symlink to one)
  bool is_symlink = false;   // a symbolic link, never followed
  std::int64_t dir_mtime_ms = 0;
  std::uint32_t owner_uid = 0;
  std::uint32_t dir_mode = 0;     // the directory's permission bits with setuid, setgid, sticky
  std::uint32_t parent_mode = 0;  // the same of its parent directory
  sys::file_id id;           // the directory judged
  // The errno of a failure to open the directory or to read meta.json other
  // than its absence (EACCES, EMFILE, EIO, ...): the judgment is unknown.
  int look_errno = 0;
  std::string look_failed;   // what failed, for the message ("read meta.json")
  bool meta_exists = false;  // meta.json could be opened and read
  std::int64_t meta_mtime_ms = 0;
  parsed_meta meta;          // meaningful when meta_exists
  // Someone holds an OFD write lock on meta.json: a live offload-lock
  // holder (only a process that can open meta.json for writing can take
  // it, and a forked child never keeps it: os/files.hpp guard_from_fork).
  bool proof_of_life = false;
  // The probe for that lock failed: whether the holder lives is unknown.
  bool proof_unknown = false;
  // Without meta.json: the directory holds nothing at all (listed), or the
  // first name in it that is not part of a lock (then it is no lock).
  bool listed_empty = false;
  std::string foreign_entry;
  // How long the one judging has itself seen this lock exactly as it is now
  // (same directory, same mtimes), by its monotonic clock; 0 when it has
  // not been watching. Ages are at least this long whatever the wall clock
  // or the file times say, so an mtime in the future (a clock stepped back)
  // cannot stretch the grace or the TTL beyond their length.
  std::int64_t unchanged_for_ms = 0;
  // How old the directory already was (by its mtime) when the one judging
  // first saw it; -1 when not known. An empty directory that was already
  // older than the grace then is no claim in progress (see judge()).
  std::int64_t first_seen_age_ms = -1;
};

// The kernel's answers about processes, injectable for tests.
struct process_view {
  std::function<sys::liveness(std::int64_t)> probe;
  // kill(pid, 0) alone (sys::signal0), for the v1 views, which ask nothing
  // else; unset: derived from `probe` (a zombie answers kill()).
  std::function<sys::liveness(std::int64_t)> signals;
  sys::liveness signal0(std::int64_t pid) const {
    if (signals) return signals(pid);
    const sys::liveness l = probe(pid);
    return l == sys::liveness::zombie ? sys::liveness::alive : l;
  }
  std::function<std::optional<sys::proc_start>(std::int64_t)> start_of;
  std::string boot_id;
  std::string host;
  std::optional<std::uint64_t> pid_ns;  // the reader's pid namespace
  static process_view real();
};

// Slack allowed when comparing a process's start with a recorded time in
// wall-clock milliseconds (tick rounding, clock adjustment). Used only when
// the exact tick count is not recorded.
inline constexpr std::int64_t recycle_slack_ms = 30'000;

enum class judgment {
  absent,      // nothing at the path: free
  held,        // a live holder
  stale,       // provably no live holder: reclaim it (exactly it)
  unknown,     // could not tell: treated as held, looked at again
  not_a_lock,  // a directory no participant's claim makes: refused, never touched
};

struct verdict {
  judgment state = judgment::absent;
  std::string reason;           // why stale, held, unknown or not a lock
  // The judgment may flip by time alone at this wall-clock ms (grace or TTL
  // expiry); 0 when only an event can change it.
  std::int64_t changes_at_ms = 0;
  // Whose death would change the judgment (0: nobody's).
  std::int64_t holder_pid = 0;
  // The meta is incomplete (missing, unparseable, falsy).
  bool incomplete = false;
  // A file written, made or closed inside the directory is news: the meta
  // arriving, or a holder's death closing its meta.json.
  bool watch_contents = false;
  // The look failed with this errno (state unknown).
  int error = 0;

  bool free() const { return state == judgment::absent || state == judgment::stale; }
  bool stale() const { return state == judgment::stale; }
  bool not_a_lock() const { return state == judgment::not_a_lock; }
  bool unknown() const { return state == judgment::unknown; }
};

// Whether a directory without a complete meta.json can be an interrupted
// claim (a runner that died between its mkdir and its write), which must be
// reclaimed, rather than a directory a person made, which must never be
// removed. mkdir(path, 0777) under any umask makes no setuid or sticky bit,
// and a setgid bit only where the parent has one (the kernel copies it).
// nullopt when it can be a claim; else why it cannot.
std::optional<std::string> not_made_by_mkdir(const snapshot& s);

// offload-lock's judgment: doc/protocol.md A3 plus B3 (grace) and B6
// (liveness), with the proof of life first: a held OFD write lock on
// meta.json means alive whatever the pid, its start time, the boot id, the
// pid namespace or /proc say.
verdict judge(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, std::int64_t grace_ms,
              const process_view& pv);

// The Node runners' isStale() (doc/protocol.md A3), quirks included. Never
// used to decide anything in offload-lock; reported by `status` and pinned
// by tests.
bool node_is_stale(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv);
// The same, with why: nullopt when Node would call the lock held.
std::optional<std::string> node_stale_reason(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms,
                                             const process_view& pv);

// The Go readers' Inspect() (doc/protocol.md A5).
struct go_view {
  bool held = false;
  std::int64_t pid = 0;
  std::int64_t age_ms = 0;
};
go_view go_inspect(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv);

// a - b and a + b without overflow: a time from a file (an mtime, a
// startedAt near INT64_MAX) never wraps an age around.
std::int64_t sat_sub(std::int64_t a, std::int64_t b);
std::int64_t sat_add(std::int64_t a, std::int64_t b);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_JUDGE_HPP
