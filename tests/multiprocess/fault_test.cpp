// Faults injected through the syscall table (src/posix/syscalls.hpp), in a
// child process of this binary so that no other thread of the library runs
// while the table is replaced: B4's put-back of a live lock moved aside,
// reclaimers serializing on the directory's flock, and ENOSPC / EMFILE at
// every call of acquire, heartbeat and release, without root.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>
#include <set>
#include <thread>

#include "offload_lock/offload_lock.hpp"
#include "posix/syscalls.hpp"
#include "support.hpp"

namespace ol = offload_lock;
namespace sys = offload_lock::detail::sys;
using namespace olt;

namespace {

// ---- the child side ----

// The call a scenario fails, and how. The strings the table reads are
// never destroyed: the library's heartbeat thread, which lives as long as the
// process, may still call through the table while exit() runs the
// destructors of globals.
std::string& g_fail_call = *new std::string;
int g_fail_errno = 0;
long g_fail_nth = 0;  // fail the Nth call (1-based); 0: never
std::atomic<long> g_calls{0};
std::atomic<bool> g_faulted{false};

bool fail_now(const char* call) {
  if (g_fail_call != call) return false;
  if (++g_calls != g_fail_nth) return false;
  g_faulted = true;
  errno = g_fail_errno;
  return true;
}

void install_failing_table() {
  sys::calls.openat = [](int d, const char* n, int f, mode_t m) {
    return fail_now("openat") ? -1 : sys::real_calls.openat(d, n, f, m);
  };
  sys::calls.mkdirat = [](int d, const char* n, mode_t m) {
    return fail_now("mkdirat") ? -1 : sys::real_calls.mkdirat(d, n, m);
  };
  sys::calls.write = [](int f, const void* b, size_t n) -> ssize_t {
    return fail_now("write") ? -1 : sys::real_calls.write(f, b, n);
  };
  sys::calls.renameat = [](int a, const char* f, int b, const char* t) {
    return fail_now("renameat") ? -1 : sys::real_calls.renameat(a, f, b, t);
  };
  sys::calls.renameat2 = [](int a, const char* f, int b, const char* t, unsigned fl) {
    return fail_now("renameat2") ? -1 : sys::real_calls.renameat2(a, f, b, t, fl);
  };
  sys::calls.unlinkat = [](int d, const char* n, int f) {
    return fail_now("unlinkat") ? -1 : sys::real_calls.unlinkat(d, n, f);
  };
  sys::calls.fstatat = [](int d, const char* n, struct stat* s, int f) {
    return fail_now("fstatat") ? -1 : sys::real_calls.fstatat(d, n, s, f);
  };
  sys::calls.fstat = [](int f, struct stat* s) { return fail_now("fstat") ? -1 : sys::real_calls.fstat(f, s); };
  sys::calls.utimensat = [](int d, const char* n, const struct timespec t[2], int f) {
    return fail_now("utimensat") ? -1 : sys::real_calls.utimensat(d, n, t, f);
  };
}

void say_result(const ol::result<ol::lock>& l) {
  if (l) std::cout << "acquired";
  else if (l.error() == ol::errc::busy) std::cout << "busy";
  else if (l.error() == ol::errc::timed_out) std::cout << "timed_out";
  else std::cout << "error " << l.error().message();
  std::cout << std::endl;
}

// fail PATH CALL ERRNO N: acquire (wait 0, no heartbeat) and release, with
// the Nth CALL failing with ERRNO. Prints the acquisition's result, the
// release's, and "faulted 0|1".
int scenario_fail(const std::string& path, char** rest) {
  g_fail_call = rest[0];
  g_fail_errno = std::atoi(rest[1]);
  g_fail_nth = std::atol(rest[2]);
  install_failing_table();
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(0);
  o.heartbeat = false;
  o.register_waiter = false;
  auto l = ol::lock::acquire(o);
  say_result(l);
  if (l) {
    ol::error e = l->release();
    std::cout << (e ? "release-error " + e.message() : std::string("released")) << std::endl;
  }
  std::cout << "faulted " << (g_faulted ? 1 : 0) << std::endl;
  return 0;
}

// putback PATH LIVE_PID: a stale lock is at PATH. Between reclaim's check and
// its move aside, "another participant" replaces it with a live lock of
// LIVE_PID; the reclaim must put that one back. Prints the acquisition's
// result (wait 0).
std::string& g_path = *new std::string;
std::string& g_name = *new std::string;
long g_live_pid = 0;
int scenario_putback(const std::string& path, char** rest) {
  g_path = path;
  g_name = path.substr(path.rfind('/') + 1);
  g_live_pid = std::atol(rest[0]);
  sys::calls.renameat = [](int a, const char* from, int b, const char* to) {
    static bool done = false;
    const std::string aside = "." + g_name + ".aside-";
    if (!done && g_name == from && std::strncmp(to, aside.c_str(), aside.size()) == 0) {
      done = true;
      // The replacement: the stale directory goes, a live one takes its place.
      (void)sys::real_calls.renameat(a, from, b, (g_name + ".judged-one").c_str());
      (void)sys::real_calls.mkdirat(a, from, 0777);
      const std::string meta = g_path + "/meta.json";
      const std::string bytes =
          "{\"pid\":" + std::to_string(g_live_pid) + ",\"startedAt\":" + std::to_string(olt::now_ms()) + "}";
      olt::write_file(meta, bytes);
    }
    return sys::real_calls.renameat(a, from, b, to);
  };
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(0);
  o.heartbeat = false;
  auto l = ol::lock::acquire(o);
  say_result(l);
  return 0;
}

// flock PATH N WAIT_MS: a stale lock is at PATH, and "another reclaimer"
// holds its flock for the first N attempts (-1: always). Prints the result.
long g_flock_busy = 0;
int scenario_flock(const std::string& path, char** rest) {
  g_flock_busy = std::atol(rest[0]);
  sys::calls.flock = [](int f, int op) {
    if (g_flock_busy != 0) {
      if (g_flock_busy > 0) --g_flock_busy;
      errno = EWOULDBLOCK;
      return -1;
    }
    return sys::real_calls.flock(f, op);
  };
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(std::atol(rest[1]));
  o.heartbeat = false;
  auto l = ol::lock::acquire(o);
  say_result(l);
  return 0;
}

// heartbeat PATH: holds with a 400 ms TTL (refresh every 100 ms) while every
// refresh fails for 600 ms, then lets them succeed. Prints "held" when the
// lock survived and its meta.json was refreshed after the failures ended.
std::atomic<bool> g_touch_fails{true};
std::atomic<int> g_touches_failed{0};
int scenario_heartbeat(const std::string& path, char**) {
  sys::calls.utimensat = [](int d, const char* n, const struct timespec t[2], int f) {
    if (g_touch_fails) {
      ++g_touches_failed;
      errno = ENOSPC;
      return -1;
    }
    return sys::real_calls.utimensat(d, n, t, f);
  };
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(0);
  o.ttl = ol::milliseconds(400);
  bool lost = false;
  o.on_lost = [&](const ol::error&) { lost = true; };
  auto l = ol::lock::acquire(o);
  if (!l) {
    say_result(l);
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  g_touch_fails = false;
  const std::int64_t failed_at = olt::now_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  struct stat st {};
  ::stat((path + "/meta.json").c_str(), &st);
  const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  std::cout << "failed-touches " << g_touches_failed.load() << std::endl;
  std::cout << (l->still_held() && !lost && mtime >= failed_at ? "held" : "not held") << std::endl;
  return 0;
}

// nospace PATH WAIT_MS: every mkdir fails with ENOSPC; acquires with the
// wait given. Prints the result.
int scenario_nospace(const std::string& path, char** rest) {
  sys::calls.mkdirat = [](int, const char*, mode_t) {
    errno = ENOSPC;
    return -1;
  };
  ol::lock_options o;
  o.path = path;
  o.wait = ol::milliseconds(std::atol(rest[0]));
  o.heartbeat = false;
  say_result(ol::lock::acquire(o));
  return 0;
}

}  // namespace

int child_fault(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string scenario = argv[0], path = argv[1];
  if (scenario == "fail" && argc >= 5) return scenario_fail(path, argv + 2);
  if (scenario == "putback" && argc >= 3) return scenario_putback(path, argv + 2);
  if (scenario == "flock" && argc >= 4) return scenario_flock(path, argv + 2);
  if (scenario == "heartbeat") return scenario_heartbeat(path, argv + 2);
  if (scenario == "nospace" && argc >= 3) return scenario_nospace(path, argv + 2);
  return 2;
}

namespace {

// ---- the test side ----

std::vector<std::string> run_fault(const std::vector<std::string>& args) {
  std::vector<std::string> a = {"--child", "fault"};
  a.insert(a.end(), args.begin(), args.end());
  child c(self_exe(), a);
  std::vector<std::string> lines;
  while (auto line = c.read_line()) lines.push_back(*line);
  REQUIRE(c.wait() == 0);
  return lines;
}

// Names beside the lock other than the lock itself and what the test made.
std::set<std::string> beside(const temp_dir& d) {
  std::set<std::string> out;
  for (fs::directory_iterator it(d.path), end; it != end; ++it) out.insert(it->path().filename().string());
  return out;
}

// A v1 lock of a dead process; returns its pid.
int write_stale_lock(const temp_dir& d) {
  const int pid = dead_pid();
  make_lock(d.lock(), "{\"pid\":" + std::to_string(pid) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
  return pid;
}

}  // namespace

TEST_CASE("a live lock moved aside by a reclaim is put back", "[multiprocess][fault]") {
  temp_dir d;
  write_stale_lock(d);
  auto out = run_fault({"putback", d.lock(), std::to_string(::getpid())});
  REQUIRE(out.size() == 1);
  // The replacement is live (this test's pid): the reclaim put it back and
  // the acquisition found it held.
  CHECK(out[0] == "busy");
  REQUIRE(fs::is_directory(d.lock()));
  CHECK_THAT(read_file(fs::path(d.lock()) / "meta.json"), Catch::Contains("\"pid\":" + std::to_string(::getpid())));
  for (const auto& n : beside(d)) CHECK(n.find(".aside-") == std::string::npos);
}

TEST_CASE("reclaimers serialize on the stale directory's flock", "[multiprocess][fault]") {
  temp_dir d;
  SECTION("while another reclaimer holds it, the stale lock is left to it") {
    const int dead = write_stale_lock(d);
    auto out = run_fault({"flock", d.lock(), "-1", "300"});
    REQUIRE(out.size() == 1);
    CHECK(out[0] == "timed_out");
    // Never removed by this process: the other reclaimer's to remove.
    CHECK_THAT(read_file(fs::path(d.lock()) / "meta.json"), Catch::Contains("\"pid\":" + std::to_string(dead)));
  }
  SECTION("a flock held longer than any reclaim takes delays the reclaim by a second, not forever") {
    write_stale_lock(d);
    const auto began = std::chrono::steady_clock::now();
    auto out = run_fault({"flock", d.lock(), "-1", "5000"});
    const auto took = std::chrono::steady_clock::now() - began;
    REQUIRE(out.size() == 1);
    CHECK(out[0] == "acquired");
    CHECK(took >= std::chrono::milliseconds(1000));
  }
  SECTION("once it lets go, the stale lock is reclaimed") {
    write_stale_lock(d);
    auto out = run_fault({"flock", d.lock(), "2", "5000"});
    REQUIRE(out.size() == 1);
    CHECK(out[0] == "acquired");
  }
}

TEST_CASE("a failing system call at any step of acquire or release leaves nothing behind", "[multiprocess][fault]") {
  struct row {
    const char* call;
    int err;
  };
  const std::vector<row> rows = {
      {"mkdirat", ENOSPC}, {"openat", EMFILE},  {"openat", ENOSPC},   {"write", ENOSPC},
      {"renameat2", ENOSPC}, {"renameat", EMFILE}, {"unlinkat", EIO}, {"fstatat", EMFILE},
      {"fstat", EIO},
  };
  for (const auto& r : rows) {
    for (bool fallback : {false, true}) {
      // Call N of the kind fails, for every N the acquisition and release make.
      for (long nth = 1;; ++nth) {
        INFO(r.call << " fails with " << std::strerror(r.err) << " at call " << nth
                    << (fallback ? " (mkdir fallback)" : ""));
        temp_dir d;
        if (fallback) ::setenv("OFFLOAD_LOCK_NO_RENAMEAT2", "1", 1);
        auto out = run_fault({"fail", d.lock(), r.call, std::to_string(r.err), std::to_string(nth)});
        ::unsetenv("OFFLOAD_LOCK_NO_RENAMEAT2");
        REQUIRE(out.size() >= 2);
        const bool faulted = out.back() == "faulted 1";
        // Either taken and released, or one line naming what failed.
        if (out[0].rfind("error ", 0) == 0) {
          CHECK_THAT(out[0], Catch::Contains(d.str()));
          CHECK_THAT(out[0], Catch::Contains(std::strerror(r.err)));
        } else {
          CHECK(out[0] == "acquired");
          REQUIRE(out.size() == 3);
          if (out[1] != "released") {
            CHECK_THAT(out[1], Catch::Contains(d.str()));
          }
        }
        // The lock is free for the next participant, and whatever the
        // failure left (only ever our own private names) goes with the next
        // acquisition.
        auto next = ol::lock::acquire(d.lock(), ol::milliseconds(0));
        REQUIRE(next);
        CHECK_FALSE(next->release());
        const auto left = beside(d);
        std::string names;
        for (const auto& n : left) names += " " + n;
        INFO("left beside the lock:" << names);
        CHECK(left.empty());
        if (!faulted) break;
        REQUIRE(nth < 64);
      }
    }
  }
}

TEST_CASE("refreshes that fail for a while do not lose the lock", "[multiprocess][fault]") {
  temp_dir d;
  auto out = run_fault({"heartbeat", d.lock()});
  REQUIRE(out.size() == 2);
  CHECK(out[0] != "failed-touches 0");
  CHECK(out[1] == "held");
}

TEST_CASE("out of space while someone else holds the lock: the wait goes on; on a free lock: an error",
          "[multiprocess][fault]") {
  temp_dir d;
  child holder(self_exe(), {"--child", "hold", d.lock(), "0"});
  REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
  // Held: the claim that cannot be made is no reason to stop waiting.
  auto out = run_fault({"nospace", d.lock(), "400"});
  REQUIRE(out.size() == 1);
  CHECK(out[0] == "timed_out");
  holder.close_stdin();
  REQUIRE(holder.wait() == 0);
  // Free: the claim itself failed, and the error names its staging directory.
  out = run_fault({"nospace", d.lock(), "400"});
  REQUIRE(out.size() == 1);
  CHECK_THAT(out[0], Catch::StartsWith("error ") && Catch::Contains("No space left") && Catch::Contains(d.str()));
  CHECK(beside(d).empty());
}
