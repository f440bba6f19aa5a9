// GPU_LOCK shared by both protocols (doc/protocol-gpulease.md, "GPU_LOCK
// shared by both"): one directory is the v1 lock and gpulease's lease
// directory. The offload-lock command, the gpulease stand-in and the v1
// reference runner, real processes in one directory, real SIGKILLs.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "lease_support.hpp"

using namespace olt;

namespace {

// A site whose GPU_LOCK is the lock and the lease directory at once, where
// gpulease has acquired before (its counter is beside the directory).
struct shared_site {
  temp_dir d;
  fs::path dir = d.path / "gpu.lock";
  fs::path claim = dir / "meta.json";
  env_changes env{{"GPU_LOCK", dir.string()},          {"OFFLOAD_LOCK_LEASE_ROOT", std::nullopt},
                  {"LOCAL_OFFLOAD_STATE_DIR", std::nullopt}, {"GPU_LEASE_DIR", std::nullopt},
                  {"GPU_LEASE_EPOCH", std::nullopt},   {"GPU_LEASE_CLASS", std::nullopt}};
  shared_site() {
    // One gpulease acquisition, as on any site running it: the counter, and
    // the directory left as its container.
    child g(standin_exe(), {"hold", "-for", "1ms"}, env);
    REQUIRE(g.wait() == std::optional<int>(0));
    REQUIRE(fs::exists(d.path / "epoch"));
    REQUIRE(fs::is_directory(dir));
  }
  // What the stand-in, as one of gpulease's readers, reports (one JSON line).
  std::string standin_view() {
    child c(standin_exe(), {"inspect"}, env);
    auto l = c.read_line();
    c.wait();
    return l.value_or("");
  }
  // The v1 reference runner (Node's gpu-lock.mjs as upstream wrote it).
  std::vector<std::string> runner(std::vector<std::string> args) {
    args.insert(args.begin(), {std::string(OFFLOAD_LOCK_SOURCE_DIR) + "/tests/interop/reference/runner.mjs"});
    args.insert(args.begin() + 2, {"--lock", dir.string()});
    return args;
  }
  nlohmann::json claim_json() { return nlohmann::json::parse(read_file(claim)); }
};

}  // namespace

TEST_CASE("lease shared: an offload-lock holder is held for gpulease, v1 runners and Go readers, and its release "
          "leaves gpulease's files and the directory",
          "[multiprocess][lease]") {
  shared_site s;
  // gpulease's leftovers of past leases: never offload-lock's to remove.
  write_file(s.dir / "hb.1", "1");
  write_file(s.dir / "unloaded.1", "1");
  child h(cli_exe(), {"hold", "--label", "shared"}, s.env);
  REQUIRE(line_starting(h, "acquired").size() > 0);
  const std::string bytes = read_file(s.claim);
  INFO(bytes);
  const auto j = s.claim_json();
  // One record for both: v1's first two keys, then a complete claim.
  CHECK(bytes.rfind("{\"pid\":" + std::to_string(h.pid()) + ",\"startedAt\":", 0) == 0);
  const auto epoch = j["epoch"].get<std::uint64_t>();
  CHECK(epoch >= 2);
  CHECK(j["holder"]["pid"].get<long>() == h.pid());
  CHECK(j["origin"] == "offload-lock");
  CHECK(j["class"] == "media");
  // gpulease's readers and acquirers see it held, and leave it alone.
  CHECK_THAT(s.standin_view(), Catch::Contains("\"held\":true") &&
                                   Catch::Contains("\"pid\":" + std::to_string(h.pid())));
  child g(standin_exe(), {"hold", "-wait", "0s"}, s.env);
  CHECK(g.wait() == std::optional<int>(1));
  // So do v1 runners and Go readers.
  child busy(OFFLOAD_LOCK_NODE, s.runner({"hold", "--wait-ms", "0"}), s.env);
  CHECK(busy.read_line(30s) == std::optional<std::string>("busy"));
  CHECK(busy.wait(30s) == std::optional<int>(1));
  child look(OFFLOAD_LOCK_NODE, s.runner({"inspect"}), s.env);
  CHECK_THAT(look.read_line(30s).value_or(""), Catch::Contains("\"stale\":false"));
  look.wait(30s);
  // offload-lock's own view: held, and held for the v1 runners too.
  auto status = run_cli({"--json", "status"}, s.env);
  INFO(status.out);
  CHECK_THAT(status.out, Catch::Contains("\"held\":true") && Catch::Contains("\"v1Stale\":null"));
  CHECK(read_file(s.claim) == bytes);
  // The heartbeat gpulease reads, under the lease's epoch.
  const fs::path hb = s.dir / ("hb." + std::to_string(epoch));

  h.close_stdin();
  CHECK(h.wait() == std::optional<int>(0));
  CHECK_FALSE(fs::exists(s.claim));
  CHECK_FALSE(fs::exists(hb));
  CHECK(fs::is_directory(s.dir));
  CHECK(fs::exists(s.dir / "hb.1"));
  CHECK(fs::exists(s.dir / "unloaded.1"));
  CHECK_THAT(s.standin_view(), Catch::Contains("\"held\":false"));
  // The empty container is no lock to offload-lock's views either: free,
  // not a stale lock of nobody.
  auto after = run_cli({"status"}, s.env);
  INFO(after.out);
  CHECK(after.out.rfind("free\n", 0) == 0);
  // The container, emptied, is free at once for the next of either kind.
  CHECK(run_cli({"run", "--wait", "0", "--", "true"}, s.env).code == 0);
  child g2(standin_exe(), {"hold", "-for", "1ms"}, s.env);
  CHECK(g2.wait() == std::optional<int>(0));
}

