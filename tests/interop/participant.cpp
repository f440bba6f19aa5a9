// interop_participant: the C++ side of the cross-language interop suite.
//
// One small program with several modes, used by matrix.test.mjs, meta.test.mjs
// and stress.mjs (all in this directory):
//
//   hold --lock P [--wait-ms N] [--label L]
//       The library as a holder or a waiter: prints `waiting <pid>`, takes the
//       lock with offload_lock::lock::acquire, prints `acquired <pid>` (or
//       `busy` and exits 1, or `error <message>` and exits 4), holds it until
//       stdin reaches EOF, releases, prints `released` (exit 0) or `lost`
//       (exit 5).
//   cmd-hold
//       The CMD of `offload-lock run` in the matrix: prints `acquired <pid>`
//       and exits 0 when stdin reaches EOF.
//   inspect --lock P
//       offload_lock::inspect as one JSON line (what the library concludes,
//       and what it predicts the Node and Go rules conclude).
//   loop --lock P --dir D --tag T [stress options]
//       Stress participant over the library: acquire -> critical section ->
//       release, until <D>/stop exists.
//   run-loop --bin OFFLOAD_LOCK --lock P --dir D --tag T [stress options]
//       Stress participant over the command: runs
//       `offload-lock run -- interop_participant cs ...` in a loop.
//   cs --lock P --dir D --tag T --kind K [--cs-min N --cs-max N] [--no-lock]
//       One critical section (the CMD of run-loop).
//
// Stress options: --wait-ms N (one acquisition attempt; default 3000),
// --cs-min/--cs-max N (ms inside the critical section), --think-min/--think-max
// N (ms between cycles), --skip-lock-every N (detector self-test: every Nth
// cycle enters the critical section WITHOUT the lock).
//
// The critical-section protocol and the event lines are the same as in
// participant.mjs; they are described in stress.mjs.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "offload_lock/lock.hpp"

extern char** environ;

namespace ol = offload_lock;
using namespace std::chrono_literals;

namespace {

// ---------------------------------------------------------------- utilities

std::string now_str() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld.%03ld", static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000,
                (ts.tv_nsec / 1000) % 1000);
  return buf;
}

// One line, one write(2): lines of several processes sharing a pipe never mix.
void out_line(const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(1, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// An event line: TYPE TIME FIELDS...
void event(const std::string& type, const std::string& rest) { out_line(type + " " + now_str() + " " + rest); }

std::optional<std::string> read_text(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string s;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return s;
}

bool write_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0;
}

void sleep_ms(double ms) {
  if (ms <= 0) return;
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(ms * 1000)));
}

// /proc/<pid>/stat: state, flags and start time (clock ticks after boot).
struct proc_stat {
  char state = '?';
  unsigned long flags = 0;
  unsigned long long start = 0;
};
std::optional<proc_stat> read_proc_stat(long pid) {
  auto text = read_text("/proc/" + std::to_string(pid) + "/stat");
  if (!text) return std::nullopt;
  auto close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // Fields after the command: 3 state, 4 ppid, ... 9 flags, ... 22 starttime.
  std::vector<std::string> f;
  size_t i = close + 2;
  while (i < text->size()) {
    size_t j = text->find(' ', i);
    if (j == std::string::npos) j = text->size();
    f.push_back(text->substr(i, j - i));
    i = j + 1;
  }
  if (f.size() < 20) return std::nullopt;
  proc_stat s;
  s.state = f[0].empty() ? '?' : f[0][0];
  s.flags = std::strtoul(f[6].c_str(), nullptr, 10);
  s.start = std::strtoull(f[19].c_str(), nullptr, 10);
  return s;
}

// A sentinel's writer is dead when its pid is gone, reused (another start
// time), a zombie, or already exiting (PF_EXITING: SIGKILLed, closing its
// files, which is what releases an `offload-lock hold` child's lock).
bool writer_dead(long pid, unsigned long long start) {
  constexpr unsigned long pf_exiting = 0x4;
  auto s = read_proc_stat(pid);
  if (!s) return true;
  if (s->start != start) return true;
  if (s->state == 'Z' || s->state == 'X' || s->state == 'x') return true;
  return (s->flags & pf_exiting) != 0;
}

// ------------------------------------------------------------ options

