// Waiting without polling and the cases around it: threads of one process
// (B10), child processes started under the lock (B11), the fallback where
// inotify and pidfd are unavailable (B9), and holders learning of a loss.
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>

#include "offload_lock/lock.hpp"
#include "offload_lock/mutex.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

// A thread of this process is asleep in the kernel: in poll() on its own
// wake pipe (and the cancel descriptors), the in-process queue's wait.
bool thread_asleep_in_queue(long tid) {
  std::string base = "/proc/self/task/" + std::to_string(tid);
  std::string stat = read_file(base + "/stat");
  auto close = stat.rfind(')');
  const std::string wchan = read_file(base + "/wchan");
  return close != std::string::npos && stat.compare(close + 2, 1, "S") == 0 &&
         wchan.find("poll") != std::string::npos;
}

long voluntary_switches(long tid) {
  std::string s = read_file("/proc/self/task/" + std::to_string(tid) + "/status");
  auto p = s.find("voluntary_ctxt_switches:");
  return std::stol(s.substr(p + 24));
}

int entries_in(const fs::path& dir) {
  int n = 0;
  for (fs::directory_iterator it(dir), end; it != end; ++it) ++n;
  return n;
}

}  // namespace

TEST_CASE("threads of one process queue in arrival order, without file claims or polling (B10)", "[multiprocess][threads]") {
  temp_dir d;
  auto holder = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(holder);
  constexpr int kThreads = 4;
  std::mutex order_mu;
  std::vector<int> order;
  std::atomic<int> inside{0}, max_inside{0};
  std::vector<std::atomic<long>> tids(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      tids[i] = ::syscall(SYS_gettid);
      auto l = ol::lock::acquire(d.lock(), 60s);
      if (!l) return;
      int now = ++inside;
      max_inside = std::max(max_inside.load(), now);
      {
        std::lock_guard<std::mutex> g(order_mu);
        order.push_back(i);
      }
      --inside;
    });
    // The next thread starts only once this one is asleep in the queue.
    REQUIRE(eventually([&] { return tids[i] != 0 && thread_asleep_in_queue(tids[i]); }));
  }
  // While they wait: one lock directory in the parent and nothing else (no
  // staging directories from second claims), and no wakeups.
  long before = voluntary_switches(tids[0]);
  std::this_thread::sleep_for(500ms);  // an interval to count wakeups over, not a synchronisation
  CHECK(voluntary_switches(tids[0]) - before <= 1);
  CHECK(entries_in(d.path) == 1);
  REQUIRE(!holder->release());
  for (auto& t : threads) t.join();
  CHECK(order == std::vector<int>{0, 1, 2, 3});
  CHECK(max_inside == 1);
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("a thread times out in the in-process queue like anywhere else", "[multiprocess][threads]") {
  temp_dir d;
  auto holder = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(holder);
  std::thread t([&] {
    auto busy = ol::lock::acquire(d.lock(), 0ms);
    CHECK(!busy);
    if (!busy) CHECK(busy.error() == ol::errc::busy);
    auto late = ol::lock::acquire(d.lock(), 200ms);
    CHECK(!late);
    if (!late) CHECK(late.error() == ol::errc::timed_out);
  });
  t.join();
  REQUIRE(!holder->release());
  // The queue is empty again: the next acquisition is immediate.
  CHECK(ol::lock::acquire(d.lock(), 0ms));
}

