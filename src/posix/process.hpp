// Child processes and signals for the offload-lock command: a child that is
// forked before the lock is taken (so its pid can be recorded as the holder)
// and held back from exec until the lock is ours, signal forwarding, and
// detaching a background keeper.
#ifndef OFFLOAD_LOCK_SRC_POSIX_PROCESS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_PROCESS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"

namespace offload_lock::detail::proc {

class gated_child {
 public:
  using env_list = std::vector<std::pair<std::string, std::string>>;
  // Forks now; the child waits, then execs argv (PATH searched) with the
  // current environment plus `env`, plus variants[k] when start(k) picks
  // one (the environment of each GPU slot, known only once one is taken).
  // It exits 127 without exec'ing if this process goes away or calls
  // abandon().
  static result<gated_child> fork_gated(const std::vector<std::string>& argv, const env_list& env,
                                        const std::vector<env_list>& variants = {});
  gated_child(gated_child&&) noexcept;
  gated_child& operator=(gated_child&&) = delete;
  ~gated_child();

  std::int64_t pid() const { return pid_; }
  // Lets the child exec. Returns the exec failure (ENOENT, EACCES, ...) if
  // it could not, after reaping it.
  error start(int variant = -1);
  void abandon();
  // When start() failed because the child had already ended (killed while
  // it waited at the gate): its status, 128+N for signal N. -1 otherwise.
  int ended_before_start() const { return ended_before_start_; }

  // Waits for the child to end, passing on SIGINT, SIGTERM and SIGHUP that
  // were sent to this process (signals a terminal sends to the whole process
  // group already reach the child and are not sent twice). Returns the exit
  // status, or 128+N when killed by signal N. The child is left unreaped (a
  // zombie, which every participant's kill(pid, 0) still sees alive) until
  // reap(), so the caller can release the lock first.
  int wait_forwarding();
  // Whether the child has already ended (without reaping it): its status.
  std::optional<int> ended();
  void reap();
  // Sends a signal to the child.
  void signal(int sig);

 private:
  gated_child() = default;
  std::int64_t pid_ = -1;
  int gate_ = -1;    // write end: one byte lets the child exec
  int report_ = -1;  // read end: the child's exec errno, EOF when exec succeeded
  bool reaped_ = false;
  int ended_before_start_ = -1;
};

// From now on SIGINT, SIGTERM, SIGHUP and SIGCHLD are caught (and unblocked)
// and queued in a self-pipe; returns its read end, readable while a signal
// waits there. Call before anything a signal must not interrupt.
int catch_signals();
// The next queued signal number, 0 when none.
int take_signal();

// Blocks until standard input reaches EOF or SIGTERM/SIGINT arrives. Returns
// the signal number, or 0 for EOF.
int wait_for_eof_or_signal();

// Forks a detached background process (new session, standard streams on
// /dev/null, working directory /, and every other descriptor it inherited
// from the caller's own parent closed: only close-on-exec ones, which are
// this program's, stay). Returns true in the background process, false in
// the caller.
result<bool> fork_detached();

// kill(pid, sig); safe from any thread.
void send_signal(std::int64_t pid, int sig);

// Names of signals for messages ("SIGTERM").
std::string signal_name(int sig);

// Writes to stderr without buffering; safe from any thread.
void write_stderr(const std::string& s);

// Runs argv (PATH searched, no shell; stdin and stderr on /dev/null) and
// returns at most `cap` bytes of its standard output; nullopt when it
// cannot be run, fails, or is still running after timeout_ms (it is then
// killed).
std::optional<std::string> read_command(const std::vector<std::string>& argv, std::size_t cap,
                                        std::int64_t timeout_ms);

// The width of the terminal on `fd` in columns; 0 when `fd` is not a terminal.
int terminal_width(int fd);

// What `status --watch` waits on: entries created, removed or renamed in
// the watched directories, and the exit of the watched processes. Cheap to
// re-arm: directories and processes are replaced at every arm().
class change_feed {
 public:
  change_feed();
  ~change_feed();
  change_feed(const change_feed&) = delete;
  change_feed& operator=(const change_feed&) = delete;
  // Watches these directories too (missing ones are skipped). False
  // without inotify: the caller re-checks on a timer. Arm before looking,
  // so a change made after the look is never missed.
  bool arm_dirs(const std::vector<std::string>& dirs);
  // Watches exactly these processes. `gone` when one has already exited
  // (look again), `unwatched` without pidfd.
  enum class pids_armed { ok, gone, unwatched };
  pids_armed arm_pids(const std::vector<std::int64_t>& pids);
  // Waits for a change, the timeout (negative: none) or a readable extra
  // descriptor. False when an extra descriptor woke it.
  bool wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds);

 private:
  int ino_ = -1;
  std::vector<int> pidfds_;
};

}  // namespace offload_lock::detail::proc

#endif  // OFFLOAD_LOCK_SRC_POSIX_PROCESS_HPP
