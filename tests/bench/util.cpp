#include "util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

extern char** environ;

namespace bench {

std::int64_t mono_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_ns(std::int64_t ns) {
  if (ns <= 0) return;
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR) {
  }
}

void write_line_fd(int fd, const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  std::size_t left = s.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    left -= static_cast<std::size_t>(w);
  }
}

std::optional<std::string> line_reader::next(int timeout_ms) {
  std::int64_t deadline = timeout_ms < 0 ? -1 : mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || fd_ < 0) return std::nullopt;
    int t = -1;
    if (deadline >= 0) {
      std::int64_t left = (deadline - mono_ns()) / 1'000'000;
      if (left < 0) return std::nullopt;
      t = static_cast<int>(std::min<std::int64_t>(left + 1, INT_MAX));
    }
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, t);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0 && deadline >= 0 && mono_ns() >= deadline) return std::nullopt;
      continue;
    }
    char chunk[4096];
    ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      eof_ = true;
    } else if (n == 0) {
      eof_ = true;
    } else {
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
}

summary summarize(std::vector<double> v) {
  summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    std::size_t k = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(k, 1, v.size()) - 1];
  };
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.p50 = rank(50);
  s.p99 = rank(99);
  return s;
}

// ---- child processes ----

namespace {

struct spawn_io {
  posix_spawn_file_actions_t fa;
  spawn_io() { posix_spawn_file_actions_init(&fa); }
  ~spawn_io() { posix_spawn_file_actions_destroy(&fa); }
};

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> v;
  for (const auto& a : argv) v.push_back(const_cast<char*>(a.c_str()));
  v.push_back(nullptr);
  return v;
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long f = ::syscall(SYS_pidfd_open, pid, 0);
  if (f >= 0) {
    ::fcntl(static_cast<int>(f), F_SETFD, FD_CLOEXEC);
    return static_cast<int>(f);
  }
#endif
  (void)pid;
  return -1;
}

int decode_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

// Waits for pid up to timeout_ms (<0: forever). True when reaped.
bool wait_pid(pid_t pid, int pidfd, int timeout_ms, int& status) {
  std::int64_t deadline = timeout_ms < 0 ? -1 : mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return true;  // not our child any more
    std::int64_t left = deadline < 0 ? 1000 : (deadline - mono_ns()) / 1'000'000;
    if (deadline >= 0 && left <= 0) return false;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left + 1, 1000)));
    } else {
      sleep_ns(200'000);
    }
  }
}

}  // namespace

