// System calls for offload-lock (Linux). See sys.hpp for the rules each
// wrapper keeps.
#include "posix/sys.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <sstream>

namespace offload_lock::detail::sys {

namespace {

template <class F>
auto retry(F f) {
  for (;;) {
    auto r = f();
    if (r != -1 || errno != EINTR) return r;
  }
}

std::int64_t ts_ms(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

stat_info from_stat(const struct stat& s) {
  stat_info i;
  i.id = {static_cast<std::uint64_t>(s.st_dev), static_cast<std::uint64_t>(s.st_ino)};
  i.is_dir = S_ISDIR(s.st_mode);
  i.is_regular = S_ISREG(s.st_mode);
  i.is_symlink = S_ISLNK(s.st_mode);
  i.uid = s.st_uid;
  i.mode = s.st_mode & 07777;
  i.mtime_ms = ts_ms(s.st_mtim);
  i.size = s.st_size;
  return i;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const int cwd = AT_FDCWD;
std::error_code errno_code(std::errc e) { return {static_cast<int>(e), std::system_category()}; }

error sys_error(int err, const std::string& operation, const std::string& path) {
  return error(std::error_code(err, std::system_category()), operation + " " + path);
}

fd& fd::operator=(fd&& o) noexcept {
  if (this != &o) {
    reset();
    v_ = o.release();
  }
  return *this;
}
fd::~fd() { reset(); }
void fd::reset() noexcept {
  // close() is not retried on EINTR: on Linux the descriptor is gone either way.
  if (v_ >= 0) ::close(v_);
  v_ = -1;
}

void split_path(const std::string& path, std::string& parent, std::string& name) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  if (p.empty() || p == "/") {
    parent = p.empty() ? "." : "/";
    name.clear();
  } else if (slash == std::string::npos) {
    parent = ".";
    name = p;
  } else {
    parent = slash == 0 ? "/" : p.substr(0, slash);
    name = p.substr(slash + 1);
  }
}

result<fd> open_dir(int dirfd, const std::string& name, bool nofollow, const std::string& shown) {
  int flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0);
  int f = retry([&] { return ::openat(dirfd, name.c_str(), flags); });
  if (f < 0) return sys_error(errno, "open", shown);
  return fd(f);
}

result<stat_info> stat_at(int dirfd, const std::string& name, const std::string& shown) {
  struct stat s {};
  if (retry([&] { return ::fstatat(dirfd, name.c_str(), &s, AT_SYMLINK_NOFOLLOW); }) != 0)
    return sys_error(errno, "stat", shown);
  return from_stat(s);
}

result<stat_info> stat_fd(int f, const std::string& shown) {
  struct stat s {};
  if (retry([&] { return ::fstat(f, &s); }) != 0) return sys_error(errno, "stat", shown);
  return from_stat(s);
}

result<file_bytes> read_file_at(int dirfd, const std::string& name, std::size_t cap,
                                const std::string& shown) {
  // O_NONBLOCK: a FIFO planted as meta.json must not hang the reader.
  int raw = retry([&] {
    return ::openat(dirfd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  });
  if (raw < 0) return sys_error(errno, "open", shown);
  fd f(raw);
  auto st = stat_fd(f.get(), shown);
  if (!st) return st.err();
  if (!st->is_regular) return sys_error(EINVAL, "read (not a regular file)", shown);
  file_bytes out;
  out.st = *st;
  std::size_t want = cap + 1;
  out.bytes.resize(std::min<std::size_t>(want, static_cast<std::size_t>(st->size) + 4096));
  std::size_t got = 0;
  for (;;) {
    if (got == out.bytes.size()) {
      if (out.bytes.size() >= want) break;
      out.bytes.resize(std::min(want, out.bytes.size() * 2));
    }
    ssize_t n = retry([&] { return ::read(f.get(), &out.bytes[got], out.bytes.size() - got); });
    if (n < 0) return sys_error(errno, "read", shown);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.truncated = got > cap;
  out.bytes.resize(std::min(got, cap));
  return out;
}

error mkdir_at(int dirfd, const std::string& name, unsigned mode, const std::string& shown) {
  if (retry([&] { return ::mkdirat(dirfd, name.c_str(), mode); }) != 0)
    return sys_error(errno, "mkdir", shown);
  return {};
}

error chmod_fd(int f, unsigned mode, const std::string& shown) {
  if (retry([&] { return ::fchmod(f, static_cast<mode_t>(mode)); }) != 0) return sys_error(errno, "chmod", shown);
  return {};
}

error write_new_file_at(int dirfd, const std::string& name, const std::string& bytes,
                        const std::string& shown) {
  int raw = retry([&] {
    return ::openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
  });
  if (raw < 0) return sys_error(errno, "create", shown);
  fd f(raw);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = retry([&] { return ::write(f.get(), bytes.data() + done, bytes.size() - done); });
    if (n < 0) return sys_error(errno, "write", shown);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

error rename_noreplace(int dirfd, const std::string& from, const std::string& to,
                       const std::string& shown) {
#ifndef RENAME_NOREPLACE
  constexpr unsigned RENAME_NOREPLACE = 1;
#endif
  if (env_flag("OFFLOAD_LOCK_NO_RENAMEAT2"))
    return sys_error(EINVAL, "rename (RENAME_NOREPLACE disabled)", shown);
  long r = retry([&] {
    return ::syscall(SYS_renameat2, dirfd, from.c_str(), dirfd, to.c_str(), RENAME_NOREPLACE);
  });
  if (r != 0) return sys_error(errno, "rename", shown);
  return {};
}

error rename_at(int dirfd, const std::string& from, const std::string& to, const std::string& shown) {
  if (retry([&] { return ::renameat(dirfd, from.c_str(), dirfd, to.c_str()); }) != 0)
    return sys_error(errno, "rename", shown);
  return {};
}

namespace {
bool lock_file_name(const std::string& n) { return n == "meta.json" || n.rfind(".meta.json.", 0) == 0; }

// The names in a lock directory, or ENOTEMPTY naming the first that is not
// part of a lock.
result<std::vector<std::string>> lock_contents(int dir, const std::string& shown) {
  auto names = list_dir(dir, shown);
  if (!names) return names.err();
  for (const auto& n : *names) {
    auto st = stat_at(dir, n, shown + "/" + n);
    if (!st && st.err().code().value() == ENOENT) continue;
    if (!st || !lock_file_name(n) || !st->is_regular)
      return error(std::error_code(ENOTEMPTY, std::system_category()),
                   "refusing to remove " + shown + ": it holds '" + n + "', which is not part of a lock");
  }
  return names;
}
}  // namespace

error check_lock_contents(int dir, const std::string& shown) {
  auto names = lock_contents(dir, shown);
  return names ? error{} : names.err();
}

error remove_lock_dir_at(int dirfd, const std::string& name, const std::string& shown, const char* crash_op) {
  auto d = open_dir(dirfd, name, true, shown);
  if (!d) return d.err().code().value() == ENOENT ? error{} : d.err();
  auto names = lock_contents(d->get(), shown);
  if (!names) return names.err();
  for (const auto& n : *names)
    if (auto e = unlink_at(d->get(), n, false, shown + "/" + n)) return e;
  if (crash_op) crash_point(crash_op, "meta-removed");
  return unlink_at(dirfd, name, true, shown);
}

error unlink_at(int dirfd, const std::string& name, bool dir, const std::string& shown) {
  if (retry([&] { return ::unlinkat(dirfd, name.c_str(), dir ? AT_REMOVEDIR : 0); }) != 0) {
    if (errno == ENOENT) return {};
    return sys_error(errno, dir ? "rmdir" : "unlink", shown);
  }
  return {};
}

error touch_at(int dirfd, const std::string& name, const std::string& shown) {
  if (retry([&] { return ::utimensat(dirfd, name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW); }) != 0)
    return sys_error(errno, "touch", shown);
  return {};
}

result<std::vector<std::string>> list_dir(int dirfd, const std::string& shown) {
  int dup = retry([&] { return ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); });
  if (dup < 0) return sys_error(errno, "open", shown);
  DIR* d = ::fdopendir(dup);
  if (!d) {
    int e = errno;
    ::close(dup);
    return sys_error(e, "opendir", shown);
  }
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* ent = ::readdir(d)) {
    if (std::strcmp(ent->d_name, ".") != 0 && std::strcmp(ent->d_name, "..") != 0)
      names.emplace_back(ent->d_name);
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) return sys_error(e, "readdir", shown);
  return names;
}

error ofd_lock(int f, bool write) {
  struct flock l {};
  l.l_type = write ? F_WRLCK : F_RDLCK;
  l.l_whence = SEEK_SET;
  if (retry([&] { return ::fcntl(f, F_OFD_SETLK, &l); }) != 0)
    return error(std::error_code(errno, std::system_category()), "fcntl(F_OFD_SETLK)");
  return {};
}

error try_flock_exclusive(int f) {
  if (retry([&] { return ::flock(f, LOCK_EX | LOCK_NB); }) != 0)
    return error(std::error_code(errno, std::system_category()), "flock");
  return {};
}

bool ofd_locked_elsewhere(int f) {
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (retry([&] { return ::fcntl(f, F_OFD_GETLK, &l); }) != 0) return false;
  return l.l_type != F_UNLCK;
}

result<std::pair<fd, fd>> make_pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_error(errno, "pipe", "");
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  return std::make_pair(fd(p[0]), fd(p[1]));
}

void notify(int write_end) {
  char c = 1;
  ssize_t r = ::write(write_end, &c, 1);
  (void)r;
}

void drain(int read_end) {
  char buf[256];
  while (::read(read_end, buf, sizeof buf) > 0) {
  }
}

void wait_readable(std::initializer_list<int> fds, std::int64_t timeout_ms) {
  std::vector<struct pollfd> p;
  for (int f : fds)
    if (f >= 0) p.push_back({f, POLLIN, 0});
  std::int64_t deadline = timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
  for (;;) {
    int t = -1;
    if (deadline >= 0) {
      std::int64_t left = std::max<std::int64_t>(0, deadline - monotonic_ms());
      t = left > INT_MAX ? INT_MAX : static_cast<int>(left);
    }
    int r = ::poll(p.data(), static_cast<nfds_t>(p.size()), t);
    if (r < 0 && errno == EINTR) continue;
    return;
  }
}

namespace {
// Test-only: OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE names a file holding a number
// of milliseconds added to every wall-clock reading, re-read each time, so
// a test can step this process's wall clock while it waits. Inert when the
// variable is unset (its value is read once per process).
std::int64_t test_clock_skew_ms() {
  static const std::string file = get_env("OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE").value_or("");
  if (file.empty()) return 0;
  try {
    return std::stoll(read_small_file(file));
  } catch (...) {
    return 0;
  }
}
}  // namespace

std::int64_t now_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ts_ms(t) + test_clock_skew_ms();
}

std::int64_t monotonic_ms() {
  struct timespec t {};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return ts_ms(t);
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(&raw[got], bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // No entropy source at all: fall back to something unique enough for
      // staging names (pid, time); tokens then stay unique per acquisition.
      (void)std::snprintf(raw.data(), bytes, "%lx%lx", static_cast<long>(::getpid()),
                          static_cast<long>(monotonic_ms()));
      break;
    }
    got += static_cast<std::size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : raw) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

namespace {
// Parses /proc/<pid>/stat: the state letter and the start time in ticks.
bool read_proc_stat(std::int64_t pid, char& state, std::uint64_t& ticks) {
  std::string s = read_small_file("/proc/" + std::to_string(pid) + "/stat");
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
}  // namespace

liveness probe(std::int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return liveness::invalid;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return liveness::dead;
  char state = '?';
  std::uint64_t ticks = 0;
  // kill(pid, 0) succeeds on a zombie: only its state tells it has exited.
  if (read_proc_stat(pid, state, ticks) && (state == 'Z' || state == 'X')) return liveness::zombie;
  return liveness::alive;
}

namespace {
std::mutex self_mu;  // start_of()'s cache of this process's own start
}  // namespace

std::optional<proc_start> start_of(std::int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return std::nullopt;
  // This process's own start never changes: its tick count is read once per
  // process (the cache is keyed by pid, so a forked child reads its own).
  static std::int64_t self_cached_pid = 0;
  static std::uint64_t self_cached_ticks = 0;
  const bool self = pid == ::getpid();
  std::uint64_t ticks = 0;
  bool cached = false;
  if (self) {
    std::lock_guard<std::mutex> g(self_mu);
    cached = self_cached_pid == pid;
    ticks = self_cached_ticks;
  }
  if (!cached) {
    char state = '?';
    if (!read_proc_stat(pid, state, ticks)) return std::nullopt;
    if (self) {
      std::lock_guard<std::mutex> g(self_mu);
      self_cached_pid = pid;
      self_cached_ticks = ticks;
    }
  }
  long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0) hz = 100;
  struct timespec boot {};
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  // The start in boot time, turned into wall time by today's offset between
  // the two clocks (so a wall-clock step since boot does not skew it).
  std::int64_t started_boot_ms = static_cast<std::int64_t>(ticks * 1000 / static_cast<std::uint64_t>(hz));
  proc_start out;
  out.ticks = ticks;
  out.epoch_ms = now_ms() - (ts_ms(boot) - started_boot_ms);
  return out;
}

std::int64_t self_pid() { return ::getpid(); }
std::uint32_t effective_uid() { return ::geteuid(); }
std::int64_t parent_pid() { return ::getppid(); }

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

std::string program_name() {
  return program_invocation_short_name ? program_invocation_short_name : "";
}

std::optional<std::string> get_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

// ---- test-only crash points ----

namespace {
struct crash_spec {
  std::string step;  // empty: crash points are off (normal use)
  long nth = 1;
  mutable std::atomic<long> seen{0};
  crash_spec() {
    const char* v = std::getenv("OFFLOAD_LOCK_TEST_CRASH_AT");
    if (!v || !*v) return;
    step = v;
    if (auto at = step.find('@'); at != std::string::npos) {
      nth = std::max(1L, std::strtol(step.c_str() + at + 1, nullptr, 10));
      step.resize(at);
    }
  }
};
const crash_spec& crash_config() {
  static const crash_spec spec;
  return spec;
}
[[noreturn]] void crash_now() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}
}  // namespace

