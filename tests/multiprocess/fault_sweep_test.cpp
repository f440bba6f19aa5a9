// The fault sweep: contention scenarios in which one participant's system
// calls fail, each call of the syscall table (src/posix/syscalls.hpp) in
// turn, with each of EMFILE, ENFILE, ENOMEM, EACCES, EIO, ENOSPC and EINTR,
// once at its Nth use or from its Nth use on. On every run:
// - never two holders (a faulty participant never says "acquired" while a
//   healthy holder holds, and a healthy waiter never holds while it does);
// - never a live lock removed, moved or replaced (the healthy holder's
//   directory and token are intact, and it was never told it lost it);
// - never a waiter that gives up while its wait has time left: it waits its
//   wait out, or ends with an error that names the failure;
// - nothing left behind of the faulty participant's.
// scripts/test runs a sample of the N's; OFFLOAD_LOCK_SWEEP=full (scripts/soak)
// runs every N a scenario reaches; OFFLOAD_LOCK_SWEEP=light (scripts/sanitize,
// whose instrumented processes start and run many times slower) a sparser
// sample, one errno of each path a failure takes through the library: an
// error (the library has no path of its own for a shortage such as EMFILE:
// every failed call is an error, or an unknown judgment, alike) and an
// interruption, which is retried.
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <set>

#include "offload_lock/offload_lock.hpp"
#include "posix/syscalls.hpp"
#include "support.hpp"

namespace ol = offload_lock;
namespace sys = offload_lock::detail::sys;
using namespace olt;

