// The terminal of the offload-lock command. See terminal.hpp.
#include "posix/terminal.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace offload_lock::cli::os {

namespace {

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

void write_stderr(const std::string& s) { write_all(2, s); }

int stderr_copy_unless_pipe() {
  struct stat st {};
  if (::fstat(2, &st) != 0 || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) return -1;
  return ::fcntl(2, F_DUPFD_CLOEXEC, 3);
}

void write_and_close(int fd, const std::string& s) {
  if (fd < 0) return;
  write_all(fd, s);
  ::close(fd);
}

int terminal_width(int fd) {
  if (!::isatty(fd)) return 0;
  struct winsize ws {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

}  // namespace offload_lock::cli::os
