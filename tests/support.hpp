// Test support: per-test temporary directories, real child processes
// (spawned with Boost.Process) with line-based I/O and bounded waits, and
// small file helpers. Nothing here sleeps a fixed time to let things happen:
// every wait is for an event, with a generous upper bound.
#ifndef OFFLOAD_LOCK_TESTS_SUPPORT_HPP
#define OFFLOAD_LOCK_TESTS_SUPPORT_HPP

#include <boost/filesystem.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace olt {

namespace fs = boost::filesystem;
using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

// A generous bound for anything that should happen "at once".
inline constexpr ms kPrompt = 10s;

// A fresh directory under the system temp dir, removed afterwards.
struct temp_dir {
  fs::path path;
  temp_dir();
  ~temp_dir();
  std::string lock() const { return (path / "gpu.lock").string(); }
  std::string str() const { return path.string(); }
};

// Environment changes for a child: a value, or nullopt to unset.
using env_changes = std::map<std::string, std::optional<std::string>>;

// A child process with a pipe on its stdin and its stdout; stderr goes to a
// file that can be read afterwards.
class child {
 public:
  child(const std::string& exe, const std::vector<std::string>& args, const env_changes& env = {});
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child();

  int pid() const { return pid_; }
  // The next line of stdout (without the newline), or nullopt on EOF or
  // when none arrives within the timeout.
  std::optional<std::string> read_line(ms timeout = kPrompt);
  void write_line(const std::string& line);
  void close_stdin();
  void kill(int sig);
  // Waits for the exit: the exit code, 128+N for signal N; nullopt on timeout.
  std::optional<int> wait(ms timeout = kPrompt);
  bool exited() const { return status_.has_value(); }
  std::string err_text() const;

 private:
  int pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buf_;
  std::optional<int> status_;
  fs::path err_path_;
};

// This test binary (for re-running itself in a child mode).
std::string self_exe();
// The offload-lock command built with the tests.
std::string cli_exe();

struct cli_result {
  int code = -1;
  std::string out, err;
};
// `--lock <d's lock>` followed by args: an offload-lock command line.
std::vector<std::string> with_lock(const temp_dir& d, std::vector<std::string> args);
// Runs offload-lock with args and waits for it (bounded).
cli_result run_cli(const std::vector<std::string>& args, const env_changes& env = {}, ms timeout = 30s);

// Polls `pred` until true or the timeout passes (a bounded wait for a state
// another process produces). Returns the last value.
bool eventually(const std::function<bool()>& pred, ms timeout = kPrompt);
// Sends SIGSTOP to pid and waits until it is stopped for real (state T in
// /proc/<pid>/stat): the signal is delivered asynchronously, and one that
// lands after a release has handed the lock over stops a holder, not a
// waiter. False if it did not stop within the timeout.
bool stop_process(int pid, ms timeout = kPrompt);
// The state letter of /proc/<pid>/stat ('T' stopped, 'Z' zombie), or '\0'
// when it cannot be read.
char process_state(int pid);

void write_file(const fs::path& p, const std::string& bytes);
std::string read_file(const fs::path& p);
void set_mtime(const fs::path& p, std::int64_t epoch_ms);
std::int64_t now_ms();
// The pid of a process that has exited and been reaped.
int dead_pid();
// Makes a v1 lock directory by hand: mkdir, then meta.json with `meta`.
void make_lock(const std::string& lock, const std::optional<std::string>& meta);
bool running_as_root();
// The queue registry beside d's lock, as core lays it out: the sticky
// top directory `.gpu.lock.queue`, and in it the directory of `uid` (this
// user when -1), `u<uid>`, made if missing and owned by that uid (chown
// needs root). Entries planted there are `<pid>-<12 hex>.json`.
fs::path queue_top(const temp_dir& d);
fs::path queue_dir(const temp_dir& d, long uid = -1);

// Why user `uid` (with only its own group, as the tests' setpriv gives it)
// cannot reach this process's temp directory, under which every temp_dir
// is made, or nullopt when it can. A TMPDIR inside a private directory (a
// home directory, say) keeps every other user out, however the test sets
// the modes of its own directory. Tried for real: access(2) as that user.
std::optional<std::string> temp_closed_to(int uid);

}  // namespace olt

// The guard of a test case that cannot run on this machine: it says why and
// returns before anything is checked. CTest reports a test whose output has
// "not run here: " as skipped (tests/CMakeLists.txt), so the guard belongs
// at the top of a test case, never inside a section or after a check.
#define OLT_NOT_RUN(why)               \
  do {                                 \
    WARN("not run here: " << why);     \
    return;                            \
  } while (false)

namespace olt {

}  // namespace olt

#endif  // OFFLOAD_LOCK_TESTS_SUPPORT_HPP