namespace {

// ---- the faulty participant (a child of this binary) ----

// Never destroyed: the library's heartbeat thread, which lives as long as
// the process, may still call through the table while exit() runs the
// destructors of globals.
std::string& g_call = *new std::string;
int g_errno = 0;
long g_nth = 0;
bool g_persist = false;
std::atomic<long> g_seen{0};
std::atomic<bool> g_faulted{false};
// The table is installed once, before any thread of the library runs; this
// says whether it fails (replacing entries while the heartbeat thread runs
// would be a data race).
std::atomic<bool> g_armed{false};

bool fail(const char* call) {
  if (!g_armed || g_call != call) return false;
  const long n = ++g_seen;
  if (n < g_nth || (!g_persist && n != g_nth)) return false;
  g_faulted = true;
  errno = g_errno;
  return true;
}

// Every entry of the table, failing when the scenario says.
void install() {
  auto& c = sys::calls;
  const auto& r = sys::real_calls;
  c.openat = [](int d, const char* n, int f, mode_t m) { return fail("openat") ? -1 : sys::real_calls.openat(d, n, f, m); };
  c.close = [](int f) { return fail("close") ? (sys::real_calls.close(f), -1) : sys::real_calls.close(f); };
  c.read = [](int f, void* b, size_t n) -> ssize_t { return fail("read") ? -1 : sys::real_calls.read(f, b, n); };
  c.write = [](int f, const void* b, size_t n) -> ssize_t { return fail("write") ? -1 : sys::real_calls.write(f, b, n); };
  c.fstat = [](int f, struct stat* s) { return fail("fstat") ? -1 : sys::real_calls.fstat(f, s); };
  c.fstatat = [](int d, const char* n, struct stat* s, int f) {
    return fail("fstatat") ? -1 : sys::real_calls.fstatat(d, n, s, f);
  };
  c.mkdirat = [](int d, const char* n, mode_t m) { return fail("mkdirat") ? -1 : sys::real_calls.mkdirat(d, n, m); };
  c.mkfifoat = [](int d, const char* n, mode_t m) { return fail("mkfifoat") ? -1 : sys::real_calls.mkfifoat(d, n, m); };
  c.unlinkat = [](int d, const char* n, int f) { return fail("unlinkat") ? -1 : sys::real_calls.unlinkat(d, n, f); };
  c.renameat = [](int a, const char* f, int b, const char* t) {
    return fail("renameat") ? -1 : sys::real_calls.renameat(a, f, b, t);
  };
  c.renameat2 = [](int a, const char* f, int b, const char* t, unsigned fl) {
    return fail("renameat2") ? -1 : sys::real_calls.renameat2(a, f, b, t, fl);
  };
  c.fchmod = [](int f, mode_t m) { return fail("fchmod") ? -1 : sys::real_calls.fchmod(f, m); };
  c.utimensat = [](int d, const char* n, const struct timespec t[2], int f) {
    return fail("utimensat") ? -1 : sys::real_calls.utimensat(d, n, t, f);
  };
  c.getdents64 = [](int f, void* b, size_t n) -> ssize_t {
    return fail("getdents64") ? -1 : sys::real_calls.getdents64(f, b, n);
  };
  c.ofd_setlk = [](int f, struct flock* l) { return fail("ofd_setlk") ? -1 : sys::real_calls.ofd_setlk(f, l); };
  c.ofd_getlk = [](int f, struct flock* l) { return fail("ofd_getlk") ? -1 : sys::real_calls.ofd_getlk(f, l); };
  c.fcntl_int = [](int f, int cmd, int a) { return fail("fcntl_int") ? -1 : sys::real_calls.fcntl_int(f, cmd, a); };
  c.flock = [](int f, int op) { return fail("flock") ? -1 : sys::real_calls.flock(f, op); };
  c.dup3 = [](int a, int b, int fl) { return fail("dup3") ? -1 : sys::real_calls.dup3(a, b, fl); };
  c.pipe2 = [](int p[2], int fl) { return fail("pipe2") ? -1 : sys::real_calls.pipe2(p, fl); };
  c.poll = [](struct pollfd* p, nfds_t n, int t) { return fail("poll") ? -1 : sys::real_calls.poll(p, n, t); };
  c.kill = [](pid_t p, int s) { return fail("kill") ? -1 : sys::real_calls.kill(p, s); };
  c.inotify_init1 = [](int f) { return fail("inotify_init1") ? -1 : sys::real_calls.inotify_init1(f); };
  c.inotify_add_watch = [](int f, const char* p, std::uint32_t m) {
    return fail("inotify_add_watch") ? -1 : sys::real_calls.inotify_add_watch(f, p, m);
  };
  c.pidfd_open = [](pid_t p, unsigned f) { return fail("pidfd_open") ? -1 : sys::real_calls.pidfd_open(p, f); };
  c.getrandom = [](void* b, size_t n, unsigned f) -> ssize_t {
    return fail("getrandom") ? -1 : sys::real_calls.getrandom(b, n, f);
  };
  c.clock_gettime = [](clockid_t k, struct timespec* t) {
    return fail("clock_gettime") ? -1 : sys::real_calls.clock_gettime(k, t);
  };
  c.readlinkat = [](int d, const char* n, char* b, size_t s) -> ssize_t {
    return fail("readlinkat") ? -1 : sys::real_calls.readlinkat(d, n, b, s);
  };
  c.lseek = [](int f, off_t o, int w) -> off_t { return fail("lseek") ? -1 : sys::real_calls.lseek(f, o, w); };
  c.pwrite = [](int f, const void* b, size_t n, off_t o) -> ssize_t {
    return fail("pwrite") ? -1 : sys::real_calls.pwrite(f, b, n, o);
  };
  c.ftruncate = [](int f, off_t n) { return fail("ftruncate") ? -1 : sys::real_calls.ftruncate(f, n); };
  (void)r;
}

void say(const ol::result<ol::lock>& l, std::int64_t waited_ms) {
  if (l) std::cout << "acquired";
  else if (l.error() == ol::errc::busy) std::cout << "busy";
  else if (l.error() == ol::errc::timed_out) std::cout << "timed_out";
  else std::cout << "error " << l.error().message();
  std::cout << "\nwaited " << waited_ms << std::endl;
}

// sweep SCENARIO PATH CALL ERRNO N PERSIST WAIT_MS
//   wait: acquire with WAIT_MS (a healthy holder may hold it meanwhile) and,
//         when acquired, hold until a line arrives, then release.
int child_sweep(int argc, char** argv) {
  if (argc < 7) return 2;
  const std::string path = argv[1];
  g_call = argv[2];
  g_errno = std::atoi(argv[3]);
  g_nth = std::atol(argv[4]);
  g_persist = std::string(argv[5]) == "1";
  const long wait_ms = std::atol(argv[6]);
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(wait_ms);
  o.label = "faulty";
  o.on_lost = [](const ol::error&) { std::cout << "on_lost" << std::endl; };
  install();
  const auto began = std::chrono::steady_clock::now();
  g_armed = true;
  auto l = ol::lock::acquire(o);
  g_armed = false;
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
  // Reporting with a healthy table, so that the answer reaches the test;
  // the release faulty again, from where the count stands.
  say(l, waited.count());
  if (l) {
    std::string line;
    std::getline(std::cin, line);
    g_armed = true;
    const ol::error e = l->release();
    g_armed = false;
    std::cout << (e ? "release-error " + e.message() : std::string("released")) << std::endl;
  }
  std::cout << "faulted " << (g_faulted ? 1 : 0) << std::endl;
  return 0;
}

// ---- the test side ----

struct run_result {
  std::vector<std::string> lines;
  bool faulted = false;
};

const std::vector<const char*> kCalls = {
    "openat", "close", "read", "write", "fstat", "fstatat", "mkdirat", "mkfifoat", "unlinkat", "renameat",
    "renameat2", "fchmod", "utimensat", "getdents64", "ofd_setlk", "ofd_getlk", "fcntl_int", "flock", "dup3",
    "pipe2", "poll", "kill", "inotify_init1", "inotify_add_watch", "pidfd_open", "getrandom", "clock_gettime",
    "readlinkat", "lseek", "pwrite", "ftruncate"};
const std::vector<int> kErrnos = {EMFILE, ENFILE, ENOMEM, EACCES, EIO, ENOSPC, EINTR};

bool sweep_is(const char* mode) {
  const char* v = std::getenv("OFFLOAD_LOCK_SWEEP");
  return v && std::string(v) == mode;
}
bool full_sweep() { return sweep_is("full"); }
bool light_sweep() { return sweep_is("light"); }

// The errnos tried: every one, or in the light sweep one of each path.
bool tried(int err) { return !light_sweep() || err == EIO || err == EINTR; }

// The N's to try for a call: all of them in the full sweep; otherwise the
// first few and then a sparse sample (a call made a hundred times fails
// alike at its 40th and 41st use).
bool sampled(long n) {
  if (light_sweep()) return n <= 2 || n == 9;
  return full_sweep() || n <= 3 || n == 5 || n == 9 || n == 17 || n == 33;
}

// Which failures persist from their Nth call on: every errno in the full
// sweep, the lasting shortages otherwise. Never EINTR (a real EINTR needs a
// signal for each, and every wrapper retries it), nor clock_gettime (it
// cannot fail for the clocks used: one failure is what is modelled).
bool persists(const char* call, int err) {
  if (err == EINTR || std::string(call) == "clock_gettime") return false;
  return full_sweep() || err == EMFILE || err == ENOMEM || err == EIO;
}

std::set<std::string> private_names(const temp_dir& d, int pid) {
  std::set<std::string> out;
  const std::string p = std::to_string(pid);
  for (fs::directory_iterator it(d.path), end; it != end; ++it) {
    const std::string n = it->path().filename().string();
    if ((n.find(".stage-") != std::string::npos || n.find(".aside-") != std::string::npos ||
         n.find(".next-") != std::string::npos) &&
        n.find("-" + p + "-") != std::string::npos)
      out.insert(n);
  }
  return out;
}

std::string ident(const std::string& lock) {
  struct stat st {};
  if (::stat(lock.c_str(), &st) != 0) return "absent";
  return std::to_string(st.st_ino) + ":" + read_file(fs::path(lock) / "meta.json");
}

}  // namespace

