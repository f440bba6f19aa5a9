// Child processes of the offload-lock command: the gated child, the keeper.
// A child is forked before the lock is taken (so its pid can be recorded as
// the holder) and held back from exec until the lock is ours; signals sent
// to the command are passed on to it. The keeper is a detached background
// process.
#ifndef OFFLOAD_LOCK_SRC_POSIX_CHILD_HPP
#define OFFLOAD_LOCK_SRC_POSIX_CHILD_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "offload_lock/error.hpp"

namespace offload_lock::cli::os {

class gated_child {
 public:
  using env_list = std::vector<std::pair<std::string, std::string>>;
  // Forks now; the child waits, then execs argv (PATH searched) with the
  // current environment plus `env`, plus variants[k] when start(k) picks
  // one (the environment of each GPU slot, known only once one is taken).
  // It exits 127 without exec'ing if this process goes away or calls
  // abandon(). With `die_with_parent`, the child (and CMD after exec) is
  // killed (SIGKILL) when the thread that forked it ends, this process's
  // death included.
  static result<gated_child> fork_gated(const std::vector<std::string>& argv, const env_list& env,
                                        const std::vector<env_list>& variants = {}, bool die_with_parent = false);
  gated_child(gated_child&&) noexcept;
  gated_child& operator=(gated_child&&) = delete;
  ~gated_child();

  std::int64_t pid() const { return pid_; }
  // Lets the child exec, with `late` added to (or replacing in) its
  // environment: what is known only once the lock is held, such as the
  // lease it runs under (at most max_late variables, max_late_bytes in
  // all: bad_input beyond, and the child stays at the gate). Returns the
  // exec failure (ENOENT, EACCES, ...) if it could not, after reaping it.
  static constexpr std::size_t max_late = 16, max_late_bytes = 16384;
  error start(int variant = -1, const env_list& late = {});
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
  // The same for at most timeout_ms: nullopt when the child still runs then.
  std::optional<int> wait_forwarding_for(std::int64_t timeout_ms);
  // Whether the child has already ended (without reaping it): its status.
  std::optional<int> ended();
  void reap();

 private:
  gated_child() = default;
  std::int64_t pid_ = -1;
  int gate_ = -1;    // write end: one byte lets the child exec
  int report_ = -1;  // read end: the child's exec errno, EOF when exec succeeded
  bool reaped_ = false;
  int ended_before_start_ = -1;
};

// Forks a detached background process (new session, standard streams on
// /dev/null, working directory /, and every other descriptor it inherited
// from the caller's own parent closed: only close-on-exec ones, which are
// this program's, stay). Returns true in the background process, false in
// the caller.
result<bool> fork_detached();

}  // namespace offload_lock::cli::os

#endif  // OFFLOAD_LOCK_SRC_POSIX_CHILD_HPP
