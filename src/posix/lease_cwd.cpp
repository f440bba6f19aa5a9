// The current working directory (os/cwd.hpp) on Linux.
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "os/cwd.hpp"

namespace offload_lock::detail::sys {

std::optional<std::string> current_directory() {
  std::vector<char> buf(4096);
  for (;;) {
    if (::getcwd(buf.data(), buf.size())) return std::string(buf.data());
    if (errno != ERANGE || buf.size() >= (std::size_t{1} << 20)) return std::nullopt;
    buf.resize(buf.size() * 2);
  }
}

}  // namespace offload_lock::detail::sys
