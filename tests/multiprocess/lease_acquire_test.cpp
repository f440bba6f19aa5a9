// Every acquisition holds both protocols' locks where a gpulease root
// exists (doc/protocol-gpulease.md, "Every acquisition holds both"): the
// offload-lock command against the gpulease stand-in, real processes in one
// state root, real SIGKILLs.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "lease_support.hpp"

using namespace olt;

namespace {

// The environment of a site whose gpulease root is `r`: nothing else that
// places the lease or passes one down.
env_changes site(const lease_root& r) {
  return {{"OFFLOAD_LOCK_LEASE_ROOT", r.root}, {"GPU_LOCK", std::nullopt},
          {"LOCAL_OFFLOAD_STATE_DIR", std::nullopt}, {"GPU_LEASE_DIR", std::nullopt},
          {"GPU_LEASE_EPOCH", std::nullopt}, {"GPU_LEASE_CLASS", std::nullopt}};
}

std::vector<std::string> on_lock(const lease_root& r, std::vector<std::string> args) {
  args.insert(args.begin(), {"--lock", (r.d.path / "gpu.lock").string()});
  return args;
}

nlohmann::json claim_of(const lease_root& r) { return nlohmann::json::parse(read_file(r.claim)); }

}  // namespace

TEST_CASE("lease: an acquisition also holds the gpulease lease, gives CMD its GPU_LEASE_*, and releases it",
          "[multiprocess][lease]") {
  lease_root r;
  const std::string script = "cat '" + r.claim.string() +
                             "'; echo; echo \"pid=$$ env=$GPU_LEASE_DIR $GPU_LEASE_EPOCH $GPU_LEASE_CLASS\"";
  auto res = run_cli(on_lock(r, {"run", "--class", "text", "--", "sh", "-c", script}), site(r));
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  const auto nl = res.out.find('\n');
  REQUIRE(nl != std::string::npos);
  const auto claim = nlohmann::json::parse(res.out.substr(0, nl));
  const std::string epoch = std::to_string(claim["epoch"].get<std::uint64_t>());
  CHECK(claim["class"] == "text");
  CHECK(claim["origin"] == "offload-lock");
  // The claim names CMD, the holder the lock records too.
  CHECK_THAT(res.out, Catch::Contains("pid=" + std::to_string(claim["holder"]["pid"].get<long>()) +
                                      " env=" + r.lease.string() + " " + epoch + " text"));
  CHECK_FALSE(fs::exists(r.claim));
  CHECK_FALSE(fs::exists(r.lease / ("hb." + epoch)));
  CHECK_THAT(r.standin_view(), Catch::Contains("\"held\":false"));

  auto held = run_cli(on_lock(r, {"--json", "acquire", "--pid", std::to_string(::getpid())}), site(r));
  REQUIRE(held.code == 0);
  const auto j = nlohmann::json::parse(held.out);
  CHECK(j["leaseEpoch"].get<std::uint64_t>() == claim_of(r)["epoch"].get<std::uint64_t>());
  CHECK(j["leaseEpoch"].get<std::uint64_t>() == std::stoull(epoch) + 1);
  CHECK(run_cli(on_lock(r, {"release", "--pid", std::to_string(::getpid())}), site(r)).code == 0);
}

