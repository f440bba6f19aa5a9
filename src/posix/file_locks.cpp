// The seam's locks on open files (os/files.hpp) on Linux: OFD record locks
// and flock, and the descriptors that carry a proof of life kept from
// forked children.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "os/files.hpp"
#include "os/process.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

error ofd_lock(int f, bool write) {
  struct flock l {};
  l.l_type = write ? F_WRLCK : F_RDLCK;
  l.l_whence = SEEK_SET;
  if (retry([&] { return calls.ofd_setlk(f, &l); }) != 0)
    return error(std::error_code(errno, std::system_category()), "fcntl(F_OFD_SETLK)");
  return {};
}

error try_flock_exclusive(int f) {
  if (retry([&] { return calls.flock(f, LOCK_EX | LOCK_NB); }) != 0)
    return error(std::error_code(errno, std::system_category()), "flock");
  return {};
}

void flock_unlock(int f) {
  if (f >= 0) (void)retry([&] { return calls.flock(f, LOCK_UN); });
}

lock_probe write_locked_elsewhere(int f) {
  struct flock l {};
  l.l_type = F_RDLCK;
  l.l_whence = SEEK_SET;
  if (retry([&] { return calls.ofd_getlk(f, &l); }) != 0) return lock_probe::unknown;
  return l.l_type != F_UNLCK ? lock_probe::locked : lock_probe::unlocked;
}

namespace {

// The guarded descriptors, each with the file it was guarded for: a number
// closed without being unguarded may be reused by anything (a pipe made
// just before a fork, say), and the child must not touch that. A plain
// array behind a mutex: the fork handlers take the mutex around fork(), so
// the child finds it consistent and unlocked.
struct guarded_fd {
  int fd;
  dev_t dev;
  ino_t ino;
};
std::mutex g_guard_mu;
// Never destroyed: a heartbeat thread may drop a held lock's guard while
// the process exits and runs the static destructors.
std::vector<guarded_fd>& guarded() {
  static auto* v = new std::vector<guarded_fd>();
  return *v;
}

bool still_guarded_file(const guarded_fd& g) {
  struct stat st {};
  return ::fstat(g.fd, &st) == 0 && st.st_dev == g.dev && st.st_ino == g.ino;
}

void null_guarded_in_child() {
  // Only async-signal-safe calls here: open, fstat, dup3, close.
  const int nul = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (nul >= 0) {
    for (const guarded_fd& g : guarded())
      if (g.fd >= 0 && g.fd != nul && still_guarded_file(g)) ::dup3(nul, g.fd, O_CLOEXEC);
    ::close(nul);
  }
  g_guard_mu.unlock();
}

struct fork_guard_installer {
  fork_guard_installer() noexcept {
    on_fork([] { g_guard_mu.lock(); }, [] { g_guard_mu.unlock(); }, null_guarded_in_child);
  }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard_installer installed_fork_guard;
#endif

}  // namespace

std::optional<file_id> guard_from_fork(int f) {
  if (f < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(f, &st) != 0) return std::nullopt;
  std::lock_guard<std::mutex> g(g_guard_mu);
  auto& v = guarded();
  // Entries whose number now names another file were closed unguarded:
  // dropped here, so the list stays as long as what is really guarded.
  v.erase(std::remove_if(v.begin(), v.end(), [&](const guarded_fd& x) { return x.fd == f || !still_guarded_file(x); }),
          v.end());
  v.push_back({f, st.st_dev, st.st_ino});
  return file_id{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

void unguard_from_fork(int f) {
  if (f < 0) return;
  std::lock_guard<std::mutex> g(g_guard_mu);
  auto& v = guarded();
  v.erase(std::remove_if(v.begin(), v.end(), [&](const guarded_fd& x) { return x.fd == f; }), v.end());
}

}  // namespace offload_lock::detail::sys
