// The seam's file calls (os/files.hpp) on Linux, through the syscall table:
// descriptors, paths, reads, writes, renames, attributes and listings
// (locks on files: file_locks.cpp; pipes and waits: pipes.cpp).
#include "os/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

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

std::optional<std::int64_t> birth_ms(int f) {
  struct statx sx {};
  if (retry([&] { return calls.statx(f, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx); }) != 0)
    return std::nullopt;
  if (!(sx.stx_mask & STATX_BTIME)) return std::nullopt;
  return static_cast<std::int64_t>(sx.stx_btime.tv_sec) * 1000 + sx.stx_btime.tv_nsec / 1'000'000;
}

result<fd> open_read(int dirfd, const std::string& name, const std::string& shown) {
  // O_NONBLOCK: a FIFO planted as meta.json must not hang the reader.
  int raw = retry([&] {
    return calls.openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
  });
  if (raw < 0) return sys_error(errno, "open", shown);
  return fd(raw);
}

result<fd> open_write(int dirfd, const std::string& name, const std::string& shown) {
  int raw = retry([&] {
    return calls.openat(dirfd, name.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
  });
  if (raw < 0) return sys_error(errno, "open", shown);
  fd f(raw);
  auto st = stat_fd(f.get(), shown);
  if (!st) return st.error();
  if (!st->is_regular) return sys_error(EINVAL, "open (not a regular file)", shown);
  return f;
}

namespace {

result<file_bytes> read_stated(int f, const stat_info& st, std::size_t cap, const std::string& shown,
                               bool probe_write_lock, bool skip_unlocked) {
  if (!st.is_regular) return sys_error(EINVAL, "read (not a regular file)", shown);
  file_bytes out;
  out.st = st;
  if (probe_write_lock) out.write_lock = write_locked_elsewhere(f);
  if (probe_write_lock && skip_unlocked && out.write_lock == lock_probe::unlocked) return out;
  std::size_t want = cap + 1;
  out.bytes.resize(std::min<std::size_t>(want, static_cast<std::size_t>(std::max<std::int64_t>(0, st.size)) + 4096));
  std::size_t got = 0;
  for (;;) {
    if (got == out.bytes.size()) {
      if (out.bytes.size() >= want) break;
      out.bytes.resize(std::min(want, out.bytes.size() * 2));
    }
    const std::size_t asked = out.bytes.size() - got;
    ssize_t n = retry([&] { return calls.read(f, &out.bytes[got], asked); });
    if (n < 0) return sys_error(errno, "read", shown);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    // A short read that reaches the size the file had when it was opened
    // is its end: no second read to be told so (every look reads a
    // meta.json, every queue read the entries it has not seen).
    if (static_cast<std::size_t>(n) < asked && static_cast<std::int64_t>(got) >= st.size) break;
  }
  out.truncated = got > cap;
  out.bytes.resize(std::min(got, cap));
  return out;
}

result<file_bytes> read_open(int f, std::size_t cap, const std::string& shown, bool probe_write_lock,
                             bool skip_unlocked) {
  auto st = stat_fd(f, shown);
  if (!st) return st.error();
  return read_stated(f, *st, cap, shown, probe_write_lock, skip_unlocked);
}

}  // namespace

result<file_bytes> read_file_at(int dirfd, const std::string& name, std::size_t cap, const std::string& shown,
                                bool probe_write_lock, bool skip_unlocked) {
  auto f = open_read(dirfd, name, shown);
  if (!f) return f.error();
  return read_open(f->get(), cap, shown, probe_write_lock, skip_unlocked);
}

result<file_bytes> read_fd(int f, std::size_t cap, const std::string& shown, bool probe_write_lock) {
  return read_open(f, cap, shown, probe_write_lock, false);
}

result<file_bytes> read_fd(int f, const stat_info& st, std::size_t cap, const std::string& shown) {
  return read_stated(f, st, cap, shown, false, false);
}

error mkdir_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown) {
  if (retry([&] { return calls.mkdirat(dirfd, name.c_str(), mode); }) != 0) return sys_error(errno, "mkdir", shown);
  return {};
}

