// Plumbing for the offload-lock benchmark: clocks, statistics, child
// processes with line-based pipes and bounded waits, per-process scheduler
// counters from /proc, and a description of the machine.
#ifndef OFFLOAD_LOCK_BENCH_UTIL_HPP
#define OFFLOAD_LOCK_BENCH_UTIL_HPP

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

// A failed step of a measurement; the section reports it and the run goes on.
struct failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// CLOCK_MONOTONIC in nanoseconds: the clock every process of the benchmark
// stamps with (Node's process.hrtime reads the same clock on Linux).
std::int64_t mono_ns();
void sleep_ns(std::int64_t ns);

// Writes a whole line to a descriptor, unbuffered (safe from any thread).
void write_line_fd(int fd, const std::string& line);

// Reads lines from a descriptor with a deadline.
class line_reader {
 public:
  explicit line_reader(int fd = -1) : fd_(fd) {}
  void reset(int fd) {
    fd_ = fd;
    buf_.clear();
    eof_ = false;
  }
  // The next line without its newline; nullopt on EOF or timeout (timeout_ms < 0: none).
  std::optional<std::string> next(int timeout_ms);
  bool eof() const { return eof_; }

 private:
  int fd_;
  std::string buf_;
  bool eof_ = false;
};

struct summary {
  std::size_t n = 0;
  double min = 0, max = 0, mean = 0, median = 0, p50 = 0, p99 = 0;
};
// Nearest-rank percentiles of the values.
summary summarize(std::vector<double> v);

// A child process. Each standard stream is a pipe to us or /dev/null. The
// destructor kills (SIGKILL) and reaps a child that is still running.
class child {
 public:
  struct streams {
    bool in = false, out = false, err = false;
  };
  child() = default;
  child(const std::vector<std::string>& argv, streams s);
  child(child&& o) noexcept;
  child& operator=(child&& o) noexcept;
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !reaped_; }
  std::optional<std::string> read_line(int timeout_ms) { return out_r_.next(timeout_ms); }
  std::optional<std::string> read_err_line(int timeout_ms) { return err_r_.next(timeout_ms); }
  // Reads stdout lines until one starts with `prefix`; throws on EOF/timeout.
  std::string expect(const std::string& prefix, int timeout_ms, const std::string& what);
  void write_line(const std::string& line);
  void close_in();
  // Exit status (128+N for signal N), or nullopt when still running after timeout_ms.
  std::optional<int> wait(int timeout_ms);
  // Sends SIGKILL (if still running) and reaps.
  void kill_and_reap();
  // Whatever stderr holds right now (non-blocking), for error messages.
  std::string drain_err();

 private:
  void close_all();
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  line_reader out_r_, err_r_;
  bool reaped_ = false;
  int status_ = 0;
};

// Runs argv with all streams on /dev/null and returns the wall time from
// just before the spawn to just after the reap, in nanoseconds; throws when
// it exits non-zero or takes longer than timeout_ms. With cpu_ns, also the
// child's user and system CPU time (-1 where it could not be had): what a
// run costs whatever else the machine is doing.
std::int64_t run_timed(const std::vector<std::string>& argv, int timeout_ms, std::int64_t* cpu_ns = nullptr);

// Runs argv and returns its first stdout line ("" when it cannot run).
std::string first_line_of(const std::vector<std::string>& argv);

// Scheduler counters of a process, summed over its threads.
struct sched_counters {
  bool ok = false;
  int threads = 0;
  std::int64_t voluntary = 0, involuntary = 0;
  std::int64_t cpu_ns = 0;  // time on CPU (schedstat, else utime+stime)
};
sched_counters read_sched(pid_t pid);

struct machine_info {
  int nproc = 0;
  std::string cpu, kernel, fs_type, fs_mount, loadavg;
};
machine_info describe_machine(const std::string& dir);
std::string read_loadavg();

// Searches PATH for an executable; "" when not found.
std::string which(const std::string& name);

// Removes a directory tree (best effort).
void remove_tree(const std::string& path);

std::string fmt(double v, int decimals);

}  // namespace bench

#endif  // OFFLOAD_LOCK_BENCH_UTIL_HPP