void crash_point(const char* step) {
  const crash_spec& c = crash_config();
  if (c.step.empty() || c.step != step) return;
  if (c.seen.fetch_add(1) + 1 == c.nth) crash_now();
}

void crash_point(const char* op, const char* step) {
  const crash_spec& c = crash_config();
  if (c.step.empty()) return;
  crash_point((std::string(op) + "." + step).c_str());
}

// ---- watcher ----

namespace {
std::mutex g_inotify_mu;
std::vector<int> g_inotify_pool;

// Around fork, this file's mutexes are taken so none is copied locked into
// the child (whose other threads are gone); the child drops the pooled
// inotify descriptors, which it would otherwise share with the parent.
struct fork_guard {
  fork_guard() noexcept { ::pthread_atfork(&prepare, &parent, &child); }
  static void prepare() {
    self_mu.lock();
    g_inotify_mu.lock();
  }
  static void parent() {
    g_inotify_mu.unlock();
    self_mu.unlock();
  }
  static void child() {
    for (int f : g_inotify_pool) ::close(f);
    g_inotify_pool.clear();
    parent();
  }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif
}  // namespace

watcher::watcher() {
  if (!env_flag("OFFLOAD_LOCK_NO_INOTIFY")) {
    std::lock_guard<std::mutex> g(g_inotify_mu);
    if (!g_inotify_pool.empty()) {
      ino_ = g_inotify_pool.back();
      g_inotify_pool.pop_back();
    } else {
      ino_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    }
  }
  pidfd_ok_ = !env_flag("OFFLOAD_LOCK_NO_PIDFD");
}

watcher::~watcher() {
  if (ino_ < 0) return;
  unwatch_dir();  // removes the watches and drains their events
  std::lock_guard<std::mutex> g(g_inotify_mu);
  g_inotify_pool.push_back(ino_);
}

bool watcher::watch_dir(const std::string& path, bool contents) {
  unwatch_dir();
  if (ino_ < 0) return false;
  std::uint32_t mask = IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
  // While a holder's meta.json is incomplete, its arrival is news too.
  if (contents) mask |= IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE;
  wd_ = ::inotify_add_watch(ino_, path.c_str(), mask);
  std::string parent;
  split_path(path, parent, name_);
  parent_wd_ = ::inotify_add_watch(ino_, parent.c_str(), IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR);
  return wd_ >= 0 && parent_wd_ >= 0;
}

void watcher::unwatch_dir() {
  if (wd_ >= 0) ::inotify_rm_watch(ino_, wd_);
  if (parent_wd_ >= 0) ::inotify_rm_watch(ino_, parent_wd_);
  wd_ = parent_wd_ = -1;
  if (ino_ < 0) return;
  // Drop events already queued for the old watches.
  char buf[4096];
  while (::read(ino_, buf, sizeof buf) > 0) {
  }
}

// Reads the queued events; true when one concerns the watched lock.
bool watcher::relevant_events() {
  alignas(struct inotify_event) char buf[8192];
  bool relevant = false;
  for (;;) {
    ssize_t n = ::read(ino_, buf, sizeof buf);
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(p);
      // NOLINTNEXTLINE(bugprone-branch-clone): an event on the lock itself, then one naming it in its parent
      if (ev->wd == wd_ || (ev->mask & IN_Q_OVERFLOW)) relevant = true;
      else if (ev->wd == parent_wd_ && ev->len > 0 && name_ == ev->name) relevant = true;
      p += sizeof(struct inotify_event) + ev->len;
    }
  }
  return relevant;
}

