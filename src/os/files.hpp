// The seam's file calls: descriptors, directories, reads, writes, renames and
// locks, each relative to a directory descriptor. Every call retries EINTR,
// opens with O_CLOEXEC, refuses to follow a symlink where a planted link
// could redirect it, and returns the errno with the operation and the path
// shown to people. Declarations only: src/posix/ implements them.
#ifndef OFFLOAD_LOCK_SRC_OS_FILES_HPP
#define OFFLOAD_LOCK_SRC_OS_FILES_HPP

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"
#include "os/types.hpp"

namespace offload_lock::detail::sys {

// The "current directory" pseudo descriptor (AT_FDCWD).
extern const int cwd;
// An errno value in std::system_category().
std::error_code errno_code(std::errc e);
// Builds a system error from an errno value and "operation path".
error sys_error(int err, const std::string& operation, const std::string& path);

// An owned file descriptor, closed by the destructor.
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
  int release() noexcept {
    int v = v_;
    v_ = -1;
    return v;
  }
  void reset() noexcept;

 private:
  int v_ = -1;
};

// Splits "a/b/c" into ("a/b", "c"); "c" into (".", "c"); "/c" into ("/", "c").
// A trailing slash is ignored. Empty or "/" input gives an empty name.
void split_path(const std::string& path, std::string& parent, std::string& name);

// Opens a directory (O_DIRECTORY, read-only). With nofollow the last
// component must not be a symlink.
result<fd> open_dir(int dirfd, const std::string& name, bool nofollow, const std::string& shown);
result<stat_info> stat_at(int dirfd, const std::string& name, const std::string& shown);  // no follow
result<stat_info> stat_fd(int f, const std::string& shown);
// When the open file or directory `f` was made (epoch ms), where the file
// system keeps it (statx's STATX_BTIME); nullopt where it does not or the
// question fails. Renaming, writing or emptying a directory leaves it as
// it was, unlike its mtime.
std::optional<std::int64_t> birth_ms(int f);

// What F_OFD_GETLK says of a file: another open file description holds a
// write lock on it, nobody does, or the question failed (an injected fault,
// say): never evidence either way.
enum class lock_probe { locked, unlocked, unknown };

struct file_bytes {
  std::string bytes;
  stat_info st;
  bool truncated = false;  // the file was larger than the cap
  lock_probe write_lock = lock_probe::unknown;  // with probe_write_lock
  bool write_locked() const { return write_lock == lock_probe::locked; }
};
// Reads at most `cap` bytes of a regular file, without following a symlink and
// without blocking on a FIFO. A non-regular file is EINVAL. With
// probe_write_lock, also asks (F_OFD_GETLK, nothing taken) whether anyone
// holds an OFD write lock on it, which only a process that could open the
// file for writing can take. With skip_unlocked too, a file nobody
// write-locks is not read (bytes empty): a queue entry's proof comes first.
result<file_bytes> read_file_at(int dirfd, const std::string& name, std::size_t cap, const std::string& shown,
                                bool probe_write_lock = false, bool skip_unlocked = false);
// The same through an open descriptor (read from its current offset).
result<file_bytes> read_fd(int f, std::size_t cap, const std::string& shown, bool probe_write_lock = false);
// The same for a descriptor the caller has already fstat'ed (`st`): one
// call fewer.
result<file_bytes> read_fd(int f, const stat_info& st, std::size_t cap, const std::string& shown);
// Opens a file read-only, never following a symlink or blocking on a FIFO.
result<fd> open_read(int dirfd, const std::string& name, const std::string& shown);
// Opens an existing regular file for writing (no truncation, no symlink).
result<fd> open_write(int dirfd, const std::string& name, const std::string& shown);

error mkdir_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown);
// A FIFO, opened read-write and non-blocking (so that it never reports a
// hang-up and never blocks its owner): a wake channel another process of
// the same user writes one byte into. Must not exist.
result<fd> make_fifo_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown);
// Opens an existing FIFO for writing without blocking (ENXIO: nobody reads it).
result<fd> open_fifo_writer(int dirfd, const std::string& name, const std::string& shown);
// Creates `name` (must not exist) and writes all of `bytes`.
error write_new_file_at(int dirfd, const std::string& name, const std::string& bytes, const std::string& shown);
// The same with `mode` (before the umask), keeping the file open for writing.
result<fd> create_file_at(int dirfd, const std::string& name, const std::string& bytes, unsigned mode,
                          const std::string& shown);
