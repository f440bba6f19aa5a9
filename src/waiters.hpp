// The waiter registry: each offload-lock process that waits for the lock
// keeps one small JSON file in a directory next to it, open for writing with
// an OFD write lock on it for as long as it waits (its proof of life, as
// meta.json's is the holder's). The entries are the queue: waiters are
// served by priority, then arrival (queue.hpp). Mutual exclusion never
// depends on it.
#ifndef OFFLOAD_LOCK_SRC_WAITERS_HPP
#define OFFLOAD_LOCK_SRC_WAITERS_HPP

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "offload_lock/waiters.hpp"
#include "os/files.hpp"

namespace offload_lock::detail {

// The registry directory for the lock named `lock_name` (slot 0's name).
std::string waiters_dir_name(const std::string& lock_name);

struct waiter_record {
  std::int64_t pid = 0;
  std::string label, host, boot_id;
  std::uint64_t proc_ticks = 0;
  std::int64_t since = 0;
  int gpu = -1;
  int gpus = 1;
  int priority = 0;              // higher is served first
  std::int64_t expect_ms = 0;    // the declared duration; 0: undeclared
  std::int64_t queued_us = 0;    // arrival, monotonic microseconds (sys::monotonic_us)
  std::uint64_t pid_ns = 0;      // the waiter's pid namespace; 0: unknown
  // A wait among several slots restricted to some of them
  // (CUDA_VISIBLE_DEVICES): those, at most max_listed_slots; empty: all.
  std::vector<int> slots;
};

inline constexpr std::size_t max_listed_slots = 64;

// The largest entry read; anything longer is not an entry.
inline constexpr std::size_t waiter_entry_cap = 4096;

// Serialized and read back; parse fails (false) on anything but an object
// with a positive integer pid.
std::string serialize_waiter(const waiter_record& r);
bool parse_waiter(const std::string& bytes, waiter_record& out);

// One registration, removed by the destructor (and the registry directory
// with it when that was the last entry). The entry is written under a
// temporary name, write-locked, then renamed in: under its final name it is
// write-locked from the first moment, so a reader that finds one unlocked
// knows its waiter is gone for good.
class waiter_registration {
 public:
  const std::string& name() const { return file_; }
  // Registers `rec` next to the lock at `lock_path`. Best effort: nullptr
  // when the registry cannot be written (permissions, a foreign file in the
  // way); waiting goes on unregistered. Also removes entries of this host's
  // dead waiters, which are the registry's own files.
  static std::unique_ptr<waiter_registration> add(const std::string& lock_path, const waiter_record& rec);
  ~waiter_registration();
  waiter_registration(const waiter_registration&) = delete;
  waiter_registration& operator=(const waiter_registration&) = delete;

 private:
  waiter_registration() = default;
  sys::fd parent_, dir_, entry_;
  std::string dir_name_, file_, shown_;
};

// One live entry of the queue.
struct queue_entry {
  std::string name;
  waiter_record rec;
};

// Serving order: priority (highest first), then arrival (earliest first),
// then pid and name, so that every reader orders the same entries alike.
bool served_before(const queue_entry& a, const queue_entry& b);

// The slot an entry waits for: its gpu, slot 0 for a plain lock, -1 for a
// wait among several slots (see accepts()).
int queue_slot(const waiter_record& r);
// Whether the entry's waiter would take slot `slot`: its own slot, or any
// of the slots it waits among.
bool accepts(const waiter_record& r, int slot);

// Reads one lock's registry again and again, cheaply: entries seen dead (not
// write-locked, their process gone, unreadable, too long) are remembered by
// name and never opened again; live ones are parsed once per inode and only
// re-probed for their write lock. Not thread-safe.
class registry_reader {
 public:
  explicit registry_reader(const std::string& lock_path);
  // The live entries, in serving order, at most 4096 looked at. With
  // `before`, only those served before it: the others (whose order is
  // fixed by their keys) are not probed at all, so the front of a long
  // queue looks at a few entries, not all of them.
  std::vector<queue_entry> live(const queue_entry* before = nullptr);
  // Whether the entry `name` is still there (a cheap stat).
  bool present(const std::string& name);
  const std::string& dir_path() const { return dir_path_; }

 private:
  bool open_dir();
  std::string lock_path_, dir_name_, dir_path_;
  sys::fd parent_, dir_;
  std::map<std::string, std::pair<sys::file_id, waiter_record>> parsed_;
  std::set<std::string> dead_;
};

// Removes the entries of this host's dead waiters from the registry
// `dir_name` in `parent`, and the registry itself when that leaves it empty.
// Best effort; a waiter registering meanwhile makes the directory again.
void sweep_waiters(int parent, const std::string& dir_name, const std::string& lock_path);

// The live entries of the registry of the lock at `lock_path`, in serving order.
std::vector<waiter> read_waiters(const std::string& lock_path, std::int64_t now_ms);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_WAITERS_HPP