TEST_CASE("lease: a gpulease holder makes offload-lock wait, and a SIGKILLed one is taken over",
          "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  auto busy = run_cli(on_lock(r, {"acquire", "--wait", "0"}), site(r));
  INFO(busy.out << busy.err);
  CHECK(busy.code == 1);
  CHECK_THAT(busy.err, Catch::Contains("the gpulease lease " + r.lease.string() + " is held by pid " +
                                       std::to_string(g.pid()) + " (epoch " + field(got, 2) + ")"));
  // The lock taken for the try was let go again.
  CHECK_FALSE(fs::exists(r.d.path / "gpu.lock"));
  // Slot 0 named is the same directory, and goes with the lease too.
  CHECK(run_cli(on_lock(r, {"run", "--gpu", "0", "--wait", "0", "--", "true"}), site(r)).code == 1);
  // A lease of another lease directory, current there, passes nothing down here.
  {
    lease_root other;
    child g2(standin_exe(), standin_hold(other.root));
    const std::string got2 = line_starting(g2, "acquired");
    REQUIRE(!got2.empty());
    auto env = site(r);
    env["GPU_LEASE_DIR"] = other.lease.string();
    env["GPU_LEASE_EPOCH"] = field(got2, 2);
    env["GPU_LEASE_CLASS"] = "media";
    auto res = run_cli(on_lock(r, {"run", "--wait", "0", "--", "echo", "inside"}), env);
    CHECK(res.code == 1);
    CHECK(res.out.find("inside") == std::string::npos);
    g2.close_stdin();
    CHECK(g2.wait() == 0);
  }

  child ours(cli_exe(), on_lock(r, {"run", "--", "sh", "-c", "echo inside"}), site(r));
  // It waits for the lease while holding the lock: no v1 runner gets in.
  CHECK(eventually([&] { return fs::exists(r.d.path / "gpu.lock" / "meta.json"); }));
  CHECK_FALSE(ours.exited());
  const auto killed = std::chrono::steady_clock::now();
  g.kill(SIGKILL);
  g.wait();
  CHECK(ours.read_line() == std::optional<std::string>("inside"));
  WARN("takeover of a SIGKILLed gpulease holder by offload-lock run: "
       << std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed).count() << " ms");
  CHECK(ours.wait() == 0);
  CHECK_FALSE(fs::exists(r.claim));
}

TEST_CASE("lease: a gpulease waiter takes the lease an offload-lock holder releases", "[multiprocess][lease]") {
  lease_root r;
  child h(cli_exe(), on_lock(r, {"hold"}), site(r));
  REQUIRE(line_starting(h, "acquired").size() > 0);
  const auto epoch = claim_of(r)["epoch"].get<std::uint64_t>();
  CHECK(claim_of(r)["holder"]["pid"].get<long>() == h.pid());
  child g(standin_exe(), standin_hold(r.root, "60s"));
  CHECK_THAT(line_starting(g, "busy"), Catch::Contains("pid " + std::to_string(h.pid())));
  h.close_stdin();
  CHECK(h.wait() == 0);
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  CHECK(std::stoull(field(got, 2)) == epoch + 1);
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: a process started under a gpulease lease passes through it, and a stale one is refused",
          "[multiprocess][lease]") {
  lease_root r;
  auto env = site(r);
  env.erase("GPU_LEASE_DIR");
  env.erase("GPU_LEASE_EPOCH");
  env.erase("GPU_LEASE_CLASS");
  // The stand-in's exec mode holds the lease and runs offload-lock under it,
  // which must not wait for its own parent's lease.
  child g(standin_exe(),
          {"exec", "-state-dir", r.root, "-wait", "10s", "--", cli_exe(), "--lock", (r.d.path / "gpu.lock").string(),
           "run", "--wait", "0", "--", "sh", "-c", "echo \"under $GPU_LEASE_EPOCH\""},
          env);
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  CHECK(line_starting(g, "under") == "under " + field(got, 2));
  CHECK(g.wait() == 0);
  CHECK_FALSE(fs::exists(r.d.path / "gpu.lock"));

  auto stale = site(r);
  stale["GPU_LEASE_DIR"] = r.lease.string();
  stale["GPU_LEASE_EPOCH"] = "99";
  stale["GPU_LEASE_CLASS"] = "media";
  auto res = run_cli(on_lock(r, {"run", "--wait", "0", "--", "true"}), stale);
  CHECK(res.code == 5);  // errc::lost, as for a lock no longer ours
  CHECK_THAT(res.err, Catch::Contains("the inherited GPU lease (epoch 99) is no longer current"));
  CHECK_THAT(res.err, !Catch::Contains("lock was removed or replaced"));
  CHECK_FALSE(fs::exists(r.claim));
}