int child_fault_sweep(int argc, char** argv) { return child_sweep(argc, argv); }

namespace {

// The calls of one quarter (0 to 3) of the syscall table.
std::vector<const char*> quarter_of_table(std::size_t part) {
  const std::size_t parts = 4, per = (kCalls.size() + parts - 1) / parts;
  const auto at = [&](std::size_t i) { return kCalls.begin() + static_cast<std::ptrdiff_t>(std::min(kCalls.size(), i)); };
  return std::vector<const char*>(at(part * per), at((part + 1) * per));
}

// Runs `one` for every sampled failure of the calls of one quarter of the
// table: each call, errno, once or from then on, at its Nth use. `one`
// returns false when the call was made fewer than N times (no larger N
// reaches it either).
void sweep_quarter(std::size_t part, const std::function<bool(const char*, int, bool, long)>& one) {
  const std::vector<const char*> calls = quarter_of_table(part);
  REQUIRE_FALSE(calls.empty());
  long runs = 0;
  for (const char* call : calls)
    for (int err : kErrnos)
      for (bool persist : {false, true}) {
        if (!tried(err)) continue;
        if (persist && !persists(call, err)) continue;
        for (long n = 1; n <= 64; ++n) {
          if (!sampled(n)) continue;
          INFO(call << " fails with " << std::strerror(err) << (persist ? " from" : " at") << " call " << n);
          ++runs;
          if (!one(call, err, persist, n)) break;
        }
      }
  CHECK(runs > 0);
}

// A healthy holder keeps the lock throughout; the faulty participant waits
// 300 ms for it. It must never hold, never disturb the holder, and give up
// only when its wait is out or with an error naming the failure. One test
// case per quarter of the table, so that CTest can run them side by side
// (each of their runs spends most of its time waiting).
void sweep_waiter_beside_holder(std::size_t part) {
  sweep_quarter(part, [](const char* call, int err, bool persist, long n) {
    temp_dir d;
    child holder(self_exe(), {"--child", "hold", d.lock(), "0"});
    REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
    const std::string before = ident(d.lock());
    child c(self_exe(), {"--child", "fault-sweep", "wait", d.lock(), call, std::to_string(err), std::to_string(n),
                         persist ? "1" : "0", "300"});
    std::vector<std::string> out;
    while (auto line = c.read_line(60s)) out.push_back(*line);
    REQUIRE(c.wait(60s) == std::optional<int>(0));
    REQUIRE(out.size() >= 3);
    // Never a second holder.
    CHECK(out[0] != "acquired");
    if (out[0] == "timed_out") CHECK(std::stol(out[1].substr(7)) >= 290);
    else if (out[0] != "busy") CHECK_THAT(out[0], Catch::StartsWith("error "));
    // The live lock untouched.
    CHECK(ident(d.lock()) == before);
    holder.write_line("still");
    CHECK(holder.read_line() == std::optional<std::string>("held"));
    holder.close_stdin();
    REQUIRE(holder.wait() == 0);
    // Out of descriptors, a process cannot always clean up after
    // itself; what it left (only its own private names) goes with
    // the next acquisition.
    {
      auto next = ol::lock::acquire(d.lock(), ol::milliseconds(0));
      CHECK(next);
    }
    CHECK(private_names(d, c.pid()).empty());
    return out.back() != "faulted 0";  // this call is made fewer than n times
  });
}

}  // namespace

