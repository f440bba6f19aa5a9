// The queue's registry: who waits for the lock, as files beside it.
//
// Beside the lock (slot 0's) a directory `.<name>.queue` holds one directory
// per user, owned by that user and writable by no one else, and in it one
// entry per waiting acquisition: `<pid>-<12 hex>.json`, written under a
// temporary name, write-locked (OFD) by its waiter, then renamed in. So:
// - an entry speaks only for its author, the owner of its file: no user can
//   write, remove or rename another's entries (not even the maker of the
//   registry directory, who could only move a whole user directory, which
//   readers find by its owner, not its name);
// - an entry counts exactly while it is write-locked (only its author can
//   open it for writing, and no forked child keeps the lock), whatever its
//   pid, host or pid namespace say;
// - its arrival is the file's ctime, which the kernel sets at the rename
//   into place and no call lets a user choose or move earlier (a time
//   namespace shifts only the monotonic and boot clocks);
// - beside it, `<pid>-<12 hex>.wake` is its wake channel: a FIFO that only
//   its owner's processes may write one byte into (queue.hpp).
// Another user's directory is read with a bound (the first names only), so
// a flood of files costs a waiter a bounded amount, whatever its size.
// Mutual exclusion never depends on any of this.
#ifndef OFFLOAD_LOCK_SRC_REGISTRY_HPP
#define OFFLOAD_LOCK_SRC_REGISTRY_HPP

#include <cstdint>
#include <map>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "offload_lock/waiters.hpp"
#include "os/files.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

// The registry directory for the lock named `lock_name` (slot 0's name).
std::string queue_dir_name(const std::string& lock_name);
// The lock whose registry is the queue of `slot_path`, slot `slot` of it:
// slot 0's path (the slot's path without its ".gpu<k>" suffix).
std::string queue_base(const std::string& slot_path, int slot);

// What an entry says of its waiter: its own words, trusted only as its
// author's (see above).
struct waiter_record {
  std::int64_t pid = 0;
  std::string label, host;
  std::int64_t since = 0;        // when its wait began, epoch ms (for display)
  int gpu = -1;
  int gpus = 1;
  int priority = 0;              // higher is served first
  std::int64_t expect_ms = 0;    // the declared duration; 0: undeclared
  // A wait among several slots restricted to some of them
  // (CUDA_VISIBLE_DEVICES): those, at most max_listed_slots; empty: all.
  std::vector<int> slots;
};

inline constexpr std::size_t max_listed_slots = 64;
// The largest entry read; anything longer is not an entry. Labels are cut
// to fit (max_entry_label) whatever characters they hold.
inline constexpr std::size_t waiter_entry_cap = 4096;
inline constexpr std::size_t max_entry_label = 512;

// An entry's mode: 0644, with the owner's execute bit (0744) when its
// priority is 0, so that a reader can place it in line from one stat of its
// name (its ctime and this bit), without opening and reading it. An entry
// without the bit (one written before the bit existed, or at another
// priority) is read; one with the bit whose record says another priority is
// not an entry.
inline constexpr unsigned kPriorityZeroBit = 0100;
inline unsigned entry_mode(int priority) { return priority == 0 ? 0644 | kPriorityZeroBit : 0644; }

// Serialized and read back; parse fails (false) on anything but an object
// with a positive integer pid.
std::string serialize_waiter(const waiter_record& r);
bool parse_waiter(const std::string& bytes, waiter_record& out);

// One live entry of the queue.
struct queue_entry {
  std::string dir;              // the author's directory in the registry
  std::string name;             // "<pid>-<12 hex>.json"
  std::uint32_t uid = 0;        // the author: the owner of the file and of its directory
  std::int64_t arrival_ns = 0;  // the file's ctime: when it was renamed into place
  waiter_record rec;
  // "<pid>-<12 hex>": names the entry's wake channel and its staged lock.
  std::string stem() const;
};

// Serving order: priority (highest first), then arrival (earliest first),
// then author and name, so that every reader orders the same entries alike.
bool served_before(const queue_entry& a, const queue_entry& b);
// The same, for an entry given by its keys.
bool served_before_keys(int priority, std::int64_t arrival_ns, std::uint32_t uid, const std::string& dir,
                        const std::string& name, const queue_entry& b);

// The slot an entry waits for: its gpu, slot 0 for a plain lock, -1 for a
// wait among several slots (see accepts()).
int queue_slot(const waiter_record& r);
// Whether the entry's waiter would take slot `slot`: its own slot, or any
// of the slots it waits among.
bool accepts(const waiter_record& r, int slot);