TEST_CASE("lease shared: a gpulease holder makes offload-lock wait without touching its claim, and a SIGKILLed one is "
          "taken over, its claim alone",
          "[multiprocess][lease]") {
  shared_site s;
  child g(standin_exe(), {"hold", "-renew", "200ms", "-reason", "stand-in"}, s.env);
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string bytes = read_file(s.claim);
  auto busy = run_cli({"run", "--wait", "0", "--", "true"}, s.env);
  INFO(busy.out << busy.err);
  CHECK(busy.code == 1);
  CHECK_THAT(busy.err, Catch::Contains(std::to_string(g.pid())));
  child ours(cli_exe(), {"run", "--", "sh", "-c", "echo inside"}, s.env);
  // Waiting: the stand-in keeps renewing its own claim, untouched.
  CHECK(line_starting(g, "renewed", 30s).size() > 0);
  CHECK(line_starting(g, "renewed", 30s).size() > 0);
  CHECK_FALSE(ours.exited());
  CHECK(read_file(s.claim) == bytes);
  const std::string its_hb = "hb." + field(got, 2);
  REQUIRE(fs::exists(s.dir / its_hb));
  // A render under its lease elected an unloader: gpulease's marker.
  const std::string its_unloaded = "unloaded." + field(got, 2);
  write_file(s.dir / its_unloaded, std::to_string(g.pid()));
  // Named as gpulease's holder, and never released by its pid from here.
  auto by_pid = run_cli({"release", "--pid", std::to_string(g.pid())}, s.env);
  CHECK(by_pid.code != 0);
  CHECK(read_file(s.claim) == bytes);
  const auto killed = std::chrono::steady_clock::now();
  g.kill(SIGKILL);
  g.wait();
  CHECK(ours.read_line(30s) == std::optional<std::string>("inside"));
  WARN("takeover of a SIGKILLed gpulease holder in a shared directory by offload-lock run: "
       << std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed).count() << " ms");
  CHECK(ours.wait(30s) == std::optional<int>(0));
  // Its claim alone was removed: its heartbeat and marker stay gpulease's,
  // and so do the directory and the counter.
  CHECK(fs::exists(s.dir / its_hb));
  CHECK(fs::exists(s.dir / its_unloaded));
  CHECK(fs::exists(s.d.path / "epoch"));
  CHECK(fs::is_directory(s.dir));
  CHECK_FALSE(fs::exists(s.claim));
}

TEST_CASE("lease shared: a SIGKILLed offload-lock holder is taken over by a gpulease waiter, which never took over a "
          "live one",
          "[multiprocess][lease]") {
  shared_site s;
  child h(cli_exe(), {"hold"}, s.env);
  REQUIRE(line_starting(h, "acquired").size() > 0);
  const std::string bytes = read_file(s.claim);
  child g(standin_exe(), {"hold", "-wait", "60s", "-poll", "200ms"}, s.env);
  CHECK_THAT(line_starting(g, "busy"), Catch::Contains("pid " + std::to_string(h.pid())));
  // A few of its polls, and still the offload-lock holder's.
  std::this_thread::sleep_for(1s);
  CHECK(read_file(s.claim) == bytes);
  CHECK_FALSE(g.exited());
  const auto killed = std::chrono::steady_clock::now();
  h.kill(SIGKILL);
  h.wait();
  const std::string got = line_starting(g, "acquired", 30s);
  CHECK(!got.empty());
  WARN("takeover of a SIGKILLed offload-lock holder in a shared directory by a gpulease waiter: "
       << std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed).count() << " ms");
  CHECK(s.claim_json()["holder"]["pid"].get<long>() == g.pid());
  g.close_stdin();
  CHECK(g.wait() == std::optional<int>(0));
}

TEST_CASE("lease shared: offload-lock and gpulease holders contending on one directory never overlap",
          "[multiprocess][lease]") {
  shared_site s;
  // Each critical section makes a directory that must not exist: a second
  // holder inside at the same time finds it and says so.
  const std::string cs = (s.d.path / "in-cs").string();
  const std::string body = "mkdir '" + cs + "' 2>/dev/null || echo OVERLAP; sleep 0.05; rmdir '" + cs + "'";
  const std::string cli = cli_exe();
  std::vector<std::unique_ptr<child>> loops;
  for (int i = 0; i < 2; ++i) {
    loops.push_back(std::make_unique<child>(
        "/bin/sh",
        std::vector<std::string>{"-c", "for i in 1 2 3 4 5 6; do '" + cli + "' run -- sh -c \"" + body + "\"; done"},
        s.env));
    loops.push_back(std::make_unique<child>(
        "/bin/sh",
        std::vector<std::string>{"-c", "for i in 1 2 3 4; do '" + standin_exe() +
                                           "' exec -wait 60s -poll 50ms -- sh -c \"" + body + "\"; done"},
        s.env));
  }
  int overlaps = 0;
  for (auto& l : loops) {
    while (auto line = l->read_line(120s))
      if (*line == "OVERLAP") ++overlaps;
    CHECK(l->wait(120s) == std::optional<int>(0));
  }
  CHECK(overlaps == 0);
  CHECK_FALSE(fs::exists(s.claim));
  CHECK(fs::is_directory(s.dir));
}