bool watcher::watch_pid(std::int64_t pid) {
  unwatch_pid();
  if (!pidfd_ok_ || pid <= 0 || pid > INT_MAX) return false;
#ifdef SYS_pidfd_open
  long f = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0);
  if (f < 0) {
    if (errno == ENOSYS) pidfd_ok_ = false;
    return false;
  }
  pidfd_ = fd(static_cast<int>(f));
  return true;
#else
  pidfd_ok_ = false;
  return false;
#endif
}

void watcher::unwatch_pid() { pidfd_.reset(); }

namespace {

// One poll() toward a deadline (monotonic ms, -1 for none). Returns the
// number of ready descriptors; 0 once the deadline has passed (the first
// call polls even then, so a timeout of 0 looks once) or on a poll error;
// -1 to poll again (EINTR, or woken before the deadline with nothing ready).
int poll_toward(std::vector<struct pollfd>& fds, std::int64_t deadline, bool first) {
  int t = -1;
  if (deadline >= 0) {
    const std::int64_t left = deadline - monotonic_ms();
    if (left <= 0 && !first) return 0;
    t = left <= 0 ? 0 : left > INT_MAX ? INT_MAX : static_cast<int>(left);
  }
  const int r = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), t);
  if (r > 0) return r;
  if (r < 0) return errno == EINTR ? -1 : 0;
  return deadline >= 0 && monotonic_ms() >= deadline ? 0 : -1;
}

}  // namespace

