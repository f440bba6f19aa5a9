// The facts the offload-lock command reads from the system. See os.hpp.
#include "posix/os.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include <utility>

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

}  // namespace offload_lock::cli::os