TEST_CASE("lease shared: gpulease's counter lock left by a killed acquirer is waited for, an ending wait is busy "
          "naming it, and the lock is taken once it clears",
          "[multiprocess][lease]") {
  shared_site s;
  // What a gpulease acquirer killed inside the counter's lock leaves: an
  // empty epoch.lock, which gpulease clears only once it is 30 s old.
  const fs::path stuck = s.d.path / "epoch.lock";
  write_file(stuck, "");
  // A past lease's heartbeat: the container is gpulease's, free to claim at
  // once (not a v1 runner's new directory within its grace).
  write_file(s.dir / "hb.1", "1");
  auto busy = run_cli({"run", "--wait", "0", "--", "true"}, s.env);
  INFO(busy.out << busy.err);
  CHECK(busy.code == 1);
  CHECK_THAT(busy.err, Catch::Contains("epoch.lock is locked"));
  CHECK_FALSE(fs::exists(s.claim));
  // A waiter waits for it (never an error), and claims once it is gone.
  child ours(cli_exe(), {"run", "--", "sh", "-c", "echo inside"}, s.env);
  std::this_thread::sleep_for(3s);
  CHECK_FALSE(ours.exited());
  fs::remove(stuck);
  CHECK(ours.read_line(30s) == std::optional<std::string>("inside"));
  CHECK(ours.wait(30s) == std::optional<int>(0));
}

TEST_CASE("lease shared: run gives CMD the lease its meta.json holds, gpulease under it and offload-lock under a "
          "gpulease holder hold through, and acquire --pid goes with release --pid",
          "[multiprocess][lease]") {
  shared_site s;
  // CMD sees the lease of the one meta.json, and a gpulease acquirer it
  // starts holds through it instead of waiting for its own parent.
  const std::string script = "cat '" + s.claim.string() +
                             "'; echo; echo \"env=$GPU_LEASE_DIR $GPU_LEASE_EPOCH $GPU_LEASE_CLASS\"; '" +
                             standin_exe() + "' hold -wait 0s -for 1ms";
  // (It waits: the container the stand-in made just now may still be a v1
  // runner's new directory, for the grace from its birth.)
  auto res = run_cli({"run", "--class", "text", "--", "sh", "-c", script}, s.env);
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  const auto nl = res.out.find('\n');
  REQUIRE(nl != std::string::npos);
  const auto claim = nlohmann::json::parse(res.out.substr(0, nl));
  const std::string epoch = std::to_string(claim["epoch"].get<std::uint64_t>());
  CHECK(claim["class"] == "text");
  CHECK_THAT(res.out, Catch::Contains("env=" + s.dir.string() + " " + epoch + " text"));
  CHECK_THAT(res.out, Catch::Contains("inherited " + epoch));
  CHECK_FALSE(fs::exists(s.claim));
  CHECK(fs::is_directory(s.dir));

  // offload-lock started under a gpulease holder of this directory holds
  // through its lease: waiting would wait for its own parent.
  child g(standin_exe(), {"exec", "-wait", "10s", "--", cli_exe(), "run", "--wait", "0", "--", "sh", "-c",
                          "echo \"under $GPU_LEASE_EPOCH\""},
          s.env);
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  CHECK(line_starting(g, "under") == "under " + field(got, 2));
  CHECK(g.wait() == std::optional<int>(0));
  CHECK_FALSE(fs::exists(s.claim));

  // acquire --pid: the lease names the recorded holder; release --pid of it
  // removes the one meta.json and leaves the container.
  const std::string me = std::to_string(::getpid());
  auto held = run_cli({"--json", "acquire", "--pid", me}, s.env);
  INFO(held.out << held.err);
  REQUIRE(held.code == 0);
  const auto j = nlohmann::json::parse(held.out);
  CHECK(j["leaseEpoch"].get<std::uint64_t>() == s.claim_json()["epoch"].get<std::uint64_t>());
  CHECK(s.claim_json()["holder"]["pid"].get<long>() == ::getpid());
  CHECK_THAT(s.standin_view(), Catch::Contains("\"held\":true") && Catch::Contains("\"pid\":" + me));
  CHECK(run_cli({"release", "--pid", me}, s.env).code == 0);
  CHECK_FALSE(fs::exists(s.claim));
  CHECK(fs::is_directory(s.dir));
  CHECK_THAT(s.standin_view(), Catch::Contains("\"held\":false"));
}