// One entry of this process, removed by the destructor (with its user
// directory and the registry when they are left empty, unless keep_dirs()).
// Not thread-safe.
class registration {
 public:
  // Registers `rec` in the registry of the lock at `base`. Best effort:
  // nullptr when the registry cannot be written (permissions, a foreign file
  // in the way); the acquisition then waits unqueued, as a v1 runner does.
  static std::unique_ptr<registration> add(const std::string& base, const waiter_record& rec);
  ~registration();
  registration(const registration&) = delete;
  registration& operator=(const registration&) = delete;

  // This entry as every reader sees it (its arrival read back after the rename).
  const queue_entry& entry() const { return me_; }
  // The wake channel's read end: readable once another process of this
  // user wrote into it. messages() reads what is there (one per line).
  int wake_fd() const { return wake_.get(); }
  std::vector<std::string> messages();
  // Takes the entry and its wake channel's name out of the registry (the
  // descriptors stay open, so what was written before can still be read).
  // A waiter leaving calls this before it reads its channel a last time:
  // a follower that announces itself later finds the entry gone
  // (send()'s `confirm`) instead of waiting for a wake that never comes.
  // False when a name could not be removed (it is tried no more: the
  // entry, unlocked once its descriptor is closed, is swept as dead).
  bool withdraw();
  // send() to an entry in this entry's own user directory (this user's
  // waiters), through the directory this registration holds open: no walk
  // from the lock's parent. False as for send().
  bool send_beside(const std::string& to_stem, const std::string& line, bool confirm = false);
  // Leaves the registry's directories in place when the entry goes (see
  // tidy_registry()).
  void keep_dirs() { keep_dirs_ = true; }
  // Once withdrawn and with keep_dirs(): closes the directories, leaving
  // only the entry's and its channel's descriptors open.
  void close_dirs();

 private:
  registration() = default;
  sys::fd parent_, top_, dir_, entry_, wake_;
  queue_entry me_;
  std::string top_name_, shown_;
  bool withdrawn_ = false;
  bool removed_ = false;  // withdraw() removed both names
  bool keep_dirs_ = false;
};

// Removes this user's directory `user_dir` of the registry of the lock at
// `base`, and the registry, each only if empty. A waiter that takes the lock
// leaves them for its release to tidy: taking the lock is the way to the
// caller, and in a lock taken turn by turn the next waiter joins before that
// release, so the directories are made and removed once, not at every turn.
void tidy_registry(const std::string& base, const std::string& user_dir);

// Writes one line into the wake channel of entry `to`, if it is this
// process's user's (never blocking; false when it cannot be written). With
// `confirm`: also false when the entry is gone once the line is written.
bool send(const std::string& base, const std::string& to_dir, const std::string& to_stem, const std::string& line,
          bool confirm = false);

// Reads one lock's registry again and again, cheaply: an entry is stat'ed
// and parsed once per inode; afterwards only its write lock is probed; names
// seen dead are never opened again; a directory that has not changed since
// it settled is not listed again. Not thread-safe.
class registry_reader {
 public:
  explicit registry_reader(const std::string& base);
  // The live entries, in serving order. With `before`, only those served
  // before it: the others (whose order is fixed by their keys) are not
  // probed at all, so the front of a long queue looks at a few entries.
  std::vector<queue_entry> live(const queue_entry* before = nullptr);
  // The first live entry in serving order for which `want` is true. Entries
  // whose order is known from an earlier read (this thread's, in any reader)
  // are probed only in that order, and only those `want` accepts, until one
  // proves live: a releaser looking for the next in line probes one entry,
  // not the whole queue.
  //
  // `vouch_for`, when given, is asked about a candidate before it would be
  // probed (and read, when its order came from its mode alone): `yes` makes
  // it the one without a probe (its caller has its own proof of it), `no`
  // passes it by, `unknown` probes it as any. Its record then holds its keys
  // only (pid and priority) unless it was read before.
  enum class vouch { yes, no, unknown };
  std::optional<queue_entry> first(const std::function<bool(const queue_entry&)>& want,
                                   const std::function<vouch(const queue_entry&)>& vouch_for = {});
  // Whether the last read found an entry of this user's left behind by a
  // waiter that is gone (unlocked under its final name): worth a sweep.
  bool saw_dead_own() const { return saw_dead_own_; }
  // Whether the entry is still there (one stat).
  bool present(const queue_entry& e);
  // send() to an entry this reader has read, through its user directory as
  // held open since (this user's entries only, as for send()). With `gone`,
  // says whether it failed because the channel is no longer there (its
  // waiter left the queue): send() by name would find it gone as well.
  bool send_to(const queue_entry& e, const std::string& line, bool* gone = nullptr);
  // The registry directory, and the user directories last read: what a
  // waiter or a holder watches for the queue's changes.
  const std::string& top_path() const { return top_path_; }
  std::vector<std::string> dir_paths() const;
  // Looks up the registry through `dirfd`, the lock's parent as its caller
  // holds it open (and keeps open for as long as this reader reads),
  // instead of opening the parent itself.
  void borrow_parent(int dirfd) { borrowed_parent_ = dirfd; }