// renameat2(RENAME_NOREPLACE). EINVAL/ENOSYS mean the file system refuses the
// flag (or the test switch OFFLOAD_LOCK_NO_RENAMEAT2 says to act as if).
error rename_noreplace(int dirfd, const std::string& from, const std::string& to, const std::string& shown);
error rename_at(int dirfd, const std::string& from, const std::string& to, const std::string& shown);
// renameat2(RENAME_EXCHANGE): swaps two names atomically; neither is ever
// absent. EINVAL/ENOSYS where the file system refuses it (or the test switch
// OFFLOAD_LOCK_NO_RENAMEAT2 says to act as if).
error rename_exchange(int dirfd, const std::string& a, const std::string& b, const std::string& shown);
// unlinkat; `dir` removes a directory. Missing is not an error.
error unlink_at(int dirfd, const std::string& name, bool dir, const std::string& shown);
// fchmod: sets the mode of an open file or directory exactly (no umask).
error chmod_fd(int f, unsigned mode, const std::string& shown);
// Replaces the whole content of an open file with `bytes` in place (written
// from offset 0, then cut to their length). Not atomic for a reader: only
// for a file nobody else reads meanwhile.
error rewrite_fd(int f, const std::string& bytes, const std::string& shown);
// Sets the mtime (and atime) of dirfd/name to now, not following symlinks.
error touch_at(int dirfd, const std::string& name, const std::string& shown);
// An extended attribute ("user.…") of an open file: set to `value`, or
// removed (removing one that is not there is no error).
error set_attr(int f, const char* attr, const std::string& value, const std::string& shown);
error remove_attr(int f, const char* attr, const std::string& shown);
// The attribute `attr` of the regular file dirfd/name (not following
// symlinks), at most `cap` bytes; nullopt when it is not set, the file is
// gone, or the file system keeps none.
std::optional<std::string> attr_at(int dirfd, const std::string& name, const char* attr, std::size_t cap);
// Names in a directory (without . and ..). With `cap`, at most that many
// names, from the directory's start: the bounded look at a directory another
// user may have flooded.
result<std::vector<std::string>> list_dir(int dirfd, const std::string& shown, std::size_t cap = 0);
// The same through `dirfd` itself, from its start (its offset is rewound):
// for a directory the caller holds open to list again and again, and uses
// for nothing else at the same time.
result<std::vector<std::string>> list_dir_again(int dirfd, const std::string& shown, std::size_t cap = 0);

// Open-file-description record locks over the whole file (F_OFD_SETLK),
// never blocking: no error when taken, EAGAIN when another open file
// description holds a conflicting lock. They work on directory descriptors,
// are kept across fork, and vanish when the last descriptor closes, whatever
// way the process ends.
error ofd_lock(int f, bool write);
// flock(LOCK_EX | LOCK_NB). Independent of the OFD locks above (Linux keeps
// the two apart). EWOULDBLOCK when another open file description holds it.
error try_flock_exclusive(int f);
// flock(LOCK_UN): gives up what try_flock_exclusive took on `f`.
void flock_unlock(int f);
// Whether another open file description holds a write lock (one that would
// conflict with a read lock) on `f` (F_OFD_GETLK): probes without taking
// anything, and works on a descriptor opened read-only.
lock_probe write_locked_elsewhere(int f);

// Descriptors whose open file description carries a proof of life (the OFD
// write lock on a meta.json or a queue entry). A forked child must not keep
// that proof alive after this process is gone, so in the child of every
// fork() each of these numbers is pointed at /dev/null (the number stays
// valid, and closing it later is harmless). See tests/multiprocess/trust_test.cpp.
// Returns the identity of the file guarded (nothing when `f` cannot be
// looked at, and then it is not guarded).
std::optional<file_id> guard_from_fork(int f);
void unguard_from_fork(int f);

// A pipe (read end, write end), both close-on-exec; the read end non-blocking.
result<std::pair<fd, fd>> make_pipe();
void notify(int write_end);  // writes one byte, never blocks
void drain(int read_end);    // reads whatever is queued, never blocks
// One read or write on a non-blocking descriptor: the count, 0 at end of
// file, -1 when nothing could be done now (EAGAIN) or on error.
long read_some(int f, char* buf, std::size_t n);
long write_some(int f, const char* buf, std::size_t n);
// Waits until one of the descriptors (those >= 0) is readable or hung up, or
// timeout_ms passes (negative: no timeout). Retries EINTR.
void wait_readable(std::initializer_list<int> fds, std::int64_t timeout_ms);
// The same, saying which: the index of the first descriptor ready, -1 when
// the time ran out.
int wait_any(const std::vector<int>& fds, std::int64_t timeout_ms);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_FILES_HPP