TEST_CASE("lease: acquire's lease names the recorded holder and goes with it", "[multiprocess][lease]") {
  lease_root r;
  child holder("/bin/sleep", {"600"});
  auto res = run_cli(on_lock(r, {"acquire", "--pid", std::to_string(holder.pid())}), site(r));
  INFO(res.out << res.err);
  REQUIRE(res.code == 0);
  CHECK(claim_of(r)["holder"]["pid"].get<long>() == holder.pid());
  // The keeper renews and releases it: the command that took it is gone.
  CHECK_THAT(r.standin_view(), Catch::Contains("\"held\":true") &&
                                   Catch::Contains("\"pid\":" + std::to_string(holder.pid())));
  holder.kill(SIGKILL);
  holder.wait();
  CHECK(eventually([&] { return !fs::exists(r.claim); }));
  CHECK(eventually([&] { return !fs::exists(r.d.path / "gpu.lock"); }));
}

TEST_CASE("lease: without a gpulease root no lease is taken and nothing is made", "[multiprocess][lease]") {
  lease_root r;
  const fs::path missing = r.d.path / "no-such-root";
  auto env = site(r);
  env["OFFLOAD_LOCK_LEASE_ROOT"] = missing.string();
  auto res = run_cli(on_lock(r, {"--json", "acquire", "--pid", std::to_string(::getpid())}), env);
  REQUIRE(res.code == 0);
  CHECK_FALSE(nlohmann::json::parse(res.out).contains("leaseEpoch"));
  CHECK_FALSE(fs::exists(missing));
  CHECK(run_cli(on_lock(r, {"release", "--pid", std::to_string(::getpid())}), env).code == 0);
  // GPU slots: the one lease cannot describe them; not joined either.
  auto slots = run_cli(on_lock(r, {"run", "--gpus", "2", "--", "true"}), site(r));
  CHECK(slots.code == 0);
  CHECK_FALSE(fs::exists(r.d.path / "gpu" / "epoch"));
  CHECK(run_cli(on_lock(r, {"run", "--class", "video", "--", "true"}), site(r)).code == 2);
}

TEST_CASE("lease: acquire stopped by a signal while it holds the lock for the lease lets go of the lock",
          "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(), standin_hold(r.root));
  REQUIRE(!line_starting(g, "acquired").empty());
  // The recorded holder outlives the command: nobody else would release
  // the lock for it.
  child holder("/bin/sleep", {"300"});
  const fs::path lock = r.d.path / "gpu.lock";
  for (int sig : {SIGTERM, SIGINT}) {
    child acq(cli_exe(), on_lock(r, {"acquire", "--pid", std::to_string(holder.pid()), "--wait", "120"}), site(r));
    // Taken, and waiting for the lease.
    REQUIRE(eventually([&] { return fs::exists(lock / "meta.json"); }));
    acq.kill(sig);
    INFO(acq.err_text());
    CHECK(acq.wait() == std::optional<int>(128 + sig));
    CHECK_FALSE(fs::exists(lock));
    CHECK_THAT(acq.err_text(), Catch::Contains("gave up waiting for"));
  }
  // And the gpulease holder's lease was never touched.
  CHECK_THAT(r.standin_view(), Catch::Contains("\"pid\":" + std::to_string(g.pid())));
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: a holder whose lease claim is replaced in place is told at once, even under --quiet",
          "[multiprocess][lease]") {
  lease_root r;
  // Renewals every 60 s (the default TTL's period): only the watch can tell
  // it sooner.
  child h(cli_exe(), on_lock(r, {"-q", "hold"}), site(r));
  REQUIRE(line_starting(h, "acquired").size() > 0);
  auto claim = claim_of(r);
  const auto ours = claim["epoch"].get<std::uint64_t>();
  // Long enough for the holder's watch to be in place (it is set up once a
  // hold has lasted 20 ms).
  std::this_thread::sleep_for(200ms);
  // Another holder's claim, written aside and renamed over ours.
  claim["epoch"] = ours + 7;
  const fs::path aside = r.lease / "replacement.tmp";
  write_file(aside, claim.dump());
  fs::rename(aside, r.claim);
  const std::string said = "the gpulease lease claim " + r.claim.string() + " was replaced or removed";
  CHECK(eventually([&] { return h.err_text().find("WARNING: " + said) != std::string::npos; }, 30s));
  INFO(h.err_text());
  // The lock itself was not lost: released as ours at the end; the other
  // holder's claim is left alone.
  h.close_stdin();
  CHECK(h.wait() == std::optional<int>(5));
  CHECK_THAT(h.err_text(), Catch::Contains("offload-lock: " + said + " by someone else during the hold"));
  CHECK_FALSE(fs::exists(r.d.path / "gpu.lock"));
  CHECK(claim_of(r)["epoch"].get<std::uint64_t>() == ours + 7);
}

