// The seam's log-file calls (os/logs.hpp) on Linux. Every call but pread
// goes through the syscall table; pread is not in it, and a failure there
// only shortens what a reader of the history sees.
#include "os/logs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

result<fd> open_append_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown) {
  const int flags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;
  int raw = retry([&] { return calls.openat(dirfd, name.c_str(), flags, static_cast<mode_t>(mode)); });
  if (raw < 0) return sys_error(errno, "open", shown);
  return fd(raw);
}

result<log_status> log_status_of(int f, const std::string& shown) {
  struct stat s {};
  if (retry([&] { return calls.fstat(f, &s); }) != 0) return sys_error(errno, "stat", shown);
  return log_status{from_stat(s), static_cast<std::uint64_t>(s.st_nlink)};
}

error append_once(int f, std::string_view bytes, const std::string& shown) {
  const ssize_t n = retry([&] { return calls.write(f, bytes.data(), bytes.size()); });
  if (n < 0) return sys_error(errno, "write", shown);
  if (static_cast<std::size_t>(n) != bytes.size()) return sys_error(EIO, "write (short)", shown);
  return {};
}

result<file_bytes> read_tail_at(int dirfd, const std::string& name, std::size_t cap, const std::string& shown) {
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
  const auto size = static_cast<std::size_t>(std::max<std::int64_t>(0, st->size));
  const std::size_t from = size > cap ? size - cap : 0;
  out.truncated = from > 0;
  out.bytes.resize(size - from);
  std::size_t got = 0;
  while (got < out.bytes.size()) {
    const ssize_t n = retry([&] {
      return ::pread(f.get(), &out.bytes[got], out.bytes.size() - got, static_cast<off_t>(from + got));
    });
    if (n < 0) return sys_error(errno, "read", shown);
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<std::size_t>(n);
  }
  out.bytes.resize(got);
  return out;
}

}  // namespace offload_lock::detail::sys