child::child(const std::vector<std::string>& argv, streams s) {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  auto make = [](int p[2]) {
    if (::pipe2(p, O_CLOEXEC) != 0) throw failure(std::string("pipe: ") + std::strerror(errno));
  };
  if (s.in) make(in);
  if (s.out) make(out);
  if (s.err) make(err);
  spawn_io io;
  if (s.in) posix_spawn_file_actions_adddup2(&io.fa, in[0], 0);
  else posix_spawn_file_actions_addopen(&io.fa, 0, "/dev/null", O_RDONLY, 0);
  if (s.out) posix_spawn_file_actions_adddup2(&io.fa, out[1], 1);
  else posix_spawn_file_actions_addopen(&io.fa, 1, "/dev/null", O_WRONLY, 0);
  if (s.err) posix_spawn_file_actions_adddup2(&io.fa, err[1], 2);
  else posix_spawn_file_actions_addopen(&io.fa, 2, "/dev/null", O_WRONLY, 0);
  auto av = c_argv(argv);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, av[0], &io.fa, nullptr, av.data(), environ);
  for (int* p : {in, out, err}) {
    if (p == in && p[0] >= 0) ::close(p[0]);
    if (p != in && p[1] >= 0) ::close(p[1]);
  }
  if (rc != 0) {
    for (int fd : {in[1], out[0], err[0]})
      if (fd >= 0) ::close(fd);
    throw failure("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  pid_ = pid;
  pidfd_ = open_pidfd(pid);
  in_ = in[1];
  out_ = out[0];
  err_ = err[0];
  out_r_.reset(out_);
  err_r_.reset(err_);
}

child::child(child&& o) noexcept { *this = std::move(o); }

child& child::operator=(child&& o) noexcept {
  if (this == &o) return *this;
  if (running()) kill_and_reap();
  close_all();
  pid_ = o.pid_;
  pidfd_ = o.pidfd_;
  in_ = o.in_;
  out_ = o.out_;
  err_ = o.err_;
  out_r_ = std::move(o.out_r_);
  err_r_ = std::move(o.err_r_);
  reaped_ = o.reaped_;
  status_ = o.status_;
  o.pid_ = -1;
  o.pidfd_ = o.in_ = o.out_ = o.err_ = -1;
  o.out_r_.reset(-1);
  o.err_r_.reset(-1);
  return *this;
}

child::~child() {
  if (running()) kill_and_reap();
  close_all();
}

void child::close_all() {
  for (int* fd : {&pidfd_, &in_, &out_, &err_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

std::string child::expect(const std::string& prefix, int timeout_ms, const std::string& what) {
  std::int64_t deadline = mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    int left = static_cast<int>(std::max<std::int64_t>(0, (deadline - mono_ns()) / 1'000'000));
    auto line = read_line(left);
    if (!line) {
      std::string err = drain_err();
      throw failure(what + ": no '" + prefix + "' line from pid " + std::to_string(pid_) +
                    (out_r_.eof() ? " (its stdout closed)" : " within " + std::to_string(timeout_ms) + " ms") +
                    (err.empty() ? "" : "; stderr: " + err));
    }
    if (line->compare(0, prefix.size(), prefix) == 0) return *line;
    if (line->compare(0, 2, "e ") == 0) throw failure(what + ": " + line->substr(2));
  }
}

void child::write_line(const std::string& line) {
  if (in_ < 0) throw failure("no stdin pipe to pid " + std::to_string(pid_));
  write_line_fd(in_, line);
}

void child::close_in() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

std::optional<int> child::wait(int timeout_ms) {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return decode_status(status_);
  int st = 0;
  if (!wait_pid(pid_, pidfd_, timeout_ms, st)) return std::nullopt;
  reaped_ = true;
  status_ = st;
  return decode_status(st);
}

void child::kill_and_reap() {
  if (!running()) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  wait_pid(pid_, pidfd_, -1, st);
  reaped_ = true;
  status_ = st;
}

std::string child::drain_err() {
  if (err_ < 0) return {};
  std::string all;
  while (auto l = err_r_.next(0)) all += (all.empty() ? "" : " | ") + *l;
  return all;
}

std::int64_t run_timed(const std::vector<std::string>& argv, int timeout_ms, std::int64_t* cpu_ns) {
  spawn_io io;
  posix_spawn_file_actions_addopen(&io.fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&io.fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&io.fa, 2, "/dev/null", O_WRONLY, 0);
  auto av = c_argv(argv);
  pid_t pid = -1;
  std::int64_t t0 = mono_ns();
  int rc = ::posix_spawnp(&pid, av[0], &io.fa, nullptr, av.data(), environ);
  if (rc != 0) throw failure("cannot run " + argv[0] + ": " + std::strerror(rc));
  int st = 0;
  // A blocking waitpid (no polling delay in the measurement), bounded by an
  // alarm-free check: the pidfd poll only runs when the child is slow.
  int pidfd = open_pidfd(pid);
  bool done = false;
  if (cpu_ns) *cpu_ns = -1;
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int r;
    do r = ::poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
      struct rusage ru {};
      while (::wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
      }
      if (cpu_ns)
        *cpu_ns = (std::int64_t{ru.ru_utime.tv_sec} + ru.ru_stime.tv_sec) * 1'000'000'000 +
                  (std::int64_t{ru.ru_utime.tv_usec} + ru.ru_stime.tv_usec) * 1'000;
      done = true;
    }
    ::close(pidfd);
  } else {
    done = wait_pid(pid, -1, timeout_ms, st);
  }
  std::int64_t t1 = mono_ns();
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    throw failure(argv[0] + " took longer than " + std::to_string(timeout_ms) + " ms");
  }
  if (decode_status(st) != 0)
    throw failure(argv[0] + " exited with status " + std::to_string(decode_status(st)));
  return t1 - t0;
}

