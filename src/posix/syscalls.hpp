// The system calls the library makes, as one table of function pointers, so
// tests can make any of them fail (ENOSPC, EMFILE, EIO, ...) or interleave
// another process's step, without root and without a special file system.
// Every call in src/posix/ that can fail goes through `calls` (directory
// listing, fcntl, the clocks and the /proc reads included); untouched, each
// costs one indirect call. A test replaces an entry, runs the scenario, and
// puts the saved table back (see tests/support.hpp's syscall_override).
// Replacing entries while other threads of the library run is a data race:
// tests do it between operations, or in a child process of their own
// (tests/multiprocess/fault_sweep_test.cpp).
#ifndef OFFLOAD_LOCK_SRC_POSIX_SYSCALLS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SYSCALLS_HPP

#include <poll.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <cstdint>

struct flock;
struct statx;

namespace offload_lock::detail::sys {

struct syscall_table {
  int (*openat)(int dirfd, const char* name, int flags, mode_t mode);
  int (*close)(int fd);
  ssize_t (*read)(int fd, void* buf, size_t n);
  ssize_t (*write)(int fd, const void* buf, size_t n);
  int (*fstat)(int fd, struct stat* st);
  int (*fstatat)(int dirfd, const char* name, struct stat* st, int flags);
  int (*mkdirat)(int dirfd, const char* name, mode_t mode);
  int (*mkfifoat)(int dirfd, const char* name, mode_t mode);
  int (*unlinkat)(int dirfd, const char* name, int flags);
  int (*renameat)(int olddirfd, const char* from, int newdirfd, const char* to);
  int (*renameat2)(int olddirfd, const char* from, int newdirfd, const char* to, unsigned flags);
  int (*fchmod)(int fd, mode_t mode);
  int (*utimensat)(int dirfd, const char* name, const struct timespec times[2], int flags);
  // The raw directory read (no libc DIR stream, so a listing can stop early).
  ssize_t (*getdents64)(int fd, void* buf, size_t n);
  int (*ofd_setlk)(int fd, struct flock* l);  // fcntl(F_OFD_SETLK)
  int (*ofd_getlk)(int fd, struct flock* l);  // fcntl(F_OFD_GETLK)
  int (*fcntl_int)(int fd, int cmd, int arg);  // fcntl with an int argument (F_SETFD, F_SETFL, ...)
  int (*flock)(int fd, int op);
  int (*dup3)(int from, int to, int flags);
  int (*pipe2)(int fds[2], int flags);
  int (*poll)(struct pollfd* fds, nfds_t n, int timeout_ms);
  int (*kill)(pid_t pid, int sig);
  int (*inotify_init1)(int flags);
  int (*inotify_add_watch)(int fd, const char* path, std::uint32_t mask);
  int (*inotify_rm_watch)(int fd, int wd);
  int (*pidfd_open)(pid_t pid, unsigned flags);
  ssize_t (*getrandom)(void* buf, size_t n, unsigned flags);
  int (*clock_gettime)(clockid_t clock, struct timespec* t);
  ssize_t (*readlinkat)(int dirfd, const char* name, char* buf, size_t n);
  // statx, for the one field fstat lacks: a directory's birth time.
  int (*statx)(int dirfd, const char* name, int flags, unsigned mask, struct statx* buf);
  off_t (*lseek)(int fd, off_t off, int whence);
  ssize_t (*pwrite)(int fd, const void* buf, size_t n, off_t off);
  int (*ftruncate)(int fd, off_t size);
  int (*sched_yield)();  // cannot fail on Linux: not in the fault sweep
};

// The table in use.
extern syscall_table calls;
// The real calls, for a test to restore or to delegate to.
extern const syscall_table real_calls;

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_POSIX_SYSCALLS_HPP