TEST_CASE("a nested acquisition on the holding thread passes through; the outermost releases", "[multiprocess][threads]") {
  temp_dir d;
  auto outer = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(outer);
  CHECK_FALSE(outer->nested());
  {
    auto inner = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(inner);
    CHECK(inner->nested());
    auto innermost = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(innermost);
    CHECK(!innermost->release());
  }  // inner's destructor
  CHECK(outer->still_held());
  CHECK(fs::exists(fs::path(d.lock()) / "meta.json"));
  CHECK(!outer->release());
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("a child process started under the lock passes straight through (B11)", "[multiprocess][children]") {
  temp_dir d;
  auto parent = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(parent);
  env_changes env;
  for (const auto& [k, v] : parent->child_environment()) env[k] = v;
  SECTION("with the parent's token: through at once, and its release leaves the parent's lock") {
    child c(self_exe(), {"--child", "hold", d.lock(), "0"}, env);
    auto line = c.read_line();
    REQUIRE(line);
    CHECK(*line == "acquired 0 " + parent->token());
    c.write_line("release");
    CHECK(c.read_line() == std::string("released"));
    c.close_stdin();
    CHECK(c.wait() == 0);
    CHECK(parent->still_held());
  }
  SECTION("without it: a child waits like anyone else") {
    child c(self_exe(), {"--child", "hold", d.lock(), "0"},
            {{"OFFLOAD_LOCK_TOKEN", std::nullopt}, {"OFFLOAD_LOCK_PATH", std::nullopt}});
    CHECK(c.read_line() == std::string("busy"));
  }
  SECTION("a token that does not match the current holder does not pass") {
    env["OFFLOAD_LOCK_TOKEN"] = "0123456789abcdef";
    child c(self_exe(), {"--child", "hold", d.lock(), "0"}, env);
    CHECK(c.read_line() == std::string("busy"));
  }
  SECTION("another lock's path does not pass") {
    temp_dir other;
    child c(self_exe(), {"--child", "hold", other.lock(), "0"}, env);
    auto line = c.read_line();
    REQUIRE(line);
    CHECK(line->rfind("acquired " + std::to_string(c.pid()), 0) == 0);
  }
}

TEST_CASE("cli: commands inside offload-lock run pass through and leave the run's lock", "[cli][children]") {
  temp_dir d;
  const std::string cli = cli_exe() + " --lock " + d.lock();
  const std::string script =
      "set -e; tok=$(" + cli + " acquire --wait 0); test \"$tok\" = \"$OFFLOAD_LOCK_TOKEN\"; " + cli +
      " release; " + cli + " run --wait 0 -- true; echo hold | " + cli + " hold --wait 0 >/dev/null; " + cli +
      " --json status";
  auto r = run_cli({"--lock", d.lock(), "--quiet", "run", "--", "sh", "-c", script});
  INFO(r.err);
  CHECK(r.code == 0);
  // After all of that, the outer run still held the lock, recorded as CMD's pid.
  CHECK_THAT(r.out, Catch::Contains("\"held\":true"));
  CHECK_THAT(r.err, Catch::Contains("passing through"));
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("without inotify and pidfd, waiting falls back to a slow re-check and still works", "[multiprocess][fallback]") {
  temp_dir d;
  env_changes no_events = {{"OFFLOAD_LOCK_NO_INOTIFY", std::string("1")}, {"OFFLOAD_LOCK_NO_PIDFD", std::string("1")}};
  for (bool crash : {false, true}) {
    auto first = std::make_unique<child>(self_exe(), std::vector<std::string>{"--child", "hold", d.lock(), "-1"});
    REQUIRE(first->read_line());
    child second(self_exe(), {"--child", "hold", d.lock(), "-1"}, no_events);
    CHECK_FALSE(second.read_line(300ms));
    if (crash) first->kill(SIGKILL);
    else first->write_line("release");
    auto got = second.read_line();
    REQUIRE(got);
    CHECK(got->rfind("acquired " + std::to_string(second.pid()), 0) == 0);
    second.write_line("release");
    CHECK(second.read_line() == std::string("released"));
  }
}

TEST_CASE("a waiter wakes on a release at once, not at a poll", "[multiprocess]") {
  temp_dir d;
  auto holder = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(holder);
  child waiter(cli_exe(), {"--lock", d.lock(), "--quiet", "run", "--", "echo", "mine"});
  CHECK_FALSE(waiter.read_line(300ms));
  auto released = std::chrono::steady_clock::now();
  REQUIRE(!holder->release());
  CHECK(waiter.read_line() == std::string("mine"));
  CHECK(std::chrono::steady_clock::now() - released < 900ms);
}

TEST_CASE("cli: run --on-lost term stops CMD when its lock is taken away; warn only says so", "[cli]") {
  temp_dir d;
  const std::string loop = "trap 'exit 9' TERM; echo ready; while :; do sleep 0.05; done";
  SECTION("term") {
    child c(cli_exe(), {"--lock", d.lock(), "run", "--on-lost", "term", "--", "sh", "-c", loop});
    REQUIRE(c.read_line() == std::string("ready"));
    fs::remove_all(d.lock());  // what a v1 runner's rm -rf does
    CHECK(c.wait() == 9);
    CHECK_THAT(c.err_text(), Catch::Contains("WARNING") && Catch::Contains("SIGTERM"));
  }
  SECTION("warn") {
    child c(cli_exe(), {"--lock", d.lock(), "run", "--on-lost", "warn", "--", "sh", "-c", loop});
    REQUIRE(c.read_line() == std::string("ready"));
    fs::remove_all(d.lock());
    REQUIRE(eventually([&] { return c.err_text().find("WARNING") != std::string::npos; }));
    CHECK_FALSE(c.wait(200ms));  // CMD goes on
    c.kill(SIGTERM);
    CHECK(c.wait() == 9);
  }
}

TEST_CASE("gpu_mutex works with std::lock_guard and std::unique_lock across threads", "[multiprocess][threads]") {
  temp_dir d;
  ol::lock_options o;
  o.path = d.lock();
  ol::gpu_mutex gpu(o);
  std::atomic<int> inside{0}, max_inside{0}, rounds{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        std::lock_guard<ol::gpu_mutex> g(gpu);
        int now = ++inside;
        max_inside = std::max(max_inside.load(), now);
        CHECK(fs::exists(fs::path(d.lock()) / "meta.json"));
        ++rounds;
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(rounds == 60);
  CHECK(max_inside == 1);
  CHECK_FALSE(fs::exists(d.lock()));

  // try_lock: false while another process holds it.
  child other(self_exe(), {"--child", "hold", d.lock(), "-1"});
  REQUIRE(other.read_line());
  std::unique_lock<ol::gpu_mutex> u(gpu, std::try_to_lock);
  CHECK_FALSE(u.owns_lock());
  other.write_line("release");
  REQUIRE(other.read_line() == std::string("released"));
  CHECK(u.try_lock());
  CHECK(ol::inspect(d.lock()).pid == ::getpid());
  u.unlock();
  CHECK_FALSE(fs::exists(d.lock()));

  // A failure other than contention is an exception with the path in it.
  ol::lock_options bad;
  bad.path = (d.path / "no" / "parent" / "x.lock").string();
  ol::gpu_mutex missing(bad);
  CHECK_THROWS_AS(missing.lock(), std::system_error);
}

TEST_CASE("a thread started after the holding thread ended does not pass through as nested (B10)", "[multiprocess][threads]") {
  temp_dir d;
  // Taken on a thread that then ends; the lock object lives on here.
  ol::lock held;
  std::thread([&] {
    auto l = ol::lock::acquire(d.lock(), 0ms);
    if (l) held = std::move(*l);
  }).join();
  REQUIRE(held.owns());
  // New threads often get an ended thread's id back; none may share the lock.
  for (int i = 0; i < 20; ++i) {
    bool nested = false, busy = false;
    std::thread([&] {
      auto l = ol::lock::acquire(d.lock(), 0ms);
      nested = l && l->nested();
      busy = !l && l.error() == ol::errc::busy;
    }).join();
    REQUIRE_FALSE(nested);
    REQUIRE(busy);
  }
  REQUIRE_FALSE(held.release());
}

TEST_CASE("a child forked while another thread acquires can take a lock (no mutex copied locked)", "[multiprocess][threads]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // AddressSanitizer's own allocator (GCC 12) does not guard its locks around
  // fork, so a child of a threaded parent can hang inside malloc itself; and
  // under ThreadSanitizer the library leaves its fork handlers out.
  OLT_NOT_RUN("not under a sanitizer: see the comment");
#endif
  temp_dir d;
  const std::string busy_lock = d.lock(), child_lock = (d.path / "child.lock").string();
  // Once here first, so the library's one-time initialisations (host name,
  // boot id, ...) are done before any fork.
  REQUIRE_FALSE(ol::lock::acquire(child_lock, 0ms)->release());
  // One thread acquires and releases without pause: it keeps taking the
  // library's process-wide mutexes while the main thread forks.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      auto l = ol::lock::acquire(busy_lock, 0ms);
    }
  });
  int hung = 0, failed = 0, forks = 0;
  // Up to 4000 forks, but no longer than 30 s: a loaded machine forks
  // slowly, and a mutex copied locked shows within a few hundred.
  const auto until = std::chrono::steady_clock::now() + 30s;
  for (int i = 0; i < 4000 && std::chrono::steady_clock::now() < until; ++i, ++forks) {
    pid_t p = ::fork();
    if (p == 0) {
      ol::lock_options o;
      o.path = child_lock;
      o.wait = 0ms;
      o.heartbeat = false;  // no new thread in a child forked from a threaded parent
      auto l = ol::lock::acquire(o);
      ::_exit(l && !l->release() ? 0 : 1);
    }
    if (p < 0) break;
    int st = 0;
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (::waitpid(p, &st, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        ++hung;
        ::kill(p, SIGKILL);
        ::waitpid(p, &st, 0);
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    if (!hung && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) ++failed;
  }
  stop = true;
  churn.join();
  CHECK(forks >= 100);
  CHECK(hung == 0);
  CHECK(failed == 0);
}