TEST_CASE("fault sweep: a faulty waiter beside a live holder (calls 1 to 8)", "[multiprocess][fault][sweep]") {
  sweep_waiter_beside_holder(0);
}

TEST_CASE("fault sweep: a faulty waiter beside a live holder (calls 9 to 16)", "[multiprocess][fault][sweep]") {
  sweep_waiter_beside_holder(1);
}

TEST_CASE("fault sweep: a faulty waiter beside a live holder (calls 17 to 24)", "[multiprocess][fault][sweep]") {
  sweep_waiter_beside_holder(2);
}

TEST_CASE("fault sweep: a faulty waiter beside a live holder (calls 25 to 31)", "[multiprocess][fault][sweep]") {
  sweep_waiter_beside_holder(3);
}

TEST_CASE("fault sweep: the quarters cover the whole table", "[unit][fault][sweep]") {
  CHECK(kCalls.size() == 31);
  std::size_t n = 0;
  for (std::size_t part = 0; part < 4; ++part) n += quarter_of_table(part).size();
  CHECK(n == kCalls.size());
}

namespace {

// The faulty participant alone at a free lock: it takes it or fails with an
// error naming the failure, and a healthy waiter behind it is served. One
// test case per quarter of the table, as above.
void sweep_free_lock(std::size_t part) {
  sweep_quarter(part, [](const char* call, int err, bool persist, long n) {
    temp_dir d;
    child c(self_exe(), {"--child", "fault-sweep", "wait", d.lock(), call, std::to_string(err), std::to_string(n),
                         persist ? "1" : "0", "2000"});
    auto first = c.read_line(60s);
    REQUIRE(first);
    REQUIRE(c.read_line(60s));  // waited
    if (*first == "acquired") {
      // Held by the faulty one: a healthy waiter must wait for it, and
      // get it when it releases (handed over, or plainly).
      child w(self_exe(), {"--child", "hold", d.lock(), "-1"});
      REQUIRE(eventually([&] { return !ol::waiters(d.lock()).empty(); }));
      c.write_line("release");
      auto rel = c.read_line(60s);
      REQUIRE(rel);
      CHECK((*rel == "released" || rel->rfind("release-error ", 0) == 0));
      auto got = w.read_line(60s);
      REQUIRE(got);
      CHECK(got->rfind("acquired ", 0) == 0);
      w.close_stdin();
      CHECK(w.wait() == 0);
    } else {
      // A free lock that could not be taken: an error naming it (no
      // timeout: nobody held it).
      CHECK_THAT(*first, Catch::StartsWith("error "));
    }
    std::vector<std::string> rest;
    while (auto line = c.read_line(60s)) rest.push_back(*line);
    REQUIRE(c.wait(60s) == std::optional<int>(0));
    // The lock is free for the next participant, whose acquisition
    // takes what the faulty one left (only its own private names).
    {
      auto next = ol::lock::acquire(d.lock(), ol::milliseconds(0));
      CHECK(next);
    }
    CHECK(private_names(d, c.pid()).empty());
    return rest.empty() || rest.back() != "faulted 0";
  });
}

}  // namespace

TEST_CASE("fault sweep: a faulty participant takes a free lock, and a healthy one waits behind it (calls 1 to 8)",
          "[multiprocess][fault][sweep]") {
  sweep_free_lock(0);
}

TEST_CASE("fault sweep: a faulty participant takes a free lock, and a healthy one waits behind it (calls 9 to 16)",
          "[multiprocess][fault][sweep]") {
  sweep_free_lock(1);
}

TEST_CASE("fault sweep: a faulty participant takes a free lock, and a healthy one waits behind it (calls 17 to 24)",
          "[multiprocess][fault][sweep]") {
  sweep_free_lock(2);
}

TEST_CASE("fault sweep: a faulty participant takes a free lock, and a healthy one waits behind it (calls 25 to 31)",
          "[multiprocess][fault][sweep]") {
  sweep_free_lock(3);
}
