// The table of real system calls (syscalls.hpp). Thin adapters only where
// libc's signature differs from the table's (variadic or missing wrappers).
#include "posix/syscalls.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>

#include <cerrno>
#include <csignal>

namespace offload_lock::detail::sys {

namespace {

int real_openat(int dirfd, const char* name, int flags, mode_t mode) { return ::openat(dirfd, name, flags, mode); }

int real_renameat2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_renameat2, olddirfd, from, newdirfd, to, flags));
}

int real_ofd_setlk(int fd, struct flock* l) { return ::fcntl(fd, F_OFD_SETLK, l); }
int real_ofd_getlk(int fd, struct flock* l) { return ::fcntl(fd, F_OFD_GETLK, l); }

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
    real_openat,       ::close,           ::read,          ::write,          ::fstat,
    ::fstatat,         ::mkdirat,         ::unlinkat,      ::renameat,       real_renameat2,
    ::fchmod,          ::utimensat,       ::fdopendir,     real_ofd_setlk,   real_ofd_getlk,
    ::flock,           ::pipe2,           ::poll,          ::kill,           ::inotify_init1,
    ::inotify_add_watch, ::inotify_rm_watch, real_pidfd_open, ::getrandom,
};

syscall_table calls = real_calls;

}  // namespace offload_lock::detail::sys
