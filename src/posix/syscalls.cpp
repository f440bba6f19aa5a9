// The table of real system calls (syscalls.hpp). Thin adapters only where
// libc's signature differs from the table's (variadic or missing wrappers).
#include "posix/syscalls.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>

namespace offload_lock::detail::sys {

namespace {

int real_openat(int dirfd, const char* name, int flags, mode_t mode) { return ::openat(dirfd, name, flags, mode); }

int real_renameat2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_renameat2, olddirfd, from, newdirfd, to, flags));
}

ssize_t real_getdents64(int fd, void* buf, size_t n) { return ::syscall(SYS_getdents64, fd, buf, n); }

int real_ofd_setlk(int fd, struct flock* l) { return ::fcntl(fd, F_OFD_SETLK, l); }
int real_ofd_getlk(int fd, struct flock* l) { return ::fcntl(fd, F_OFD_GETLK, l); }
int real_fcntl_int(int fd, int cmd, int arg) { return ::fcntl(fd, cmd, arg); }

int real_pidfd_open(pid_t pid, unsigned flags) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
#else
  (void)pid;
  (void)flags;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

constexpr syscall_table real_calls = {
    real_openat,      ::close,         ::read,           ::write,
    ::fstat,          ::fstatat,       ::mkdirat,        ::mkfifoat,
    ::unlinkat,       ::renameat,      real_renameat2,   ::fchmod,
    ::utimensat,      real_getdents64, real_ofd_setlk,   real_ofd_getlk,
    real_fcntl_int,   ::flock,         ::dup3,           ::pipe2,
    ::poll,           ::kill,          ::inotify_init1,  ::inotify_add_watch,
    ::inotify_rm_watch, real_pidfd_open, ::getrandom,    ::clock_gettime,
    ::readlinkat,     ::statx,         ::lseek,          ::pwrite,
    ::ftruncate,      ::sched_yield,
};

syscall_table calls = real_calls;

}  // namespace offload_lock::detail::sys
