// The seam's file calls (os/files.hpp) on Linux, through the syscall table.
#include "os/files.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "os/test_hooks.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

const int cwd = AT_FDCWD;
std::error_code errno_code(std::errc e) { return {static_cast<int>(e), std::system_category()}; }

error sys_error(int err, const std::string& operation, const std::string& path) {
  return error(std::error_code(err, std::system_category()), operation + " " + path);
}

fd& fd::operator=(fd&& o) noexcept {
  if (this != &o) {
    reset();
    v_ = o.release();
  }
  return *this;
}
fd::~fd() { reset(); }
void fd::reset() noexcept {
  // close() is not retried on EINTR: on Linux the descriptor is gone either way.
  if (v_ >= 0) calls.close(v_);
  v_ = -1;
}

void split_path(const std::string& path, std::string& parent, std::string& name) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  if (p.empty() || p == "/") {
    parent = p.empty() ? "." : "/";
    name.clear();
  } else if (slash == std::string::npos) {
    parent = ".";
    name = p;
  } else {
    parent = slash == 0 ? "/" : p.substr(0, slash);
    name = p.substr(slash + 1);
  }
}

result<fd> open_dir(int dirfd, const std::string& name, bool nofollow, const std::string& shown) {
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0);
  int f = retry([&] { return calls.openat(dirfd, name.c_str(), flags, 0); });
  if (f < 0) return sys_error(errno, "open", shown);
  return fd(f);
}

result<stat_info> stat_at(int dirfd, const std::string& name, const std::string& shown) {
  struct stat s {};
  if (retry([&] { return calls.fstatat(dirfd, name.c_str(), &s, AT_SYMLINK_NOFOLLOW); }) != 0)
    return sys_error(errno, "stat", shown);
  return from_stat(s);
}

result<stat_info> stat_fd(int f, const std::string& shown) {
  struct stat s {};
  if (retry([&] { return calls.fstat(f, &s); }) != 0) return sys_error(errno, "stat", shown);
  return from_stat(s);
}

result<file_bytes> read_file_at(int dirfd, const std::string& name, std::size_t cap, const std::string& shown,
                                bool probe_write_lock, bool skip_unlocked) {
  // O_NONBLOCK: a FIFO planted as meta.json must not hang the reader.
  int raw = retry([&] {
    return calls.openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
  });
  if (raw < 0) return sys_error(errno, "open", shown);
  fd f(raw);
  auto st = stat_fd(f.get(), shown);
  if (!st) return st.error();
  if (!st->is_regular) return sys_error(EINVAL, "read (not a regular file)", shown);
  file_bytes out;
  out.st = *st;
  if (probe_write_lock) out.write_locked = write_locked_elsewhere(f.get());
  if (probe_write_lock && skip_unlocked && !out.write_locked) return out;
  std::size_t want = cap + 1;
  out.bytes.resize(std::min<std::size_t>(want, static_cast<std::size_t>(st->size) + 4096));
  std::size_t got = 0;
  for (;;) {
    if (got == out.bytes.size()) {
      if (out.bytes.size() >= want) break;
      out.bytes.resize(std::min(want, out.bytes.size() * 2));
    }
    ssize_t n = retry([&] { return calls.read(f.get(), &out.bytes[got], out.bytes.size() - got); });
    if (n < 0) return sys_error(errno, "read", shown);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.truncated = got > cap;
  out.bytes.resize(std::min(got, cap));
  return out;
}

error mkdir_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown) {
  if (retry([&] { return calls.mkdirat(dirfd, name.c_str(), mode); }) != 0) return sys_error(errno, "mkdir", shown);
  return {};
}

error chmod_fd(int f, unsigned mode, const std::string& shown) {
  if (retry([&] { return calls.fchmod(f, static_cast<mode_t>(mode)); }) != 0) return sys_error(errno, "chmod", shown);
  return {};
}

