// The one seam between offload-lock and the operating system. Every system
// call the library makes goes through here: each wrapper retries EINTR, opens
// with O_CLOEXEC, refuses to follow symlinks where a planted link could
// redirect it, and returns the errno together with the operation and path.
#ifndef OFFLOAD_LOCK_SRC_POSIX_SYS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SYS_HPP

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"

namespace offload_lock::detail::sys {

// The "current directory" pseudo descriptor (AT_FDCWD).
extern const int cwd;
// An errno value in std::system_category().
std::error_code errno_code(std::errc e);

// Builds a system error from an errno value and "operation path".
error sys_error(int err, const std::string& operation, const std::string& path);

// An owned file descriptor.
class fd {
 public:
  fd() noexcept = default;
  explicit fd(int v) noexcept : v_(v) {}
  fd(fd&& o) noexcept : v_(o.release()) {}
  fd& operator=(fd&& o) noexcept;
  fd(const fd&) = delete;
  fd& operator=(const fd&) = delete;
  ~fd();
  int get() const noexcept { return v_; }
  bool valid() const noexcept { return v_ >= 0; }
  int release() noexcept { int v = v_; v_ = -1; return v; }
  void reset() noexcept;

 private:
  int v_ = -1;
};

struct file_id {
  std::uint64_t dev = 0, ino = 0;
  bool operator==(const file_id& o) const { return dev == o.dev && ino == o.ino; }
  bool operator!=(const file_id& o) const { return !(*this == o); }
};

struct stat_info {
  file_id id;
  bool is_dir = false;
  bool is_regular = false;
  bool is_symlink = false;
  std::uint32_t uid = 0;
  std::uint32_t mode = 0;  // permission bits with setuid, setgid and sticky (07777)
  std::int64_t mtime_ms = 0;
  std::int64_t size = 0;
};

// Splits "a/b/c" into ("a/b", "c"); "c" into (".", "c"); "/c" into ("/", "c").
// A trailing slash is ignored. Empty or "/" input gives an empty name.
void split_path(const std::string& path, std::string& parent, std::string& name);

// Opens a directory (O_DIRECTORY, read-only). With nofollow the last
// component must not be a symlink.
result<fd> open_dir(int dirfd, const std::string& name, bool nofollow, const std::string& shown);
result<stat_info> stat_at(int dirfd, const std::string& name, const std::string& shown);  // no follow
result<stat_info> stat_fd(int f, const std::string& shown);

struct file_bytes {
  std::string bytes;
  stat_info st;
  bool truncated = false;  // the file was larger than the cap
};
// Reads at most `cap` bytes of a regular file, without following a symlink and
// without blocking on a FIFO. A non-regular file is EINVAL.
result<file_bytes> read_file_at(int dirfd, const std::string& name, std::size_t cap,
                                const std::string& shown);

error mkdir_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown);
// Creates `name` (must not exist) and writes all of `bytes`.
error write_new_file_at(int dirfd, const std::string& name, const std::string& bytes,
                        const std::string& shown);
// renameat2(RENAME_NOREPLACE). EINVAL/ENOSYS mean the file system refuses the flag.
error rename_noreplace(int dirfd, const std::string& from, const std::string& to,
                       const std::string& shown);
error rename_at(int dirfd, const std::string& from, const std::string& to, const std::string& shown);
// Checks that the open directory `dir` holds nothing but what a lock
// directory holds: regular files named meta.json or .meta.json.* (the
// temporary of the mkdir fallback). Anything else is ENOTEMPTY, naming the
// first such entry: a directory holding other files is not a lock, and
// offload-lock never deletes it.
error check_lock_contents(int dir, const std::string& shown);
// Removes the lock directory dirfd/name: checks its contents as above
// before removing anything, then unlinks those files and the directory.
// Never follows a symlink and never descends. Missing is not an error.
// With crash_op, crash_point(crash_op, "meta-removed") runs between the
// files and the directory.
error remove_lock_dir_at(int dirfd, const std::string& name, const std::string& shown,
                         const char* crash_op = nullptr);
error unlink_at(int dirfd, const std::string& name, bool dir, const std::string& shown);
// fchmod: sets the mode of an open file or directory exactly (no umask).
error chmod_fd(int f, unsigned mode, const std::string& shown);
// Sets the mtime (and atime) of dirfd/name to now, not following symlinks.
error touch_at(int dirfd, const std::string& name, const std::string& shown);
// Names in a directory (without . and ..).
result<std::vector<std::string>> list_dir(int dirfd, const std::string& shown);

// Open-file-description record locks over the whole file (F_OFD_SETLK),
// never blocking: no error when taken, EAGAIN when another open file
// description holds a conflicting lock. They work on directory descriptors,
// are kept across fork, and vanish when the last descriptor closes, whatever
// way the process ends.
error ofd_lock(int f, bool write);
// flock(LOCK_EX | LOCK_NB): serializes offload-lock reclaimers of one lock
// directory. Independent of the OFD locks above (Linux keeps the two apart).
// EWOULDBLOCK when another reclaimer holds it.
error try_flock_exclusive(int f);
// True when another open file description holds a lock that would conflict
// with a write lock (F_OFD_GETLK): probes without taking anything.
bool ofd_locked_elsewhere(int f);