watcher::wake watcher::wait(std::int64_t timeout_ms, int extra_fd) {
  return wait(timeout_ms, extra_fd >= 0 ? std::vector<int>{extra_fd} : std::vector<int>{});
}

watcher::wake watcher::wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds) {
  std::vector<struct pollfd> fds;
  int ino_i = -1, pid_i = -1;
  if (ino_ >= 0 && (wd_ >= 0 || parent_wd_ >= 0)) {
    ino_i = static_cast<int>(fds.size());
    fds.push_back({ino_, POLLIN, 0});
  }
  if (pidfd_.valid()) {
    pid_i = static_cast<int>(fds.size());
    fds.push_back({pidfd_.get(), POLLIN, 0});
  }
  const std::size_t extra_from = fds.size();
  for (int f : extra_fds) fds.push_back({f, POLLIN, 0});
  const std::int64_t deadline = timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
  for (bool first = true;; first = false) {
    const int r = poll_toward(fds, deadline, first);
    if (r == 0) return wake::timeout;
    if (r < 0) continue;
    if (pid_i >= 0 && fds[static_cast<std::size_t>(pid_i)].revents) return wake::pid_exit;
    for (std::size_t i = extra_from; i < fds.size(); ++i)
      if (fds[i].revents) return wake::extra_fd;
    if (ino_i >= 0 && fds[static_cast<std::size_t>(ino_i)].revents && relevant_events()) return wake::dir_event;
  }
}

