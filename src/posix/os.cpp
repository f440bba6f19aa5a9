// The facts the offload-lock command reads from the system. See os.hpp.
#include "posix/os.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>

#include <utility>
#include <vector>

#include "os/programs.hpp"
#include "posix/sys.hpp"

namespace offload_lock::cli::os {

namespace sys = offload_lock::detail::sys;

std::optional<std::string> get_env(const std::string& name) { return sys::get_env(name); }

std::int64_t parent_pid() { return sys::parent_pid(); }

std::int64_t self_pid() { return sys::self_pid(); }

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

std::optional<std::string> command_name(std::int64_t pid) { return sys::command_name(pid); }

bool exits_within(std::int64_t pid, int ms) {
  for (int waited = 0;; waited += 20) {
    const auto l = sys::probe(pid);
    if (l == sys::liveness::dead || l == sys::liveness::zombie) return true;
    if (waited >= ms) return false;
    sys::wait_readable({}, 20);
  }
}

std::optional<std::uint32_t> process_uid(std::int64_t pid) { return sys::process_uid(pid); }

std::string host_name() { return sys::host_name(); }

std::optional<std::string> user_name(std::uint32_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_name) return std::nullopt;
  return std::string(pw.pw_name);
}

}  // namespace offload_lock::cli::os
