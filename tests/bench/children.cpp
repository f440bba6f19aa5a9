// The helper processes of the benchmark: the benchmark binary re-executes
// itself as `offload-lock-bench --child MODE ARGS...`. Each mode speaks a
// line protocol on stdin/stdout:
//   parent -> child: "go" (start one acquisition), "start" (start a loop)
//   child -> parent: "w <ns>"  about to block / waiting (CLOCK_MONOTONIC ns)
//                    "a <ns>"  holding the lock, stamped right after getting it
//                    "held <ns>", "n <count>", "e <message>"
// The queue section's modes (q-waiter, plant) write to one pipe shared by
// many children instead; see queue_bench.hpp.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "etcd_bench.hpp"
#include "goals_bench.hpp"
#include "offload_lock/lock.hpp"
#include "util.hpp"

namespace ol = offload_lock;

namespace bench {

namespace {

void say(const std::string& s) { write_line_fd(1, s); }

int usage(const std::string& what) {
  write_line_fd(2, "offload-lock-bench --child: " + what);
  return 2;
}

// Blocks in lock::acquire each time the parent says "go"; reports the start
// of the wait (on_wait) and the moment it holds the lock, then releases.
int lib_waiter(const std::string& path) {
  line_reader in(0);
  say("ready");
  while (auto line = in.next(-1)) {
    if (*line != "go") continue;
    bool waited = false;
    ol::lock_options o;
    o.path = path;
    o.wait = ol::wait_forever;
    o.on_wait = [&](const ol::info&) {
      if (!waited) say("w " + std::to_string(mono_ns()));
      waited = true;
    };
    auto l = ol::lock::acquire(o);
    std::int64_t t = mono_ns();
    if (!l) {
      say("e acquire: " + l.error().message());
      continue;
    }
    if (!waited) say("w " + std::to_string(t) + " nowait");
    if (auto e = l->release()) {
      say("e release: " + e.message());
      continue;
    }
    say("a " + std::to_string(t));
  }
  return 0;
}

// Takes the lock, says so, and holds it until stdin closes (or it is killed).
int lib_hold(const std::string& path, bool heartbeat) {
  ol::lock_options o;
  o.path = path;
  o.wait = std::chrono::seconds(30);
  o.heartbeat = heartbeat;
  auto l = ol::lock::acquire(o);
  if (!l) {
    say("e acquire: " + l.error().message());
    return 1;
  }
  say("held " + std::to_string(mono_ns()));
  line_reader in(0);
  while (in.next(-1)) {
  }
  (void)l->release();
  return 0;
}

int open_lock_file(const std::string& file) {
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) say("e open " + file + ": " + std::strerror(errno));
  return fd;
}

int flock_retry(int fd, int op) {
  int r;
  do r = ::flock(fd, op);
  while (r < 0 && errno == EINTR);
  return r;
}

// Like lib_waiter, blocked in flock(2) on its own open file description.
int flock_waiter(const std::string& file) {
  int fd = open_lock_file(file);
  if (fd < 0) return 1;
  line_reader in(0);
  say("ready");
  while (auto line = in.next(-1)) {
    if (*line != "go") continue;
    say("w " + std::to_string(mono_ns()));
    if (flock_retry(fd, LOCK_EX) != 0) {
      say(std::string("e flock: ") + std::strerror(errno));
      continue;
    }
    std::int64_t t = mono_ns();
    flock_retry(fd, LOCK_UN);
    say("a " + std::to_string(t));
  }
  return 0;
}

// Loops acquire -> release until `ms` have passed since "start"; reports the
// number of acquisitions that completed inside the window.
int lib_loop(const std::string& path, long ms) {
  line_reader in(0);
  say("ready");
  auto line = in.next(-1);
  if (!line || *line != "start") return 0;
  const std::int64_t end = mono_ns() + std::int64_t(ms) * 1'000'000;
  long count = 0;
  ol::lock_options o;
  o.path = path;
  for (;;) {
    std::int64_t left = end - mono_ns();
    if (left <= 0) break;
    o.wait = std::chrono::milliseconds(left / 1'000'000 + 1);
    auto l = ol::lock::acquire(o);
    if (!l) {
      if (l.error() == ol::errc::timed_out || l.error() == ol::errc::busy) break;
      say("e acquire: " + l.error().message());
      return 1;
    }
    bool inside = mono_ns() <= end;
    if (auto e = l->release()) {
      say("e release: " + e.message());
      return 1;
    }
    if (!inside) break;
    ++count;
  }
  say("n " + std::to_string(count));
  return 0;
}

int flock_loop(const std::string& file, long ms) {
  int fd = open_lock_file(file);
  if (fd < 0) return 1;
  line_reader in(0);
  say("ready");
  auto line = in.next(-1);
  if (!line || *line != "start") return 0;
  const std::int64_t end = mono_ns() + std::int64_t(ms) * 1'000'000;
  long count = 0;
  for (;;) {
    if (mono_ns() >= end) break;
    if (flock_retry(fd, LOCK_EX) != 0) {
      say(std::string("e flock: ") + std::strerror(errno));
      return 1;
    }
    bool inside = mono_ns() <= end;
    flock_retry(fd, LOCK_UN);
    if (!inside) break;
    ++count;
  }
  say("n " + std::to_string(count));
  return 0;
}


std::int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// One queued acquisition, then exit: `q-waiter PATH ID PRIORITY HOLD_LO_US
// HOLD_HI_US`. Every line starts with ID (many of these share one pipe):
//   "ID w <ns>"   waiting (stamped in on_wait, after it has joined the queue)
//   "ID x <message>"   release() failed (the lock was taken away), then "a"
//   "ID a <a_ns> <r_ns> <voluntary> <cpu_ns> <nowait> <voluntary_held> <cpu_held_ns> <s_ns>"
//     after the release: s_ns just before it called acquire (its arrival
//     in the queue lies between s_ns and its "w" stamp), a_ns right after
//     it held, r_ns just before
//     release(); voluntary switches (getrusage: every thread, dead ones
//     too) and CPU time of the whole process, read after the release and
//     right after it held.
int q_waiter(int argc, char** argv) {
  if (argc < 8) return usage("q-waiter PATH ID PRIORITY HOLD_LO_US HOLD_HI_US");
  const std::string path = argv[3], id = argv[4];
  const int priority = std::atoi(argv[5]);
  const long lo = std::atol(argv[6]), hi = std::atol(argv[7]);
  bool waited = false;
  ol::lock_options o;
  o.path = path;
  o.wait = std::chrono::seconds(120);
  o.priority = priority;
  o.on_wait = [&](const ol::info&) {
    if (!waited) say(id + " w " + std::to_string(mono_ns()));
    waited = true;
  };
  const std::int64_t s = mono_ns();
  auto l = ol::lock::acquire(o);
  const std::int64_t a = mono_ns();
  rusage at_hold{};
  ::getrusage(RUSAGE_SELF, &at_hold);
  const std::int64_t cpu_at_hold = process_cpu_ns();
  if (!l) {
    say(id + " e acquire: " + l.error().message());
    return 1;
  }
  if (hi > 0) {
    std::mt19937 rng(static_cast<unsigned>(a));
    sleep_ns(std::int64_t(std::uniform_int_distribution<long>(lo, std::max(lo, hi))(rng)) * 1000);
  }
  const std::int64_t r = mono_ns();
  // A lock taken away meanwhile (a v1 runner's rm -rf of a lock it judged
  // stale) is reported, and the run goes on.
  if (auto e = l->release()) say(id + " x release: " + e.message());
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  say(id + " a " + std::to_string(a) + " " + std::to_string(r) + " " + std::to_string(ru.ru_nvcsw) + " " +
      std::to_string(process_cpu_ns()) + " " + (waited ? "0" : "1") + " " + std::to_string(at_hold.ru_nvcsw) + " " +
      std::to_string(cpu_at_hold) + " " + std::to_string(s));
  return 0;
}

// Plants junk in a lock's waiter registry, as another user would: `plant
// DIR COUNT UID KIND`. Run as root it first becomes UID (so the files are
// that user's); otherwise it plants as whoever it is. KIND mix: half the
// files are oversized garbage under entry-like names, half well-formed
// entries (big, forged: only the one kind) that
// claim the front of the queue (priority 100, arrival 0) for pids that are
// alive but not waiting (pid 1, this benchmark), none of them write-locked.
// Says "ID planted <n> <uid>" or "ID e <message>".
int plant(int argc, char** argv) {
  if (argc < 7) return usage("plant DIR COUNT UID mix|big|forged");
  const std::string dir = argv[3];
  const long count = std::atol(argv[4]);
  const uid_t uid = static_cast<uid_t>(std::atol(argv[5]));
  const std::string kind = argv[6];
  if (::geteuid() == 0 && uid != 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) {
      say(std::string("plant e setuid: ") + std::strerror(errno));
      return 1;
    }
  }
  const std::string big(60 * 1024, 'x');
  const long parent = static_cast<long>(::getppid());
  std::mt19937_64 rng(7);
  long made = 0;
  for (long i = 0; i < count; ++i) {
    char hex[13];
    std::snprintf(hex, sizeof hex, "%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
    const bool garbage = kind == "big" || (kind == "mix" && i % 2 == 0);
    const long pid = garbage ? 100000 + i : (i % 4 == 1 ? 1 : parent);
    const std::string name = dir + "/" + std::to_string(pid) + "-" + hex + ".json";
    const std::string body =
        garbage ? big
                : "{\"pid\":" + std::to_string(pid) +
                      ",\"label\":\"junk\",\"host\":\"x\",\"since\":0,\"gpu\":null,\"gpus\":1,\"bootId\":\"x\","
                      "\"procTicks\":1,\"priority\":100,\"expectMs\":null,\"queuedUs\":0}\n";
    int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      say("plant e open " + name + ": " + std::strerror(errno));
      return 1;
    }
    bool ok = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
    ::close(fd);
    if (!ok) {
      say("plant e write " + name);
      return 1;
    }
    ++made;
  }
  say("plant planted " + std::to_string(made) + " " + std::to_string(::geteuid()));
  return 0;
}

}  // namespace

int run_child(int argc, char** argv) {
  // argv: prog --child MODE ARGS...
  if (argc < 4) return usage("MODE PATH [MS | nohb]");
  std::string mode = argv[2], path = argv[3];
  if (mode.rfind("g-", 0) == 0) return goals::run_child(argc, argv);
  if (mode.rfind("e-", 0) == 0) return etcd_bench::run_child(argc, argv);
  if (mode == "q-waiter") return q_waiter(argc, argv);
  if (mode == "plant") return plant(argc, argv);
  long ms = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 0;
  if (mode == "lib-waiter") return lib_waiter(path);
  if (mode == "lib-hold") return lib_hold(path, !(argc > 4 && std::string(argv[4]) == "nohb"));
  if (mode == "flock-waiter") return flock_waiter(path);
  if (mode == "lib-loop") return lib_loop(path, ms);
  if (mode == "flock-loop") return flock_loop(path, ms);
  return usage("unknown mode " + mode);
}

}  // namespace bench