struct opts {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  long num(const std::string& k, long def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::strtol(it->second.c_str(), nullptr, 10);
  }
  bool flag(const std::string& k) const { return kv.count(k) != 0; }
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "interop_participant: " << why
            << "\nusage: interop_participant hold|cmd-hold|inspect|loop|run-loop|cs [--opt value ...]\n";
  std::exit(2);
}

opts parse(int argc, char** argv, int from) {
  static const char* flags[] = {"--no-lock"};
  opts o;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) usage("unexpected argument " + a);
    bool is_flag = false;
    for (auto f : flags) is_flag = is_flag || a == f;
    if (is_flag) {
      o.kv[a] = "1";
      continue;
    }
    if (i + 1 >= argc) usage(a + " needs a value");
    o.kv[a] = argv[++i];
  }
  return o;
}

std::mt19937_64& rng() {
  static std::mt19937_64 r(static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                           static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  return r;
}
double uniform(double lo, double hi) {
  if (hi <= lo) return lo;
  return std::uniform_real_distribution<double>(lo, hi)(rng());
}

// A queue priority for one stress cycle: batch, normal or interactive, so
// that the queue's ordering (and passing over) runs under the stress too.
int any_priority() {
  const double u = uniform(0.0, 3.0);
  return u < 1.0 ? -10 : u < 2.0 ? 0 : 10;
}

// --------------------------------------------------- critical section

struct sentinel {
  std::string dir, tag, kind;
  std::string path() const { return dir + "/in-cs"; }
  std::string mine;  // the sentinel's bytes when it is ours

  // locked: whether this entry holds the lock ("L") or, in the detector
  // self-test, deliberately does not ("N"); overlaps report both sides' flag.
  sentinel(std::string d, std::string t, std::string k, bool locked)
      : dir(std::move(d)), tag(std::move(t)), kind(std::move(k)), flag(locked ? "L" : "N") {
    auto st = read_proc_stat(::getpid());
    mine = tag + " " + std::to_string(::getpid()) + " " + std::to_string(st ? st->start : 0) + " " + flag + "\n";
  }
  std::string flag;

  // Exclusive creation of <dir>/in-cs holding our id. The id is written to a
  // private file first and linked into place: link(2) fails with EEXIST
  // exactly like open(O_CREAT|O_EXCL), and the sentinel is never seen empty.
  void enter() {
    std::string tmp = dir + "/in-cs.tmp." + std::to_string(::getpid());
    if (!write_text(tmp, mine)) {
      event("E", tag + " cannot-write-" + tmp + ":" + std::strerror(errno));
      return;
    }
    auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      if (::link(tmp.c_str(), path().c_str()) == 0) break;
      if (errno != EEXIST) {
        event("E", tag + " link-in-cs:" + std::strerror(errno));
        break;
      }
      auto other = read_text(path());
      if (!other) continue;  // removed meanwhile: try again
      std::string inside_tag = "?", inside_flag = "?";
      long pid = 0;
      unsigned long long start = 0;
      {
        char t[256] = {0}, f[8] = {0};
        int n = std::sscanf(other->c_str(), "%255s %ld %llu %7s", t, &pid, &start, f);
        if (n >= 1) inside_tag = t;
        if (n >= 4) inside_flag = f;
      }
      if (pid > 0 && writer_dead(pid, start)) {
        // Left behind by a participant killed inside its critical section:
        // the supervisor clears it (and counts a kill cleanup). Wait for that.
        event("D", tag + " " + inside_tag + " " + std::to_string(pid));
        while (read_text(path()) == other) {
          if (std::chrono::steady_clock::now() > deadline) {
            event("E", tag + " dead-sentinel-not-cleared " + inside_tag);
            ::unlink(path().c_str());
            break;
          }
          sleep_ms(1);
        }
        continue;
      }
      // Someone alive is inside: an overlap. Record it, then take the
      // sentinel over so that the next entrant is checked against us.
      event("O", tag + " " + kind + " " + inside_tag + " " + std::to_string(pid) + " " + flag + " " + inside_flag);
      if (::rename(tmp.c_str(), path().c_str()) != 0) event("E", tag + " rename-in-cs:" + std::strerror(errno));
      return;
    }
    ::unlink(tmp.c_str());
  }

  // Remove the sentinel on the way out, only if it is still ours.
  void leave() {
    auto now = read_text(path());
    if (!now) {
      event("G", tag + " missing");
      return;
    }
    if (*now != mine) {
      std::string who = now->substr(0, now->find(' '));
      event("G", tag + " replaced-by " + who);
      return;
    }
    ::unlink(path().c_str());
  }
};

