// The seam's view of processes (os/process.hpp) on Linux: kill(pid, 0),
// /proc/<pid>/stat, the boot id, the host name, the environment, fork handlers.
#include "os/process.hpp"

#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>
#include <fcntl.h>
#include "os/files.hpp"

#include "os/clock.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

namespace {

// A small file of /proc (or /proc/sys), through the syscall table; empty when
// it cannot be read.
//
// Three calls where a general read takes five: a /proc file is produced whole
// by its first read when the buffer holds it, and ends with a newline, so a
// short read ending in one is the end (no fstat, no read that returns 0).
// This is on every liveness probe of a waiter's look.
std::string read_small_file(const std::string& path) {
  int fd;
  do fd = calls.openat(AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return std::string();
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = calls.read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.clear();
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
    if (n == 0 || out.size() > 4096 ||
        (static_cast<std::size_t>(n) < sizeof buf && !out.empty() && out.back() == '\n'))
      break;
  }
  (void)calls.close(fd);
  return out.size() > 4096 ? std::string() : out;
}

// Parses /proc/<pid>/stat (/proc/self/stat for this process, which is right
// whatever pid namespace /proc belongs to): the state letter and the start
// time in ticks.
bool read_proc_stat(std::int64_t pid, char& state, std::uint64_t& ticks) {
  const bool self = pid == self_pid();
  if (!self && !proc_is_own()) return false;
  std::string s = read_small_file(self ? std::string("/proc/self/stat") : "/proc/" + std::to_string(pid) + "/stat");
  // The command name is in parentheses and may itself hold spaces and ')'.
  auto close = s.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(s.substr(close + 1));
  std::string field;
  // After ")": state is field 3; starttime is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(in >> field)) return false;
    if (i == 3) state = field.empty() ? '?' : field[0];
  }
  try {
    ticks = std::stoull(field);
  } catch (...) {
    return false;
  }
  return true;
}

// This process's pid, asked of the kernel once and forgotten in every child
// of fork(): an acquisition asks for it a dozen times, and getpid() is a
// system call.
std::atomic<std::int64_t> cached_pid{0};

// Counted up in every child of fork(): what is cached of this process's
// own identity is keyed by the pid and this count, so a child reads its own
// even when its pid is its parent's (pid 1 of a new pid namespace, forked
// from pid 1 of another).
std::atomic<std::int64_t> forks_seen{0};

// One child handler does both, registered before any other of the
// library's (a constructor of the highest priority runs before every static
// initializer), so no other child handler sees the parent's pid or count.
__attribute__((constructor(101))) void renew_identity_in_children() {
  ::pthread_atfork(nullptr, nullptr, [] {
    cached_pid.store(0, std::memory_order_relaxed);
    forks_seen.fetch_add(1, std::memory_order_relaxed);
  });
}

// The key of this process's own cached values: never 0.
std::int64_t self_key() {
  constexpr int pid_bits = 23;  // max_pid is 2^22
  return (forks_seen.load(std::memory_order_relaxed) << pid_bits) | self_pid();
}

// start_of()'s cache of this process's own start (self_key()).
std::mutex self_mu;
std::int64_t self_cached_key = 0;
std::uint64_t self_cached_ticks = 0;

// fork() copies only the calling thread: the cache's mutex is taken around
// it so it is never copied locked.
struct fork_guard {
  fork_guard() noexcept { on_fork([] { self_mu.lock(); }, [] { self_mu.unlock(); }, [] { self_mu.unlock(); }); }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif

}  // namespace

liveness probe(std::int64_t pid) {
  if (!valid_pid(pid)) return liveness::invalid;
  if (calls.kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM)
    return errno == ESRCH ? liveness::dead : liveness::unknown;
  char state = '?';
  std::uint64_t ticks = 0;
  // kill(pid, 0) succeeds on a zombie: only its state tells it has exited.
  if (read_proc_stat(pid, state, ticks) && (state == 'Z' || state == 'X')) return liveness::zombie;
  return liveness::alive;
}

liveness signal0(std::int64_t pid) {
  if (!valid_pid(pid)) return liveness::invalid;
  if (calls.kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) return liveness::alive;
  return errno == ESRCH ? liveness::dead : liveness::unknown;
}

std::optional<bool> stopped(std::int64_t pid) {
  if (!valid_pid(pid)) return std::nullopt;
  char state = '?';
  std::uint64_t ticks = 0;
  if (!read_proc_stat(pid, state, ticks)) return std::nullopt;
  return state == 'T' || state == 't';
}

