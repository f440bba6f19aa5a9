// The helper processes of the benchmark: the benchmark binary re-executes
// itself as `offload-lock-bench --child MODE ARGS...`. Each mode speaks a
// line protocol on stdin/stdout:
//   parent -> child: "go" (start one acquisition), "start" (start a loop)
//   child -> parent: "w <ns>"  about to block / waiting (CLOCK_MONOTONIC ns)
//                    "a <ns>"  holding the lock, stamped right after getting it
//                    "held <ns>", "n <count>", "e <message>"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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

}  // namespace

int run_child(int argc, char** argv) {
  // argv: prog --child MODE ARGS...
  if (argc < 4) return usage("MODE PATH [MS | nohb]");
  std::string mode = argv[2], path = argv[3];
  long ms = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 0;
  if (mode == "lib-waiter") return lib_waiter(path);
  if (mode == "lib-hold") return lib_hold(path, !(argc > 4 && std::string(argv[4]) == "nohb"));
  if (mode == "flock-waiter") return flock_waiter(path);
  if (mode == "lib-loop") return lib_loop(path, ms);
  if (mode == "flock-loop") return flock_loop(path, ms);
  return usage("unknown mode " + mode);
}

}  // namespace bench
