// The maximum hold with real processes: a hung CMD killed and its lock
// handed on, a CMD that ends on SIGTERM, one that ends in time untouched,
// what meta.json and status say, hold and acquire, bad values, the
// library's callback.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "offload_lock/history.hpp"
#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

using namespace olt;
namespace ol = offload_lock;

namespace {

constexpr int kMaxHoldExit = 124;

nlohmann::json status_json(const temp_dir& d) {
  auto r = run_cli(with_lock(d, {"--json", "status"}));
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

bool held(const temp_dir& d) { return run_cli(with_lock(d, {"status"})).code == 0; }

std::string text_of(const std::string& path) { return fs::exists(path) ? read_file(path) : std::string(); }

bool history_has(const temp_dir& d, const std::string& outcome) {
  bool found = false;
  (void)ol::read_history(d.lock(), 0, [&](const ol::history_entry& e) {
    if (e.event == "hold" && e.outcome == outcome) found = true;
  });
  return found;
}

}  // namespace

TEST_CASE("a hung job is killed at its maximum hold and a waiter gets the lock", "[multiprocess][maxhold]") {
  temp_dir d;
  REQUIRE(run_cli(with_lock(d, {"history", "--start"})).code == 0);
  // TERM ignored, and still ignored in the sleep the shell becomes: only
  // SIGKILL ends it.
  child job(cli_exe(), with_lock(d, {"run", "--label", "hung", "--max-hold", "2s", "--max-hold-grace", "1s", "--",
                                     "sh", "-c", "trap '' TERM; exec sleep 600"}));
  REQUIRE(eventually([&] { return status_json(d)["label"] == "hung"; }));
  child waiter(cli_exe(), with_lock(d, {"run", "--wait", "60", "--label", "next", "--", "sh", "-c", "echo got it"}));
  CHECK(waiter.read_line(60s) == std::optional<std::string>("got it"));
  CHECK(waiter.wait(30s) == std::optional<int>(0));
  REQUIRE(job.wait(30s) == std::optional<int>(kMaxHoldExit));
  const std::string err = job.err_text();
  CHECK_THAT(err, Catch::Contains("past its maximum hold of 2s") && Catch::Contains("by SIGKILL"));
  CHECK_FALSE(held(d));
  CHECK(eventually([&] { return history_has(d, "max-hold"); }));
}

TEST_CASE("a job that ends on SIGTERM at its maximum hold is not killed", "[multiprocess][maxhold]") {
  temp_dir d;
  const std::string log = (d.path / "signals").string();
  // The yield signal first, at the maximum hold; SIGTERM a grace later,
  // on which the job ends by itself.
  const std::string script = "trap 'echo usr1 >> " + log + "' USR1; trap 'echo term >> " + log +
                             "; exit 0' TERM; while :; do sleep 0.2; done";
  child job(cli_exe(), with_lock(d, {"run", "--max-hold", "1s", "--max-hold-grace", "3s", "--yield-signal", "USR1",
                                     "--", "sh", "-c", script}));
  REQUIRE(job.wait(60s) == std::optional<int>(kMaxHoldExit));
  CHECK(text_of(log) == "usr1\nterm\n");
  const std::string err = job.err_text();
  CHECK_THAT(err, Catch::Contains("maximum hold of 1s") && Catch::Contains("on SIGTERM"));
  CHECK_THAT(err, !Catch::Contains("SIGKILL"));
  CHECK_FALSE(held(d));
}

TEST_CASE("a job that ends before its maximum hold is not touched", "[multiprocess][maxhold]") {
  temp_dir d;
  const std::string log = (d.path / "signals").string();
  auto r = run_cli(with_lock(d, {"run", "--max-hold", "1h", "--max-hold-grace", "0", "--yield-signal", "USR1", "--",
                                 "sh", "-c", "trap 'echo usr1 >> " + log + "' USR1; exit 3"}));
  CHECK(r.code == 3);
  CHECK(r.err.find("maximum hold") == std::string::npos);
  CHECK(text_of(log).empty());
}

TEST_CASE("meta.json and status carry the maximum hold", "[multiprocess][maxhold]") {
  temp_dir d;
  child h(cli_exe(), with_lock(d, {"hold", "--max-hold", "1h"}));
  auto line = h.read_line();
  REQUIRE(line);
  CHECK_THAT(read_file(fs::path(d.lock()) / "meta.json"), Catch::Contains("\"maxHoldMs\":3600000"));
  auto j = status_json(d);
  CHECK(j["maxHoldMs"] == 3600000);
  REQUIRE(j["maxHoldInMs"].is_number_integer());
  CHECK(j["maxHoldInMs"].get<std::int64_t>() > 0);
  CHECK(j["maxHoldInMs"].get<std::int64_t>() <= 3600000);
  CHECK(j["slots"][0]["maxHoldMs"] == 3600000);
  CHECK(j.contains("expectMs"));
  CHECK(j.contains("freeInMs"));
  CHECK_THAT(run_cli(with_lock(d, {"status"})).out, Catch::Contains("max hold in "));
  h.close_stdin();
  CHECK(h.wait() == std::optional<int>(0));

  // Without one: not in meta.json, null in status.
  child plain(cli_exe(), with_lock(d, {"hold"}));
  REQUIRE(plain.read_line());
  CHECK(read_file(fs::path(d.lock()) / "meta.json").find("maxHoldMs") == std::string::npos);
  j = status_json(d);
  CHECK(j["maxHoldMs"].is_null());
  CHECK(j["maxHoldInMs"].is_null());
  CHECK(run_cli(with_lock(d, {"status"})).out.find("max hold") == std::string::npos);
  plain.close_stdin();
  CHECK(plain.wait() == std::optional<int>(0));
}

TEST_CASE("hold releases at its maximum hold; acquire's is only shown", "[multiprocess][maxhold]") {
  temp_dir d;
  child h(cli_exe(), with_lock(d, {"hold", "--max-hold", "1s"}));
  REQUIRE(h.read_line());
  REQUIRE(h.wait(30s) == std::optional<int>(kMaxHoldExit));
  CHECK_THAT(h.err_text(), Catch::Contains("maximum hold of 1s"));
  CHECK_FALSE(held(d));

  // acquire: recorded, shown once passed, and nothing ended.
  auto a = run_cli(with_lock(d, {"acquire", "--pid", std::to_string(::getpid()), "--max-hold", "1s"}));
  REQUIRE(a.code == 0);
  const std::string token = a.out.substr(0, a.out.find('\n'));
  CHECK(eventually([&] { return run_cli(with_lock(d, {"status"})).out.find("max hold passed") != std::string::npos; }));
  CHECK(status_json(d)["maxHoldInMs"].get<std::int64_t>() < 0);
  CHECK(held(d));
  CHECK(run_cli(with_lock(d, {"release", "--token", token})).code == 0);
}

TEST_CASE("a maximum hold that is not a duration above 0 is a usage error", "[multiprocess][maxhold]") {
  temp_dir d;
  for (const auto& cmd : std::vector<std::vector<std::string>>{{"run", "--max-hold", "0", "--", "true"},
                                                                {"run", "--max-hold", "soon", "--", "true"},
                                                                {"hold", "--max-hold", "0"},
                                                                {"acquire", "--max-hold=soon"},
                                                                {"run", "--max-hold-grace", "soon", "--", "true"}}) {
    INFO(cmd[0] + " " + cmd[1]);
    auto r = run_cli(with_lock(d, cmd));
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_THAT(r.err, Catch::Contains("--max-hold"));
  }
  CHECK_FALSE(held(d));
}

TEST_CASE("the library's on_yield_request is called once when the maximum hold passes", "[multiprocess][maxhold]") {
  temp_dir d;
  std::atomic<int> asked{0};
  std::mutex mu;
  ol::yield_request seen{-1, "", -1};
  ol::lock_options o;
  o.path = d.lock();
  o.max_hold = 500ms;
  o.on_yield_request = [&](const ol::yield_request& r) {
    std::lock_guard<std::mutex> g(mu);
    seen = r;
    ++asked;
  };
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  CHECK_THAT(l->meta_json(), Catch::Contains("\"maxHoldMs\":500"));
  REQUIRE(eventually([&] { return asked.load() == 1; }));
  CHECK(l->max_hold_passed());
  CHECK(l->yield_requested());
  {
    std::lock_guard<std::mutex> g(mu);
    CHECK(seen.pid == 0);
    CHECK(seen.label == "max hold");
    CHECK(seen.reason == "max hold");
  }
  // Once per hold: nothing more however long it is kept.
  std::this_thread::sleep_for(1s);
  CHECK(asked.load() == 1);
  CHECK_FALSE(l->release());

  // Without a maximum hold: never called, never passed.
  o.max_hold = 0ms;
  auto p = ol::lock::acquire(o);
  REQUIRE(p);
  std::this_thread::sleep_for(700ms);
  CHECK(asked.load() == 1);
  CHECK_FALSE(p->max_hold_passed());
  CHECK(p->meta_json().find("maxHoldMs") == std::string::npos);
  CHECK_FALSE(p->release());
}