std::optional<proc_start> start_of(std::int64_t pid) {
  if (!valid_pid(pid)) return std::nullopt;
  const bool self = pid == self_pid();
  std::uint64_t ticks = 0;
  bool cached = false;
  if (self) {
    std::lock_guard<std::mutex> g(self_mu);
    cached = self_cached_key == self_key();
    ticks = self_cached_ticks;
  }
  if (!cached) {
    char state = '?';
    if (!read_proc_stat(pid, state, ticks)) return std::nullopt;
    if (self) {
      std::lock_guard<std::mutex> g(self_mu);
      self_cached_key = self_key();
      self_cached_ticks = ticks;
    }
  }
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  struct timespec boot {};
  if (calls.clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return std::nullopt;
  // The start in boot time, turned into wall time by today's offset between
  // the two clocks (so a wall-clock step since boot does not skew it).
  std::int64_t started_boot_ms = static_cast<std::int64_t>(ticks * 1000 / static_cast<std::uint64_t>(hz));
  proc_start out;
  out.ticks = ticks;
  out.epoch_ms = now_ms() - (ts_ms(boot) - started_boot_ms);
  return out;
}

namespace {

// The inode of one of this process's namespaces (/proc/self/ns/<kind>).
std::optional<std::uint64_t> namespace_inode(const char* path) {
  struct stat st {};
  if (calls.fstatat(AT_FDCWD, path, &st, 0) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_ino);
}

// One of this process's namespace inodes, read once per process (self_key():
// a child forked into a new pid or time namespace reads its own), and a read
// that failed is tried again next time. No lock, so a fork while another
// thread reads leaves nothing held.
class own_namespace {
 public:
  explicit own_namespace(const char* path) : path_(path) {}
  std::optional<std::uint64_t> get() {
    const std::int64_t me = self_key();
    if (for_key_.load(std::memory_order_acquire) == me) return inode_.load(std::memory_order_relaxed);
    const auto ino = namespace_inode(path_);
    if (!ino || *ino == 0) return std::nullopt;
    inode_.store(*ino, std::memory_order_relaxed);
    for_key_.store(me, std::memory_order_release);
    return ino;
  }

 private:
  const char* path_;
  std::atomic<std::int64_t> for_key_{0};
  std::atomic<std::uint64_t> inode_{0};
};

}  // namespace

bool has_ended(std::int64_t pid) {
  switch (probe(pid)) {
    case liveness::dead: return true;
    case liveness::zombie: return thread_count(pid) == 1;
    default: return false;
  }
}

std::optional<int> thread_count(std::int64_t pid) {
  if (!valid_pid(pid) || !proc_is_own()) return std::nullopt;
  const std::string s = read_small_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = s.find("\nThreads:");
  if (at == std::string::npos) return std::nullopt;
  const char* p = s.c_str() + at + 9;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(p, &end, 10);
  if (end == p || errno != 0 || n <= 0 || n > INT_MAX || (*end != '\n' && *end != '\0')) return std::nullopt;
  return static_cast<int>(n);
}

std::optional<std::uint64_t> pid_namespace() {
  static own_namespace ns("/proc/self/ns/pid");
  return ns.get();
}

std::optional<std::uint64_t> time_namespace() {
  static own_namespace ns("/proc/self/ns/time");
  return ns.get();
}

bool proc_is_own() {
  // Per process (self_key()), so that a child forked into a new pid
  // namespace asks again.
  static std::atomic<std::int64_t> answered_for{0};
  static std::atomic<bool> own{true};
  const std::int64_t key = self_key();
  if (answered_for.load() != key) {
    char buf[32] = {};
    const ssize_t n = calls.readlinkat(AT_FDCWD, "/proc/self", buf, sizeof buf - 1);
    own = n > 0 && std::strtoll(buf, nullptr, 10) == self_pid();
    answered_for = key;
  }
  return own;
}

std::int64_t fork_generation() { return forks_seen.load(std::memory_order_relaxed); }

std::int64_t self_pid() {
  std::int64_t pid = cached_pid.load(std::memory_order_relaxed);
  if (pid == 0) {
    pid = ::getpid();
    cached_pid.store(pid, std::memory_order_relaxed);
  }
  return pid;
}
std::uint32_t effective_uid() { return ::geteuid(); }

std::optional<std::string> effective_user_name() {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &found) != 0 || !found || !pw.pw_name)
    return std::nullopt;
  return std::string(pw.pw_name);
}

std::vector<std::string> group_names() {
  std::vector<gid_t> gids(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))));
  const int n = gids.empty() ? 0 : ::getgroups(static_cast<int>(gids.size()), gids.data());
  gids.resize(static_cast<std::size_t>(std::max(0, n)));
  gids.push_back(::getegid());
  std::vector<std::string> out;
  std::vector<char> buf(16384);
  for (gid_t g : gids) {
    struct group gr {};
    struct group* found = nullptr;
    if (::getgrgid_r(g, &gr, buf.data(), buf.size(), &found) == 0 && found && gr.gr_name &&
        std::find(out.begin(), out.end(), gr.gr_name) == out.end())
      out.emplace_back(gr.gr_name);
  }
  return out;
}

std::optional<std::uint32_t> process_uid(std::int64_t pid) {
  if (pid <= 0 || !proc_is_own()) return std::nullopt;
  struct stat st {};
  if (calls.fstatat(AT_FDCWD, ("/proc/" + std::to_string(pid)).c_str(), &st, 0) != 0) return std::nullopt;
  return static_cast<std::uint32_t>(st.st_uid);
}
std::int64_t parent_pid() { return ::getppid(); }
void give_way() { (void)calls.sched_yield(); }

const std::string& boot_id() {
  static const std::string id = [] {
    std::string s = read_small_file("/proc/sys/kernel/random/boot_id");
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }();
  return id;
}

const std::string& host_name() {
  static const std::string name = [] {
    char buf[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0) return std::string();
    return std::string(buf);
  }();
  return name;
}

std::string program_name() { return program_invocation_short_name ? program_invocation_short_name : ""; }

std::optional<std::string> get_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

void on_fork(void (*prepare)(), void (*parent)(), void (*child)()) { ::pthread_atfork(prepare, parent, child); }

}  // namespace offload_lock::detail::sys