struct stress_opts {
  std::string lock, dir, tag, kind;
  long wait_ms, cs_min, cs_max, think_min, think_max, skip_every;
  explicit stress_opts(const opts& o, const std::string& k)
      : lock(o.get("--lock")), dir(o.get("--dir")), tag(o.get("--tag")), kind(o.get("--kind", k)),
        wait_ms(o.num("--wait-ms", 3000)), cs_min(o.num("--cs-min", 1)), cs_max(o.num("--cs-max", 4)),
        think_min(o.num("--think-min", 0)), think_max(o.num("--think-max", 5)), skip_every(o.num("--skip-lock-every", 0)) {
    if (lock.empty() || dir.empty() || tag.empty()) usage("--lock, --dir and --tag are required");
  }
  bool stop() const { return exists(dir + "/stop"); }
};

// One critical section while holding (or, for the self-test, pretending to
// hold) the lock. ident: the token of the lock this participant took.
void critical_section(const stress_opts& s, bool locked, const std::string& ident = "-") {
  sentinel cs(s.dir, s.tag, s.kind, locked);
  cs.enter();
  auto st = read_proc_stat(::getpid());
  if (locked)
    event("A", s.tag + " " + s.kind + " " + std::to_string(::getpid()) + " " + std::to_string(st ? st->start : 0) + " " +
                   (ident.empty() ? std::string("-") : ident));
  else
    event("N", s.tag + " " + s.kind);
  sleep_ms(uniform(static_cast<double>(s.cs_min), static_cast<double>(s.cs_max)));
  cs.leave();
  event("X", s.tag);
}

// ------------------------------------------------------------------ modes

int mode_hold(const opts& o) {
  ol::lock_options lo;
  lo.path = o.get("--lock");
  if (lo.path.empty()) usage("hold needs --lock");
  long wait = o.num("--wait-ms", -1);
  lo.wait = wait < 0 ? ol::wait_forever : ol::milliseconds(wait);
  lo.label = o.get("--label", "interop-lib");
  out_line("waiting " + std::to_string(::getpid()));
  auto l = ol::lock::acquire(lo);
  if (!l) {
    if (l.error() == ol::errc::busy || l.error() == ol::errc::timed_out) {
      out_line("busy");
      return 1;
    }
    out_line("error " + l.error().message());
    return 4;
  }
  out_line("acquired " + std::to_string(::getpid()));
  char buf[256];
  while (true) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ol::error e = l->release();
  if (e == ol::errc::lost) {
    out_line("lost");
    return 5;
  }
  if (e) {
    out_line("error " + e.message());
    return 4;
  }
  out_line("released");
  return 0;
}

int mode_cmd_hold() {
  out_line("acquired " + std::to_string(::getpid()));
  char buf[256];
  while (true) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  return 0;
}

std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      r += '\\';
      r += static_cast<char>(c);
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else {
      r += static_cast<char>(c);
    }
  }
  return r + "\"";
}

int mode_inspect(const opts& o) {
  std::string lock = o.get("--lock");
  if (lock.empty()) usage("inspect needs --lock");
  ol::info i = ol::inspect(lock);
  auto opt = [](const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : std::string("null"); };
  out_line(std::string("{\"present\":") + (i.present ? "true" : "false") + ",\"held\":" + (i.held ? "true" : "false") +
           ",\"pid\":" + opt(i.pid) + ",\"startedAt\":" + opt(i.started_at) + ",\"label\":" + json_str(i.label) +
           ",\"token\":" + json_str(i.token) + ",\"nodeStale\":" + (i.node_stale ? "true" : "false") +
           ",\"goHeld\":" + (i.go_held ? "true" : "false") + ",\"stale\":" + (i.stale_reason ? json_str(*i.stale_reason) : "null") + "}");
  return 0;
}

