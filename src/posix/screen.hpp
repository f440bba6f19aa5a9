// The terminal of a full-screen view (`offload-lock top`): keys one at a
// time without echo, the alternate screen, the cursor hidden, and the
// terminal given back exactly as it was.
#ifndef OFFLOAD_LOCK_SRC_POSIX_SCREEN_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SCREEN_HPP

#include <string>

namespace offload_lock::cli::os {

class full_screen {
 public:
  full_screen() = default;
  full_screen(const full_screen&) = delete;
  full_screen& operator=(const full_screen&) = delete;
  ~full_screen() { leave(); }

  // Takes the terminal of standard input and output: no echo, no line
  // editing, keys as they come; Ctrl-C still sends SIGINT (so it ends the
  // view through the caller's signal handling), Ctrl-Z and Ctrl-\ do
  // nothing (a stopped view would leave the terminal in this state); the
  // alternate screen; the cursor hidden. False, changing nothing, when
  // either is not a terminal.
  bool enter();
  // Puts back the settings and the screen that enter() found. Idempotent.
  void leave();

  // The descriptor to wait on for keys.
  static int keys_fd() { return 0; }
  // The bytes of the keys pressed so far; empty when none. Never blocks.
  std::string read_keys();
  // The terminal's size now (80x24 when it will not say).
  int rows() const;
  int cols() const;
  // Writes all of `s` to the terminal at once.
  void draw(const std::string& s);

 private:
  bool active_ = false;
  // The saved termios, as bytes (no <termios.h> in a header).
  std::string saved_;
};

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_SCREEN_HPP
