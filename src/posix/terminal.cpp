// The terminal of the offload-lock command. See terminal.hpp.
#include "posix/terminal.hpp"

#include <errno.h>
#include <sys/ioctl.h>
#include <unistd.h>

namespace offload_lock::cli::os {

void write_stderr(const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

int terminal_width(int fd) {
  if (!::isatty(fd)) return 0;
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace offload_lock::cli::os