TEST_CASE("lease: release --pid of a lock whose acquire keeper is gone gives its lease back too",
          "[multiprocess][lease]") {
  lease_root r;
  child holder("/bin/sleep", {"300"});
  const std::string pid = std::to_string(holder.pid());
  const auto args = on_lock(r, {"acquire", "--pid", pid});
  REQUIRE(run_cli(args, site(r)).code == 0);
  REQUIRE(claim_of(r)["holder"]["pid"] == holder.pid());
  const std::string epoch = std::to_string(claim_of(r)["epoch"].get<std::uint64_t>());
  // The keeper is the one process left with acquire's command line.
  std::string wanted;
  for (const auto& a : args) wanted += a + '\0';
  int keeper = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline;
    try {
      cmdline = read_file(e.path() / "cmdline");
    } catch (const std::exception&) {
      continue;
    }
    if (cmdline.find(wanted) != std::string::npos && std::stoi(name) != ::getpid()) keeper = std::stoi(name);
  }
  REQUIRE(keeper > 0);
  REQUIRE(::kill(keeper, SIGKILL) == 0);
  REQUIRE(eventually([&] { return ::kill(keeper, 0) != 0; }));
  // The lock and the lease stay held for the live holder until released.
  CHECK(fs::exists(r.claim));
  auto res = run_cli(on_lock(r, {"release", "--pid", pid}), site(r));
  INFO(res.out << res.err);
  CHECK(res.code == 0);
  CHECK_FALSE(fs::exists(r.d.path / "gpu.lock"));
  CHECK_FALSE(fs::exists(r.claim));
  CHECK_FALSE(fs::exists(r.lease / ("hb." + epoch)));
  CHECK_THAT(r.standin_view(), Catch::Contains("\"held\":false"));
  // A lease offload-lock did not make is never given back, though its
  // holder's pid is the one a released v1 lock named.
  child g(standin_exe(), standin_hold(r.root));
  REQUIRE(!line_starting(g, "acquired").empty());
  fs::create_directory(r.d.path / "gpu.lock");
  const auto now_ms = std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
  write_file(r.d.path / "gpu.lock" / "meta.json",
             "{\"pid\":" + std::to_string(g.pid()) + ",\"startedAt\":" + std::to_string(now_ms) + "}");
  CHECK(run_cli(on_lock(r, {"release", "--pid", std::to_string(g.pid())}), site(r)).code == 0);
  CHECK_FALSE(fs::exists(r.d.path / "gpu.lock"));
  CHECK(claim_of(r)["holder"]["pid"] == g.pid());
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: the maximum hold counts, and nothing asks CMD to make way, only once the lease is held too",
          "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(), standin_hold(r.root));
  REQUIRE(!line_starting(g, "acquired").empty());
  child ours(cli_exe(),
             on_lock(r, {"run", "--max-hold", "1s", "--yield-signal", "USR1", "--", "sh", "-c", "echo started"}),
             site(r));
  // Holding the lock, waiting for the lease, past the maximum hold.
  REQUIRE(eventually([&] { return fs::exists(r.d.path / "gpu.lock" / "meta.json"); }));
  std::this_thread::sleep_for(2500ms);
  CHECK_FALSE(ours.exited());
  g.close_stdin();
  CHECK(g.wait() == 0);
  INFO(ours.err_text());
  CHECK(ours.read_line() == std::optional<std::string>("started"));
  CHECK(ours.wait() == 0);
  CHECK_THAT(ours.err_text(), !Catch::Contains("maximum hold"));
}