 private:
  struct entry_info {
    sys::file_id id;
    std::int64_t ctime_ns = 0;
    waiter_record rec;
    bool partial = false;  // placed by its mode, not read (order_by_mode())
  };
  struct user_dir {
    std::uint32_t uid = 0;
    sys::fd open;  // as of the last read, for probing its entries
    sys::file_id open_id;
    sys::file_id id;
    std::int64_t mtime = 0;
    bool settled = false;
    std::vector<std::string> names;            // entry names not yet seen dead
    std::map<std::string, entry_info> parsed;  // by entry name
    std::set<std::string> dead;
  };
  // An entry found by a listing: read and proven live already, or known
  // (its order) from an earlier read and not yet probed.
  struct candidate {
    queue_entry e;
    bool proven = false;
    bool unread = false;  // its record is its order only, until proven
    // Known from an earlier read, listed for first(): `e` holds its keys
    // only (priority and pid), the rest of its record is copied from here
    // (an entry of the user directory's map) once first() comes to it.
    const entry_info* rest = nullptr;
  };
  bool open_top();
  // Lists the registry and turns every entry name into a candidate, reading
  // (and probing) only the entries not read before.
  // With `before`, entries known to come after it are left out untouched
  // (the front of a long queue builds a few candidates, not the queue).
  std::vector<candidate> candidates(const queue_entry* before = nullptr);
  void read_dir(const std::string& dir_name, std::uint32_t uid, const queue_entry* before,
                std::vector<candidate>& out);
  // Places entry `n`, not read before, by its mode and ctime alone (see
  // entry_mode()): one stat. Its entry_info is then `partial` (its order
  // and pid only). False when its mode does not say priority 0.
  bool order_by_mode(user_dir& ud, const std::string& dir_name, const std::string& n);
  // Probes a candidate read before: still the same file, still write-locked.
  // Re-read when its file changed. False when it is not a live entry.
  bool prove(candidate& c);
  // Opens entry `n` of the user directory, checks it is a small file of its
  // owner, probes its write lock (with `probe`), and reads it unless its
  // file is the one read before. False when it is not a live entry now, or
  // not one at all (marked dead unless it could merely not be read this
  // time); without `probe`, true says only that it reads as an entry.
  bool look(user_dir& ud, const std::string& dir_name, const std::string& n, queue_entry& out, bool probe);
  // This thread's entries read before, by any reader: "<registry>/<user
  // dir>/<name>" -> what was read (checked against the file's identity
  // before use). A waiter that acquires again and again, and a releaser,
  // parse each entry once.
  static std::map<std::string, entry_info>& known();
  // sys::fork_generation() when the descriptors below were opened.
  std::int64_t fork_generation_ = sys::fork_generation();
  std::string base_, top_name_, top_path_;
  sys::fd parent_, top_;
  int borrowed_parent_ = -1;
  sys::file_id top_id_, top_open_id_;
  std::int64_t top_mtime_ = 0;
  bool top_settled_ = false;
  std::map<std::string, std::uint32_t> top_dirs_;  // user directory name -> its owner
  std::set<std::string> top_junk_;
  std::map<std::string, user_dir> dirs_;
  bool saw_dead_own_ = false;
  bool defer_probes_ = false;  // while first() lists: entries not read before are read, not probed
};

// Removes this user's dead entries (not write-locked), their wake channels
// and temporaries of dead processes from the registry of the lock at `base`.
// Best effort.
void sweep_registry(const std::string& base);

// The live entries of the registry of the lock at `base`, as offload_lock::waiter.
std::vector<waiter> read_waiters(const std::string& base, std::int64_t now_ms);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_REGISTRY_HPP
