// The kernel's name and parent of another process. See os/programs.hpp.
#include <utility>

#include "os/files.hpp"
#include "os/programs.hpp"

namespace offload_lock::detail::sys {

namespace {

std::optional<std::string> proc_file(std::int64_t pid, const char* what) {
  if (pid <= 0) return std::nullopt;
  const std::string path = "/proc/" + std::to_string(pid) + "/" + what;
  auto f = read_file_at(cwd, path, 4096, path);
  if (!f) return std::nullopt;
  return std::move(f->bytes);
}

}  // namespace

std::optional<std::int64_t> parent_of(std::int64_t pid) {
  auto stat = proc_file(pid, "stat");
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  if (!stat) return std::nullopt;
  const auto close = stat->rfind(')');
  if (close == std::string::npos || close + 4 >= stat->size()) return std::nullopt;
  const auto from = stat->find(' ', close + 2);
  if (from == std::string::npos) return std::nullopt;
  std::int64_t ppid = 0;
  for (std::size_t i = from + 1; i < stat->size() && (*stat)[i] >= '0' && (*stat)[i] <= '9' && ppid < (1LL << 40); ++i)
    ppid = ppid * 10 + ((*stat)[i] - '0');
  return ppid;
}

std::optional<std::string> command_name(std::int64_t pid) {
  auto comm = proc_file(pid, "comm");
  if (!comm) return std::nullopt;
  if (!comm->empty() && comm->back() == '\n') comm->pop_back();
  return comm;
}

}  // namespace offload_lock::detail::sys