std::string first_line_of(const std::vector<std::string>& argv) {
  try {
    child c(argv, {false, true, false});
    auto l = c.read_line(10'000);
    c.wait(10'000);
    return l.value_or("");
  } catch (const failure&) {
    return "";
  }
}

// ---- /proc ----

namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::int64_t status_field(const std::string& text, const std::string& key) {
  auto p = text.find("\n" + key + ":");
  if (p == std::string::npos) return 0;
  return std::strtoll(text.c_str() + p + key.size() + 2, nullptr, 10);
}

}  // namespace

sched_counters read_sched(pid_t pid) {
  sched_counters c;
  std::string base = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(base.c_str());
  if (!d) return c;
  static const long tick = ::sysconf(_SC_CLK_TCK);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string t = base + "/" + e->d_name;
    auto st = slurp(t + "/status");
    if (!st) continue;
    ++c.threads;
    c.voluntary += status_field("\n" + *st, "voluntary_ctxt_switches");
    c.involuntary += status_field("\n" + *st, "nonvoluntary_ctxt_switches");
    auto ss = slurp(t + "/schedstat");
    if (ss && !ss->empty()) {
      c.cpu_ns += std::strtoll(ss->c_str(), nullptr, 10);
    } else if (auto stat = slurp(t + "/stat")) {
      // Fields 14 and 15 (utime, stime) follow the ")" that ends the name.
      auto rp = stat->rfind(')');
      std::istringstream in(stat->substr(rp + 2));
      std::string f;
      std::int64_t ut = 0, stt = 0;
      for (int i = 3; i <= 15 && in >> f; ++i) {
        if (i == 14) ut = std::strtoll(f.c_str(), nullptr, 10);
        if (i == 15) stt = std::strtoll(f.c_str(), nullptr, 10);
      }
      c.cpu_ns += (ut + stt) * (1'000'000'000 / tick);
    }
  }
  ::closedir(d);
  c.ok = c.threads > 0;
  return c;
}

std::string read_loadavg() {
  auto s = slurp("/proc/loadavg").value_or("");
  std::istringstream in(s);
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

namespace {
std::string unescape_mount(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      out += static_cast<char>(std::strtol(s.substr(i + 1, 3).c_str(), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}
}  // namespace

machine_info describe_machine(const std::string& dir) {
  machine_info m;
  m.nproc = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  utsname u;
  if (::uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  if (auto ci = slurp("/proc/cpuinfo")) {
    auto p = ci->find("model name");
    if (p != std::string::npos) {
      auto c = ci->find(':', p);
      auto e = ci->find('\n', c);
      m.cpu = ci->substr(c + 2, e - c - 2);
    }
  }
  char real[PATH_MAX];
  std::string target = ::realpath(dir.c_str(), real) ? real : dir;
  std::ifstream mi("/proc/self/mountinfo");
  std::string line;
  std::size_t best = 0;
  while (std::getline(mi, line)) {
    std::istringstream in(line);
    std::string id, parent, devno, root, mount;
    in >> id >> parent >> devno >> root >> mount;
    mount = unescape_mount(mount);
    std::string f;
    while (in >> f && f != "-") {
    }
    std::string fstype;
    in >> fstype;
    bool prefix = target == mount || mount == "/" ||
                  (target.compare(0, mount.size(), mount) == 0 && target.size() > mount.size() &&
                   target[mount.size()] == '/');
    if (prefix && mount.size() >= best) {
      best = mount.size();
      m.fs_type = fstype;
      m.fs_mount = mount;
    }
  }
  m.loadavg = read_loadavg();
  return m;
}

std::string which(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    auto end = p.find(':', start);
    std::string d = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (d.empty()) d = ".";
    std::string cand = d + "/" + name;
    struct stat st;
    if (::stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(cand.c_str(), X_OK) == 0) return cand;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        remove_tree(path + "/" + n);
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

std::string fmt(double v, int decimals) {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return "inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

}  // namespace bench