result<fd> make_fifo_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown) {
  if (retry([&] { return calls.mkfifoat(dirfd, name.c_str(), static_cast<mode_t>(mode)); }) != 0)
    return sys_error(errno, "mkfifo", shown);
  // Read-write: the owner is a writer itself, so poll() never reports a
  // hang-up when a writer comes and goes, and the open never blocks.
  int raw = retry([&] { return calls.openat(dirfd, name.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW, 0); });
  if (raw < 0) {
    const int e = errno;
    (void)retry([&] { return calls.unlinkat(dirfd, name.c_str(), 0); });
    return sys_error(e, "open", shown);
  }
  return fd(raw);
}

result<fd> open_fifo_writer(int dirfd, const std::string& name, const std::string& shown) {
  int raw = retry([&] { return calls.openat(dirfd, name.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW, 0); });
  if (raw < 0) return sys_error(errno, "open", shown);
  fd f(raw);
  auto st = stat_fd(f.get(), shown);
  if (!st) return st.error();
  if (st->is_regular || st->is_dir) return sys_error(EINVAL, "open (not a FIFO)", shown);
  return f;
}

error rewrite_fd(int f, const std::string& bytes, const std::string& shown) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = retry([&] {
      return calls.pwrite(f, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    });
    if (n < 0) return sys_error(errno, "write", shown);
    if (n == 0) return sys_error(EIO, "write", shown);
    done += static_cast<std::size_t>(n);
  }
  if (retry([&] { return calls.ftruncate(f, static_cast<off_t>(bytes.size())); }) != 0)
    return sys_error(errno, "truncate", shown);
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

error rename_exchange(int dirfd, const std::string& a, const std::string& b, const std::string& shown) {
#ifndef RENAME_EXCHANGE
  constexpr unsigned RENAME_EXCHANGE = 2;
#endif
  if (!feature_enabled(feature::renameat2)) return sys_error(EINVAL, "rename (RENAME_EXCHANGE disabled)", shown);
  if (retry([&] { return calls.renameat2(dirfd, a.c_str(), dirfd, b.c_str(), RENAME_EXCHANGE); }) != 0)
    return sys_error(errno, "rename (exchange)", shown);
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

error set_attr(int f, const char* attr, const std::string& value, const std::string& shown) {
  if (retry([&] { return ::fsetxattr(f, attr, value.data(), value.size(), 0); }) != 0)
    return sys_error(errno, "set attribute of", shown);
  return {};
}

error remove_attr(int f, const char* attr, const std::string& shown) {
  if (retry([&] { return ::fremovexattr(f, attr); }) != 0 && errno != ENODATA)
    return sys_error(errno, "remove attribute of", shown);
  return {};
}

std::optional<std::string> attr_at(int dirfd, const std::string& name, const char* attr, std::size_t cap) {
  const int raw = retry([&] {
    return calls.openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0);
  });
  if (raw < 0) return std::nullopt;
  fd f(raw);
  std::string value(cap, '\0');
  const ssize_t n = retry([&] { return ::fgetxattr(f.get(), attr, value.data(), value.size()); });
  if (n < 0) return std::nullopt;
  value.resize(static_cast<std::size_t>(n));
  return value;
}

namespace {

result<std::vector<std::string>> read_names(int dirfd, const std::string& shown, std::size_t cap) {
  std::vector<std::string> names;
  alignas(8) char buf[32768];
  for (;;) {
    const ssize_t n = retry([&] { return calls.getdents64(dirfd, buf, sizeof buf); });
    if (n < 0) return sys_error(errno, "readdir", shown);
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      if (reclen == 0) return sys_error(EIO, "readdir", shown);
      const char* name = buf + off + 19;
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) names.emplace_back(name);
      off += reclen;
    }
    if (cap && names.size() >= cap) {
      names.resize(cap);
      break;
    }
  }
  return names;
}

}  // namespace

result<std::vector<std::string>> list_dir(int dirfd, const std::string& shown, std::size_t cap) {
  // A descriptor of its own: the listing's offset is not the caller's.
  int raw = retry([&] { return calls.openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0); });
  if (raw < 0) return sys_error(errno, "open", shown);
  fd d(raw);
  return read_names(d.get(), shown, cap);
}

result<std::vector<std::string>> list_dir_again(int dirfd, const std::string& shown, std::size_t cap) {
  if (retry([&] { return static_cast<int>(calls.lseek(dirfd, 0, SEEK_SET)); }) < 0) return sys_error(errno, "lseek", shown);
  return read_names(dirfd, shown, cap);
}

}  // namespace offload_lock::detail::sys