void watcher::add_poll_fds(std::vector<int>& out) const {
  if (ino_ >= 0 && (wd_ >= 0 || parent_wd_ >= 0)) out.push_back(ino_);
  if (pidfd_.valid()) out.push_back(pidfd_.get());
}

watcher::wake watcher::wait_any(const std::vector<watcher*>& ws, std::int64_t timeout_ms,
                                const std::vector<int>& extra_fds, std::size_t& which) {
  std::vector<struct pollfd> fds;
  std::vector<std::size_t> owner;  // index into ws for each entry of fds; ws.size() for extra fds
  for (std::size_t i = 0; i < ws.size(); ++i) {
    std::vector<int> mine;
    ws[i]->add_poll_fds(mine);
    for (int f : mine) {
      fds.push_back({f, POLLIN, 0});
      owner.push_back(i);
    }
  }
  for (int f : extra_fds) {
    fds.push_back({f, POLLIN, 0});
    owner.push_back(ws.size());
  }
  const std::int64_t deadline = timeout_ms < 0 ? -1 : monotonic_ms() + timeout_ms;
  for (bool first = true;; first = false) {
    const int r = poll_toward(fds, deadline, first);
    if (r == 0) return wake::timeout;
    if (r < 0) continue;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      if (owner[k] == ws.size()) return wake::extra_fd;
      // Let the watcher itself read and sort its events (a poll of 0 ms).
      wake w = ws[owner[k]]->wait(0);
      if (w != wake::timeout) {
        which = owner[k];
        return w;
      }
    }
  }
}