int mode_loop(const opts& o) {
  stress_opts s(o, "lib");
  long cycle = 0;
  while (!s.stop()) {
    sleep_ms(uniform(static_cast<double>(s.think_min), static_cast<double>(s.think_max)));
    if (s.stop()) break;
    ++cycle;
    if (s.skip_every > 0 && cycle % s.skip_every == 0) {
      critical_section(s, false);
      continue;
    }
    ol::lock_options lo;
    lo.path = s.lock;
    lo.wait = ol::milliseconds(s.wait_ms);
    lo.label = s.tag;
    lo.priority = any_priority();
    std::string tag = s.tag;
    lo.on_lost = [tag](const ol::error&) { event("L", tag + " lib heartbeat"); };
    auto l = ol::lock::acquire(lo);
    if (!l) {
      if (l.error() == ol::errc::busy || l.error() == ol::errc::timed_out)
        event("T", s.tag);
      else
        event("E", s.tag + " acquire:" + l.error().message());
      continue;
    }
    critical_section(s, true, l->token());
    ol::error e = l->release();
    if (e == ol::errc::lost)
      event("L", s.tag + " lib release");
    else if (e)
      event("E", s.tag + " release:" + e.message());
    event("F", s.tag);
  }
  return 0;
}

int spawn_wait(const std::vector<std::string>& argv) {
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  pid_t pid = 0;
  if (int rc = ::posix_spawn(&pid, av[0], nullptr, nullptr, av.data(), environ); rc != 0) {
    errno = rc;
    return -1;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "interop_participant";
  buf[n] = 0;
  return buf;
}

constexpr int kBusyExit = 75;

int mode_run_loop(const opts& o) {
  stress_opts s(o, "run");
  std::string bin = o.get("--bin");
  if (bin.empty()) usage("run-loop needs --bin");
  std::string self = self_exe();
  std::vector<std::string> cs = {self, "cs", "--lock", s.lock, "--dir", s.dir, "--tag", s.tag, "--kind", s.kind,
                                 "--cs-min", std::to_string(s.cs_min), "--cs-max", std::to_string(s.cs_max)};
  long cycle = 0;
  while (!s.stop()) {
    sleep_ms(uniform(static_cast<double>(s.think_min), static_cast<double>(s.think_max)));
    if (s.stop()) break;
    ++cycle;
    if (s.skip_every > 0 && cycle % s.skip_every == 0) {
      auto argv = cs;
      argv.push_back("--no-lock");
      spawn_wait(argv);
      continue;
    }
    std::vector<std::string> argv = {bin, "--lock", s.lock, "--quiet", "run", "--wait", std::to_string(s.wait_ms) + "ms",
                                     "--priority", std::to_string(any_priority()), "--busy-exit", std::to_string(kBusyExit), "--label", s.tag, "--"};
    argv.insert(argv.end(), cs.begin(), cs.end());
    int code = spawn_wait(argv);
    if (code == 0)
      event("F", s.tag);
    else if (code == kBusyExit)
      event("T", s.tag);
    else if (code == 128 + SIGKILL)
      event("K", s.tag + " cmd-killed");  // the supervisor killed the CMD
    else if (code == 1)
      // Only when the CMD died while run still waited for the lock: run then
      // says "gave up waiting" and exits 1, not --busy-exit nor 128+9.
      event("K", s.tag + " cmd-killed-while-waiting:exit-1");
    else if (code == 128 + SIGPIPE)
      event("E", s.tag + " run-exit:141(SIGPIPE)");
    else
      event("E", s.tag + " run-exit:" + std::to_string(code));
  }
  return 0;
}

int mode_cs(const opts& o) {
  stress_opts s(o, "run");
  const char* token = std::getenv("OFFLOAD_LOCK_TOKEN");  // set by offload-lock run
  critical_section(s, !o.flag("--no-lock"), token ? token : "-");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage("missing mode");
  std::string mode = argv[1];
  opts o = parse(argc, argv, 2);
  try {
    if (mode == "hold") return mode_hold(o);
    if (mode == "cmd-hold") return mode_cmd_hold();
    if (mode == "inspect") return mode_inspect(o);
    if (mode == "loop") return mode_loop(o);
    if (mode == "run-loop") return mode_run_loop(o);
    if (mode == "cs") return mode_cs(o);
  } catch (const std::exception& e) {
    out_line(std::string("error ") + e.what());
    return 4;
  }
  usage("unknown mode " + mode);
}
