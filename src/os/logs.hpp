// The seam's calls for append-only log files (the lock's history): opening
// one for appending, one write per record, its size and link count, and
// reading the end of one. Like os/files.hpp, every call retries EINTR, opens
// with O_CLOEXEC and O_NOFOLLOW, and returns the errno with the operation and
// the path shown to people. Declarations only: src/posix/logs.cpp.
#ifndef OFFLOAD_LOCK_SRC_OS_LOGS_HPP
#define OFFLOAD_LOCK_SRC_OS_LOGS_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "offload_lock/error.hpp"
#include "os/files.hpp"

namespace offload_lock::detail::sys {

// Opens dirfd/name for appending, creating it with `mode` (before the umask)
// when it is missing. Never follows a symlink and never blocks on a FIFO;
// whether what it opened is a regular file is the caller's to check
// (log_status).
result<fd> open_append_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown);

// What a writer checks before each record: that the file is still a
// regular file of its own (owner), still linked somewhere (links > 0: not
// removed or replaced by rotation beyond the one rename), and its size.
struct log_status {
  stat_info st;
  std::uint64_t links = 0;
};
result<log_status> log_status_of(int f, const std::string& shown);

// Appends `bytes` with one write(2): on a file opened with O_APPEND the
// kernel puts them at the end as one piece, whoever else appends. A short
// write is EIO (what got in is a partial line, which readers skip).
error append_once(int f, std::string_view bytes, const std::string& shown);

// The last `cap` bytes of the regular file dirfd/name (all of it when it is
// smaller), without following a symlink or blocking on a FIFO; `truncated`
// says that bytes before them were left unread. A non-regular file is
// EINVAL.
result<file_bytes> read_tail_at(int dirfd, const std::string& name, std::size_t cap, const std::string& shown);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_LOGS_HPP
