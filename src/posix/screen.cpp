// The terminal of a full-screen view. See screen.hpp.
#include "posix/screen.hpp"

#include <errno.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

namespace offload_lock::cli::os {

namespace {

void write_all(int fd, const std::string& s) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct timespec ts {0, 1000000};
        ::nanosleep(&ts, nullptr);
        continue;
      }
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

// The alternate screen and a hidden cursor, and their undoing.
constexpr const char* kEnter = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
constexpr const char* kLeave = "\x1b[0m\x1b[?25h\x1b[?1049l";

}  // namespace

bool full_screen::enter() {
  if (active_) return true;
  if (!::isatty(0) || !::isatty(1)) return false;
  struct termios t {};
  if (::tcgetattr(0, &t) != 0) return false;
  saved_.assign(reinterpret_cast<const char*>(&t), sizeof t);
  struct termios raw = t;
  raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO | ECHONL | IEXTEN);
  raw.c_iflag &= ~static_cast<tcflag_t>(IXON | ICRNL);
  // A read returns at once, with what is there (nothing: 0): no
  // O_NONBLOCK, which the shell sharing this terminal would inherit.
  raw.c_cc[VMIN] = 0;
  raw.c_cc[VTIME] = 0;
  raw.c_cc[VSUSP] = _POSIX_VDISABLE;
  raw.c_cc[VQUIT] = _POSIX_VDISABLE;
#ifdef VDSUSP
  raw.c_cc[VDSUSP] = _POSIX_VDISABLE;
#endif
  if (::tcsetattr(0, TCSAFLUSH, &raw) != 0) return false;
  active_ = true;
  write_all(1, kEnter);
  return true;
}

void full_screen::leave() {
  if (!active_) return;
  active_ = false;
  write_all(1, kLeave);
  struct termios t {};
  std::memcpy(&t, saved_.data(), sizeof t);
  ::tcsetattr(0, TCSAFLUSH, &t);
}

// NOLINTNEXTLINE(readability-convert-member-functions-to-static): the screen object owns the terminal it reads and draws
std::string full_screen::read_keys() {
  std::string out;
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return out;
  }
}

// NOLINTNEXTLINE(readability-convert-member-functions-to-static): the screen object owns the terminal it reads and draws
int full_screen::rows() const {
  struct winsize ws {};
  if (::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) return ws.ws_row;
  return 24;
}

// NOLINTNEXTLINE(readability-convert-member-functions-to-static): the screen object owns the terminal it reads and draws
int full_screen::cols() const {
  struct winsize ws {};
  if (::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// NOLINTNEXTLINE(readability-convert-member-functions-to-static): the screen object owns the terminal it reads and draws
void full_screen::draw(const std::string& s) { write_all(1, s); }

}  // namespace offload_lock::cli::os