// A pipe (read end, write end), both close-on-exec; the read end non-blocking.
result<std::pair<fd, fd>> make_pipe();
void notify(int write_end);  // writes one byte, never blocks
void drain(int read_end);    // reads whatever is queued, never blocks
// Waits until one of the descriptors (those >= 0) is readable, or timeout_ms
// passes (negative: no timeout). Retries EINTR.
void wait_readable(std::initializer_list<int> fds, std::int64_t timeout_ms);

std::int64_t now_ms();  // wall clock, epoch milliseconds
std::int64_t monotonic_ms();
std::string random_hex(std::size_t bytes);

// ---- processes ----
enum class liveness { alive, dead, zombie, invalid };
// kill(pid, 0) with EPERM counted as alive, then /proc/<pid>/stat for the
// zombie state. pid must be > 0.
liveness probe(std::int64_t pid);
// The process's start: clock ticks since boot (field 22 of /proc/<pid>/stat)
// and the same moment as epoch milliseconds by today's wall clock.
struct proc_start {
  std::uint64_t ticks = 0;
  std::int64_t epoch_ms = 0;
};
std::optional<proc_start> start_of(std::int64_t pid);
std::int64_t self_pid();
std::uint32_t effective_uid();
std::int64_t parent_pid();
const std::string& boot_id();
const std::string& host_name();
std::string program_name();
std::optional<std::string> get_env(const std::string& name);

// ---- test-only crash points ----
// Stops this process with SIGKILL at a named step of the protocol when the
// environment variable OFFLOAD_LOCK_TEST_CRASH_AT names that step, so tests
// can check that every participant recovers from a crash there. Test-only
// and inert in normal use: the variable is read once per process, and with
// it unset each call is one comparison. "STEP" crashes the first time STEP
// is reached, "STEP@N" the Nth time. The steps are listed where they are
// called (src/lock.cpp) and in tests/multiprocess/crash_test.cpp.
void crash_point(const char* step);
// The same, for a step shared by two operations: "<op>.<step>".
void crash_point(const char* op, const char* step);

// ---- waiting for change ----
// Sleeps until something that may change the lock's state happens: the
// watched directory is removed or moved (and, when asked, a file is written
// inside it), a watched process exits, or the timeout passes. Uses inotify and
// pidfd where the kernel offers them; where it does not (or
// OFFLOAD_LOCK_NO_INOTIFY / OFFLOAD_LOCK_NO_PIDFD is set), the caller's
// fallback timeout does the work.
class watcher {
 public:
  watcher();
  ~watcher();
  watcher(const watcher&) = delete;
  watcher& operator=(const watcher&) = delete;

  bool has_pidfd() const { return pidfd_ok_; }
  // Replaces the watched lock directory: its removal or move, seen both on
  // the directory itself and as its name leaving the parent (the kernel
  // holds back IN_DELETE_SELF while any process keeps the directory open),
  // and with `contents` every write inside it. Events for other names in
  // the parent are read and ignored without returning. Returns false when
  // it cannot be watched.
  bool watch_dir(const std::string& path, bool contents);
  void unwatch_dir();
  // Replaces the watched process. Returns false when pidfd is unavailable or
  // the process is already gone (ESRCH).
  bool watch_pid(std::int64_t pid);
  void unwatch_pid();
  // What woke the waiter.
  enum class wake { timeout, dir_event, pid_exit, extra_fd };
  // Waits at most timeout_ms (negative: forever). The extra descriptors are
  // polled too: readable or hung up ends the wait with extra_fd.
  wake wait(std::int64_t timeout_ms, int extra_fd = -1);
  wake wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds);
  // Waits on several watchers at once (one per lock of a set). `which` is
  // the index of the watcher that woke, for dir_event and pid_exit. A
  // timeout of 0 polls once.
  static wake wait_any(const std::vector<watcher*>& ws, std::int64_t timeout_ms,
                       const std::vector<int>& extra_fds, std::size_t& which);

 private:
  bool relevant_events();
  void add_poll_fds(std::vector<int>& out) const;
  // Taken from, and given back to, a process-wide pool: closing an inotify
  // descriptor makes the kernel wait for a grace period (about 12 ms
  // measured here), which would be paid by every acquisition.
  int ino_ = -1;
  int wd_ = -1, parent_wd_ = -1;
  std::string name_;
  fd pidfd_;
  bool pidfd_ok_ = true;
};

// Many lock directories watched on one inotify instance, for a thread that
// looks after every lock a process holds. Each lock is watched as in
// watcher::watch_dir (removal or move, on the directory and as its name in
// the parent). Not thread-safe; one owner thread.
class lock_watches {
 public:
  lock_watches();
  lock_watches(const lock_watches&) = delete;
  lock_watches& operator=(const lock_watches&) = delete;
  int fd() const { return ino_; }  // readable when events are queued; -1 without inotify
  // Returns an id for remove(), or -1 when the lock cannot be watched.
  int add(const std::string& path);
  void remove(int id);
  // Reads the queued events: the ids they concern (all ids on overflow).
  std::vector<int> take_events();

 private:
  struct entry {
    int dir_wd = -1, parent_wd = -1;
    std::string name;
  };
  int ino_ = -1;
  int next_id_ = 0;
  std::vector<std::pair<int, entry>> entries_;
};

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_POSIX_SYS_HPP
