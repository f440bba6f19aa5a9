// What a waiting or refused command tells its caller: the JSON progress
// stream counting freeInMs down, the waiting line's place and ETA, `acquire
// --json` printing one object whatever the outcome, `wait-free --within`
// saying why it exits 1, and the pipeline warning off a terminal.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <csignal>
#include <regex>
#include <sstream>

#include "offload_lock/lock.hpp"
#include "support.hpp"

using namespace olt;
namespace ol = offload_lock;
using json = nlohmann::json;

namespace {

// A holder that declared how long it will hold the lock.
struct expecting_holder {
  child c;
  explicit expecting_holder(const temp_dir& d, const std::string& expect = "20m")
      : c(cli_exe(), with_lock(d, {"hold", "--wait", "0", "--label", "render", "--expect", expect})) {
    auto line = c.read_line();
    REQUIRE(line);
    REQUIRE(line->rfind("acquired ", 0) == 0);
  }
  ~expecting_holder() {
    c.close_stdin();
    (void)c.wait();
  }
};

std::vector<json> json_lines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
  return out;
}

}  // namespace

TEST_CASE("progress: freeInMs counts down while heldForMs counts up", "[cli][progress]") {
  temp_dir d;
  expecting_holder h(d, "10m");
  // Reports every 100 ms for the 1.5 s the wait lasts; the wait then times out.
  child w(cli_exe(), with_lock(d, {"--json", "hold", "--wait", "1500ms", "--remind", "100ms"}));
  REQUIRE(w.wait(30s) == 1);
  auto events = json_lines(w.err_text());
  REQUIRE(events.size() >= 3);
  const json& first = events.front()["holders"][0];
  const json& last = events.back()["holders"][0];
  CHECK(last["heldForMs"].get<std::int64_t>() > first["heldForMs"].get<std::int64_t>());
  CHECK(last["freeInMs"].get<std::int64_t>() < first["freeInMs"].get<std::int64_t>());
  for (const auto& e : events) {
    const json& hj = e["holders"][0];
    CHECK(hj["expectMs"] == 600000);
    CHECK(hj["freeInMs"].get<std::int64_t>() + hj["heldForMs"].get<std::int64_t>() == 600000);
    CHECK(e.contains("etaMs"));
  }
}

TEST_CASE("progress: the waiting line says the place in line and the ETA", "[cli][progress]") {
  temp_dir d;
  expecting_holder h(d, "20m");
  // First in line: a run that declared 5 minutes.
  child first(cli_exe(), with_lock(d, {"--quiet", "run", "--expect", "5m", "--label", "first", "--", "true"}));
  REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == 1; }));
  // Second: its log lines (stderr is not a terminal) name its place: behind
  // the holder's ~20m and the first waiter's 5m.
  child second(cli_exe(), with_lock(d, {"hold", "--wait", "1s", "--remind", "100ms", "--label", "second"}));
  REQUIRE(second.wait(30s) == 1);
  const std::string err = second.err_text();
  CHECK(std::regex_search(err, std::regex("waiting for render \\(pid [0-9]+[^)]*\\), held for [0-9]+m?s?[^;]*; "
                                          "#2 in line, ETA ~2[45]m")));
  CHECK_THAT(err, Catch::Contains("timed out: " + d.lock() + " is held by render (pid "));
  first.kill(SIGTERM);
  (void)first.wait();
}

TEST_CASE("acquire --json prints one object whatever the outcome", "[cli][json]") {
  temp_dir d;
  {
    expecting_holder h(d);
    auto r = run_cli(with_lock(d, {"--json", "acquire", "--wait", "0"}));
    CHECK(r.code == 1);
    auto j = json::parse(r.out);  // exactly one object on stdout
    CHECK(j["acquired"] == false);
    CHECK(j["outcome"] == "busy");
    CHECK(j["exitCode"] == 1);
    CHECK(j["holder"]["label"] == "render");
    CHECK(j["holder"]["pid"] == h.c.pid());
    CHECK_THAT(j["message"].get<std::string>(), Catch::StartsWith("busy: " + d.lock() + " is held by render (pid "));
    // Timed out, the same shape.
    r = run_cli(with_lock(d, {"--json", "acquire", "--wait", "100ms"}));
    CHECK(r.code == 1);
    CHECK(json::parse(r.out)["outcome"] == "timed_out");
  }
  // A system error: an object too, with the exit code it ends with.
  auto r = run_cli({"--json", "--lock", (d.path / "no" / "parent" / "gpu.lock").string(), "acquire", "--wait", "0"});
  CHECK(r.code == 4);
  auto j = json::parse(r.out);
  CHECK(j["outcome"] == "error");
  CHECK(j["exitCode"] == 4);
  CHECK(j["holder"].is_null());
  CHECK_THAT(j["message"].get<std::string>(), Catch::Contains("no/parent"));
}

TEST_CASE("wait-free says why it exits 1, and --json carries freeInMs and expectMs", "[cli][wait-free]") {
  temp_dir d;
  expecting_holder h(d, "20m");
  // Will be too long: answered at once, with the reason.
  auto r = run_cli(with_lock(d, {"wait-free", "--within", "90s"}));
  CHECK(r.code == 1);
  CHECK(std::regex_search(r.err, std::regex("^offload-lock: not free within 1m30s: " + d.lock() +
                                            " is held by render \\(pid [0-9]+[^)]*\\) for [^ ]+ and expects to be "
                                            "free in ~19m[0-9]{2}s\n$")));
  r = run_cli(with_lock(d, {"--json", "wait-free", "--within", "90s"}));
  CHECK(r.code == 1);
  auto j = json::parse(r.out);
  CHECK(j["held"] == true);
  CHECK(j["expectMs"] == 1200000);
  CHECK(j["freeInMs"].get<std::int64_t>() > 1'100'000);
  CHECK(j["tooLong"] == true);
  // The wait ran out: another reason.
  r = run_cli(with_lock(d, {"wait-free", "--wait", "100ms"}));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("offload-lock: timed out: " + d.lock() + " is held by render (pid "));
  r = run_cli(with_lock(d, {"--json", "wait-free", "--wait", "100ms"}));
  CHECK(json::parse(r.out)["tooLong"] == false);
  // -q: the exit code alone.
  r = run_cli(with_lock(d, {"-q", "wait-free", "--within", "90s"}));
  CHECK(r.code == 1);
  CHECK(r.err.empty());
}

TEST_CASE("the pipeline warning reaches a log file, not only a terminal", "[cli]") {
  temp_dir d;
  const std::string bin = "'" + cli_exe() + "' --lock '" + d.lock() + "'";
  // As cron or CI runs it: stderr a file. (A pipe gets no warning: its
  // reader would wait for the keeper to close it.)
  const fs::path log = d.path / "job.log";
  write_file(d.path / "job.sh", "tok=$(" + bin + " acquire | tr -d ' '); echo \"tok=$tok\"\n");
  child job("/bin/sh", {"-c", "sh '" + (d.path / "job.sh").string() + "' 2>'" + log.string() + "'"});
  REQUIRE(job.wait(30s) == 0);
  // The keeper writes it once the recorded holder (the subshell) has exited.
  CHECK(eventually([&] { return read_file(log).find("exited within a second of acquire") != std::string::npos; }));
  CHECK_THAT(read_file(log), Catch::Contains("WARNING: the recorded holder, pid "));
  CHECK(eventually([&] { return !ol::inspect(d.lock()).held; }));
}