lock_watches::lock_watches() {
  if (!env_flag("OFFLOAD_LOCK_NO_INOTIFY")) ino_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
}

int lock_watches::add(const std::string& path) {
  if (ino_ < 0) return -1;
  entry e;
  std::string parent;
  split_path(path, parent, e.name);
  e.dir_wd = ::inotify_add_watch(ino_, path.c_str(), IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW);
  // Several locks may share a parent: inotify gives them one watch.
  e.parent_wd = ::inotify_add_watch(ino_, parent.c_str(), IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR);
  if (e.dir_wd < 0 || e.parent_wd < 0) {
    if (e.dir_wd >= 0) ::inotify_rm_watch(ino_, e.dir_wd);
    return -1;
  }
  int id = next_id_++;
  entries_.emplace_back(id, e);
  return id;
}

void lock_watches::remove(int id) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->first != id) continue;
    const entry e = it->second;
    entries_.erase(it);
    ::inotify_rm_watch(ino_, e.dir_wd);
    bool parent_shared = false;
    for (const auto& other : entries_) parent_shared |= other.second.parent_wd == e.parent_wd;
    if (!parent_shared) ::inotify_rm_watch(ino_, e.parent_wd);
    return;
  }
}

std::vector<int> lock_watches::take_events() {
  std::vector<int> ids;
  if (ino_ < 0) return ids;
  alignas(struct inotify_event) char buf[8192];
  for (;;) {
    ssize_t n = ::read(ino_, buf, sizeof buf);
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(p);
      for (const auto& [id, e] : entries_) {
        bool hit = (ev->mask & IN_Q_OVERFLOW) || ev->wd == e.dir_wd ||
                   (ev->wd == e.parent_wd && ev->len > 0 && e.name == ev->name);
        if (hit && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      p += sizeof(struct inotify_event) + ev->len;
    }
  }
  return ids;
}

}  // namespace offload_lock::detail::sys
