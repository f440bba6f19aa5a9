// Clocks: a startedAt or an mtime in the future, and the wall clock stepped
// while a waiter waits. Ages are judged on the wall clock, as the Node and
// Go readers judge them, but never shorter than the time a waiter has itself
// watched the lock unchanged on its monotonic clock; waits end on the
// monotonic clock. So no lock is reclaimed early, and no wait outlasts the
// TTL (or the grace) because of a clock. The wall clock of one process is
// stepped through OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE (sys::now_ms).
//
// What a clock bug would do is stretch a wait by a day or end it at once, so
// the checks are: not before the TTL or grace (a lower bound, which a slow
// machine cannot miss, since the waiter starts watching after the test's
// clock starts), and within the wait the call was given (generous: a day's
// stretch ends it as timed out). No upper bound on how soon a busy machine
// gets there.
#include <catch2/catch.hpp>
#include <boost/process.hpp>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

constexpr std::int64_t kDay = 86'400'000;

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("an mtime in the future reclaims nothing early, and a waiter still gets the lock after the TTL", "[multiprocess][clock]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "60");
  const std::int64_t future = now_ms() + kDay;
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(future) + "}");
  set_mtime(fs::path(d.lock()) / "meta.json", future);
  set_mtime(d.lock(), future);
  ol::lock_options o;
  o.path = d.lock();
  o.ttl = 1500ms;

  // Every participant calls it held: the holder lives and the meta is "fresh".
  ol::info i = ol::inspect(d.lock(), o.ttl);
  CHECK(i.held);
  CHECK_FALSE(i.node_stale);
  CHECK(i.go_held);
  o.wait = 0ms;
  auto busy = ol::lock::acquire(o);
  REQUIRE_FALSE(busy);
  CHECK(busy.error() == ol::errc::busy);

  SECTION("acquire") {
    o.wait = 60s;
    auto start = std::chrono::steady_clock::now();
    auto r = ol::lock::acquire(o);
    REQUIRE(r);  // not timed out: the future mtime did not stretch the TTL
    CHECK(seconds_since(start) >= 1.4);
  }
  SECTION("wait_free") {
    auto start = std::chrono::steady_clock::now();
    ol::info after = ol::wait_free(d.lock(), 60s, 1s, o.ttl);
    CHECK_FALSE(after.held);  // free before the 60 s ran out
    CHECK(seconds_since(start) >= 1.4);
    CHECK(fs::exists(d.lock()));  // wait_free reclaims nothing
  }
  sleeper.terminate();
}

TEST_CASE("a directory without meta.json dated in the future is reclaimed after the grace", "[multiprocess][clock]") {
  temp_dir d;
  make_lock(d.lock(), std::nullopt);
  set_mtime(d.lock(), now_ms() + kDay);
  ol::lock_options o;
  o.path = d.lock();
  o.grace = 500ms;
  o.wait = 0ms;
  CHECK_FALSE(ol::lock::acquire(o));
  o.wait = 60s;
  auto start = std::chrono::steady_clock::now();
  auto r = ol::lock::acquire(o);
  REQUIRE(r);  // within the wait: the future mtime did not stretch the grace
  CHECK(seconds_since(start) >= 0.4);
}

TEST_CASE("a startedAt in the future with a live holder is held", "[multiprocess][clock]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "60");
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms() + kDay) + "}");
  ol::info i = ol::inspect(d.lock());
  CHECK(i.held);
  CHECK(i.pid == sleeper.id());
  CHECK(ol::lock::acquire(d.lock(), 0ms).error() == ol::errc::busy);
  auto r = run_cli({"--lock", d.lock(), "status"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("held by"));
  sleeper.terminate();
}

TEST_CASE("the wall clock stepped during a wait: no early reclaim, and the wait ends on time", "[multiprocess][clock]") {
  temp_dir d;
  const fs::path skew = d.path / "skew";
  write_file(skew, "0");
  env_changes env = {{"OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE", skew.string()}};
  auto waiting = [](child& c) {
    return eventually([&] { return c.err_text().find("waiting for") != std::string::npos; });
  };

  SECTION("a live offload-lock holder; the waiter's clock jumps a day ahead, then a day back") {
    auto held = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(held);
    auto start = std::chrono::steady_clock::now();
    child c(cli_exe(), {"--lock", d.lock(), "hold", "--wait", "3s"}, env);
    REQUIRE(waiting(c));
    write_file(skew, std::to_string(kDay));
    REQUIRE(eventually([&] { return seconds_since(start) > 1.2; }));
    write_file(skew, std::to_string(-kDay));
    // Busy when its 3 s ended, on its monotonic clock: neither at once (the
    // day ahead) nor a day later (the day back), which the 60 s bound shows.
    CHECK(c.wait(60s) == 1);
    CHECK(seconds_since(start) >= 2.9);
    CHECK(held->still_held());
  }
  SECTION("a v1 holder that never refreshes; the waiter's clock jumps a day back") {
    boost::process::child sleeper("/bin/sleep", "120");
    make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
    auto start = std::chrono::steady_clock::now();
    // The waiter must be waiting, and the clock stepped, before the meta's
    // age on the wall clock reaches the TTL; else it takes the lock by the
    // plain TTL rule and the step tests nothing. So the TTL is as long as
    // the bound on a command starting up (kPrompt), not a guess at how fast
    // a loaded machine starts one.
    const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(kPrompt);
    child c(cli_exe(), {"--lock", d.lock(), "--ttl", std::to_string(ttl.count()) + "s", "hold", "--wait", "120s"}, env);
    REQUIRE(waiting(c));
    write_file(skew, std::to_string(-kDay));
    // Its meta.json now reads as written a day ahead; the waiter's own
    // clock still runs the TTL out, well within the wait.
    auto line = c.read_line(150s);
    REQUIRE(line);
    CHECK_THAT(*line, Catch::StartsWith("acquired "));
    CHECK(seconds_since(start) >= static_cast<double>(ttl.count()) - 0.1);
    sleeper.terminate();
  }
}
