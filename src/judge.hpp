// The staleness judgment: given what is on disk and what the kernel says of
// the recorded process, is a lock held? Pure functions of their inputs, so
// every row of PROTOCOL A3, A5, B3 and B6 is a table-driven unit test.
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
  bool meta_exists = false;  // meta.json could be opened and read
  std::int64_t meta_mtime_ms = 0;
  parsed_meta meta;          // meaningful when meta_exists
  // Someone holds an OFD write lock on meta.json: a live offload-lock
  // holder (only a process that can open meta.json for writing can take it).
  bool proof_of_life = false;
  // How long the one judging has itself seen this lock exactly as it is now
  // (same directory, same mtimes), by its monotonic clock; 0 when it has
  // not been watching. Ages are at least this long whatever the wall clock
  // or the file times say, so an mtime in the future (a clock stepped back)
  // cannot stretch the grace or the TTL beyond their length.
  std::int64_t unchanged_for_ms = 0;
};

// The kernel's answers about processes, injectable for tests.
struct process_view {
  std::function<sys::liveness(std::int64_t)> probe;
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

struct verdict {
  bool stale = false;
  std::string reason;           // why stale, or why held
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
  // Not a lock at all: a directory no participant's mkdir makes (see
  // made_by_a_participant). Never reclaimed; reason says why.
  bool not_a_lock = false;
};

// Whether a directory without a complete meta.json can be an interrupted
// claim (a runner that died between its mkdir and its write), which must be
// reclaimed, rather than a directory a person made, which must never be
// removed. mkdir(path, 0777) under any umask makes no setuid or sticky bit,
// and a setgid bit only where the parent has one (the kernel copies it).
// nullopt when it can be a claim; else why it cannot.
std::optional<std::string> not_made_by_mkdir(const snapshot& s);

// offload-lock's judgment: PROTOCOL A3 plus B3 (grace) and B6 (liveness).
verdict judge(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, std::int64_t grace_ms,
              const process_view& pv);

// The Node runners' isStale() (PROTOCOL A3), quirks included. Never used to
// decide anything in offload-lock; reported by `status` and pinned by tests.
bool node_is_stale(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv);
// The same, with why: nullopt when Node would call the lock held.
std::optional<std::string> node_stale_reason(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms,
                                             const process_view& pv);

// The Go readers' Inspect() (PROTOCOL A5).
struct go_view {
  bool held = false;
  std::int64_t pid = 0;
  std::int64_t age_ms = 0;
};
// B6 for a process recorded by itself (a waiter registry entry): alive, not
// a zombie, not from another boot, and not a reused pid (its start ticks).
// A record from another host is taken at its word.
struct recorded_process {
  std::int64_t pid = 0;
  std::string host, boot_id;
  std::uint64_t start_ticks = 0;  // 0: not recorded
};
bool recorded_process_alive(const recorded_process& r, const process_view& pv);

go_view go_inspect(const snapshot& s, std::int64_t now_ms, std::int64_t ttl_ms, const process_view& pv);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_JUDGE_HPP