result<fd> create_file_at(int dirfd, const std::string& name, const std::string& bytes, unsigned mode,
                          const std::string& shown) {
  int raw = retry([&] {
    return calls.openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                        static_cast<mode_t>(mode));
  });
  if (raw < 0) return sys_error(errno, "create", shown);
  fd f(raw);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = retry([&] { return calls.write(f.get(), bytes.data() + done, bytes.size() - done); });
    if (n < 0) return sys_error(errno, "write", shown);
    done += static_cast<std::size_t>(n);
  }
  return f;
}

error write_new_file_at(int dirfd, const std::string& name, const std::string& bytes, const std::string& shown) {
  auto f = create_file_at(dirfd, name, bytes, 0666, shown);
  return f ? error{} : f.error();
}

error rename_noreplace(int dirfd, const std::string& from, const std::string& to, const std::string& shown) {
#ifndef RENAME_NOREPLACE
  constexpr unsigned RENAME_NOREPLACE = 1;
#endif
  if (!feature_enabled(feature::renameat2)) return sys_error(EINVAL, "rename (RENAME_NOREPLACE disabled)", shown);
  if (retry([&] { return calls.renameat2(dirfd, from.c_str(), dirfd, to.c_str(), RENAME_NOREPLACE); }) != 0)
    return sys_error(errno, "rename", shown);
  return {};
}

error rename_at(int dirfd, const std::string& from, const std::string& to, const std::string& shown) {
  if (retry([&] { return calls.renameat(dirfd, from.c_str(), dirfd, to.c_str()); }) != 0)
    return sys_error(errno, "rename", shown);
  return {};
}

error unlink_at(int dirfd, const std::string& name, bool dir, const std::string& shown) {
  if (retry([&] { return calls.unlinkat(dirfd, name.c_str(), dir ? AT_REMOVEDIR : 0); }) != 0) {
    if (errno == ENOENT) return {};
    return sys_error(errno, dir ? "rmdir" : "unlink", shown);
  }
  return {};
}

error touch_at(int dirfd, const std::string& name, const std::string& shown) {
  if (retry([&] { return calls.utimensat(dirfd, name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW); }) != 0)
    return sys_error(errno, "touch", shown);
  return {};
}

result<std::vector<std::string>> list_dir(int dirfd, const std::string& shown) {
  int dup = retry([&] { return calls.openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0); });
  if (dup < 0) return sys_error(errno, "open", shown);
  DIR* d = calls.fdopendir(dup);
  if (!d) {
    int e = errno;
    calls.close(dup);
    return sys_error(e, "opendir", shown);
  }
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* ent = ::readdir(d)) {
    if (std::strcmp(ent->d_name, ".") != 0 && std::strcmp(ent->d_name, "..") != 0) names.emplace_back(ent->d_name);
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) return sys_error(e, "readdir", shown);
  return names;
}

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

bool write_locked_elsewhere(int f) {
  struct flock l {};
  l.l_type = F_RDLCK;
  l.l_whence = SEEK_SET;
  if (retry([&] { return calls.ofd_getlk(f, &l); }) != 0) return false;
  return l.l_type != F_UNLCK;
}

result<std::pair<fd, fd>> make_pipe() {
  int p[2];
  if (calls.pipe2(p, O_CLOEXEC) != 0) return sys_error(errno, "pipe", "");
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  return std::make_pair(fd(p[0]), fd(p[1]));
}

void notify(int write_end) {
  char c = 1;
  ssize_t r = calls.write(write_end, &c, 1);
  (void)r;
}

void drain(int read_end) {
  char buf[256];
  while (calls.read(read_end, buf, sizeof buf) > 0) {
  }
}

void wait_readable(std::initializer_list<int> fds, std::int64_t timeout_ms) {
  std::vector<struct pollfd> p;
  for (int f : fds)
    if (f >= 0) p.push_back({f, POLLIN, 0});
  const std::int64_t deadline = timeout_ms < 0 ? -1 : deadline_in(timeout_ms);
  for (bool first = true; poll_toward(p, deadline, first) < 0; first = false) {
  }
}

}  // namespace offload_lock::detail::sys
