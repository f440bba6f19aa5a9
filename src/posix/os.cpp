// The facts the offload-lock command reads from the system. See os.hpp.
#include "posix/os.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>

#include <utility>
#include <vector>

#include "posix/sys.hpp"

namespace offload_lock::cli::os {

namespace sys = offload_lock::detail::sys;

std::optional<std::string> get_env(const std::string& name) { return sys::get_env(name); }

std::int64_t parent_pid() { return sys::parent_pid(); }

std::uint32_t effective_uid() { return sys::effective_uid(); }

void split_path(const std::string& path, std::string& parent, std::string& name) {
  sys::split_path(path, parent, name);
}

std::optional<std::vector<std::string>> list_names(const std::string& path) {
  auto d = sys::open_dir(sys::cwd, path, false, path);
  if (!d) return std::nullopt;
  auto names = sys::list_dir(d->get(), path);
  if (!names) return std::nullopt;
  return std::move(*names);
}

void open_missing_standard_fds() {
  for (int f = 0; f <= 2; ++f) {
    if (::fcntl(f, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free descriptor: this one.
    const int got = ::open("/dev/null", f == 0 ? O_RDONLY : O_WRONLY);
    if (got >= 0 && got != f) {
      ::dup2(got, f);
      ::close(got);
    }
  }
}

namespace {

std::optional<std::string> proc_file(std::int64_t pid, const char* what) {
  if (pid <= 0) return std::nullopt;
  const std::string path = "/proc/" + std::to_string(pid) + "/" + what;
  auto f = sys::read_file_at(sys::cwd, path, 4096, path);
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

bool exits_within(std::int64_t pid, int ms) {
  for (int waited = 0;; waited += 20) {
    const auto l = sys::probe(pid);
    if (l == sys::liveness::dead || l == sys::liveness::zombie) return true;
    if (waited >= ms) return false;
    sys::wait_readable({}, 20);
  }
}

std::string host_name() { return sys::host_name(); }

std::optional<std::string> user_name(std::uint32_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_name) return std::nullopt;
  return std::string(pw.pw_name);
}

}  // namespace offload_lock::cli::os
