// The site policy (offload_lock/policy.hpp) with real files and processes:
// a clamped priority said and queued as clamped, the highest of a user's
// group caps, a default and a capped maximum hold that end a hung job, a
// default expected duration, an untrusted file ignored (mode, owner, links)
// and said by doctor, an invalid one failing every acquisition in one line;
// the idle rule with a stand-in nvidia-smi.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>

#include "offload_lock/offload_lock.h"
#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

using namespace olt;
namespace ol = offload_lock;

namespace {

constexpr int kMaxHoldExit = 124;

std::string policy_of(const temp_dir& d) { return d.lock() + ".policy.json"; }

void write_policy(const temp_dir& d, const std::string& json, mode_t mode = 0644) {
  write_file(policy_of(d), json);
  REQUIRE(::chmod(policy_of(d).c_str(), mode) == 0);
}

std::string own_group() {
  struct group* g = ::getgrgid(::getegid());
  return g && g->gr_name ? g->gr_name : "";
}

// A holder until the test says go; a waiter behind it is listed with the
// priority it waits at.
struct holder {
  std::unique_ptr<child> c;
  explicit holder(const temp_dir& d) {
    c = std::make_unique<child>(cli_exe(), with_lock(d, {"run", "--label", "first", "--", "sh", "-c", "echo held; read x"}));
    REQUIRE(c->read_line() == std::optional<std::string>("held"));
  }
  void release() {
    if (gone) return;
    gone = true;
    c->write_line("go");
    (void)c->wait();
  }
  ~holder() { release(); }
  bool gone = false;
};

int queued_priority(const temp_dir& d) {
  int p = -1000;
  REQUIRE(eventually([&] {
    auto w = ol::waiters(d.lock());
    if (w.size() != 1) return false;
    p = w.front().priority;
    return true;
  }));
  return p;
}

}  // namespace

TEST_CASE("a site policy caps the priority: the waiter queues at the cap and is told once", "[multiprocess][policy]") {
  temp_dir d;
  write_policy(d, R"({"maxPriority": 0})");
  holder h(d);
  child w(cli_exe(), with_lock(d, {"run", "--wait", "60", "--priority", "50", "--", "true"}));
  CHECK(queued_priority(d) == 0);
  h.release();
  REQUIRE(w.wait(60s) == std::optional<int>(0));
  const std::string err = w.err_text();
  CHECK_THAT(err, Catch::Contains("priority 50 is above the 0 allowed to everyone; waiting at 0") &&
                      Catch::Contains(policy_of(d)));
  CHECK(err.find("is above the") == err.rfind("is above the"));
  // A priority at or below the cap is untouched, and nothing is said.
  auto r = run_cli(with_lock(d, {"run", "--priority", "-5", "--", "true"}));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
}

TEST_CASE("a site policy's group cap above the everyone cap applies to the group's members", "[multiprocess][policy]") {
  temp_dir d;
  const std::string g = own_group();
  if (g.empty()) OLT_NOT_RUN("this process's group has no name");
  write_policy(d, R"({"maxPriority": 0, "groupMaxPriority": {")" + g + R"(": 20}, "userMaxPriority": {"nobody-such-user": 90}})");
  holder h(d);
  child w(cli_exe(), with_lock(d, {"run", "--wait", "60", "--priority", "50", "--", "true"}));
  CHECK(queued_priority(d) == 20);
  h.release();
  REQUIRE(w.wait(60s) == std::optional<int>(0));
  CHECK_THAT(w.err_text(), Catch::Contains("allowed to group " + g));
}

TEST_CASE("a site policy's default maximum hold ends a hung job and frees the lock", "[multiprocess][policy][maxhold]") {
  temp_dir d;
  write_policy(d, R"({"defaultMaxHold": "1s", "defaultExpect": "20m"})");
  child job(cli_exe(), with_lock(d, {"run", "--max-hold-grace", "1s", "--", "sh", "-c", "trap '' TERM; exec sleep 600"}));
  // Recorded as the holder's own: status shows the maximum hold and the
  // expected duration the policy gave it.
  REQUIRE(eventually([&] {
    auto j = nlohmann::json::parse(run_cli(with_lock(d, {"--json", "status"})).out, nullptr, false);
    return j.is_object() && j["maxHoldMs"] == 1000 && j["expectMs"] == 20 * 60 * 1000;
  }));
  REQUIRE(job.wait(60s) == std::optional<int>(kMaxHoldExit));
  CHECK_THAT(job.err_text(), Catch::Contains("maximum hold 1s, the site's default") &&
                                 Catch::Contains("past its maximum hold of 1s") && Catch::Contains("by SIGKILL"));
  CHECK(run_cli(with_lock(d, {"status"})).code == 1);
}

TEST_CASE("a site policy's maximum hold caps a longer one asked for", "[multiprocess][policy][maxhold]") {
  temp_dir d;
  write_policy(d, R"({"maxHold": "1s"})");
  auto r = run_cli(with_lock(d, {"run", "--max-hold", "1h", "--max-hold-grace", "1s", "--", "sleep", "600"}), {}, 60s);
  CHECK(r.code == kMaxHoldExit);
  CHECK_THAT(r.err, Catch::Contains("maximum hold 1h00m; the site allows at most 1s") &&
                        Catch::Contains("past its maximum hold of 1s"));
  // The library applies it too, to a caller that asked for no maximum hold.
  ol::lock_options o;
  o.path = d.lock();
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  CHECK(eventually([&] { return l->max_hold_passed(); }));
}

TEST_CASE("applying a site policy twice changes nothing more", "[multiprocess][policy]") {
  temp_dir d;
  write_policy(d, R"({"maxPriority": 10, "defaultMaxHold": "2h", "maxHold": "8h", "defaultExpect": "30m"})");
  ol::lock_options o;
  o.path = d.lock();
  o.priority = 60;
  std::vector<std::string> first, second;
  auto once = ol::with_site_policy(o, &first);
  REQUIRE(once);
  CHECK(once->priority == 10);
  CHECK(once->max_hold == std::chrono::hours(2));
  CHECK(once->expected == std::chrono::minutes(30));
  CHECK(first.size() == 2);
  auto twice = ol::with_site_policy(*once, &second);
  REQUIRE(twice);
  CHECK(twice->priority == 10);
  CHECK(twice->max_hold == std::chrono::hours(2));
  CHECK(second.empty());
  const auto rep = ol::site_policy(d.lock());
  CHECK(rep.state == ol::policy_state::honoured);
  CHECK(rep.summary == "priority at most 10, maximum hold 2h00m by default, maximum hold at most 8h00m, expected 30m00s by default");
}

TEST_CASE("a site policy others may write is ignored, and doctor says why", "[multiprocess][policy]") {
  temp_dir d;
  write_policy(d, R"({"maxPriority": 0})", 0664);
  auto r = run_cli(with_lock(d, {"run", "--priority", "50", "--", "true"}));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(ol::site_policy(d.lock()).state == ol::policy_state::ignored);
  auto doc = run_cli(with_lock(d, {"doctor"}));
  CHECK_THAT(doc.out, Catch::Contains("warn  policy: " + policy_of(d) + " is ignored: writable by others than its owner (mode 0664)"));
  // Trusted again once only its owner may write it.
  REQUIRE(::chmod(policy_of(d).c_str(), 0644) == 0);
  CHECK_THAT(run_cli(with_lock(d, {"doctor"})).out, Catch::Contains("ok    policy: " + policy_of(d) + ": priority at most 0"));
}

TEST_CASE("a site policy with a second link is ignored", "[multiprocess][policy]") {
  temp_dir d;
  write_policy(d, R"({"maxPriority": 0})");
  const std::string other = (d.path / "elsewhere.json").string();
  REQUIRE(::link(policy_of(d).c_str(), other.c_str()) == 0);
  auto rep = ol::site_policy(d.lock());
  CHECK(rep.state == ol::policy_state::ignored);
  CHECK_THAT(rep.reason, Catch::Contains("2 hard links"));
  REQUIRE(::unlink(other.c_str()) == 0);
  CHECK(ol::site_policy(d.lock()).state == ol::policy_state::honoured);
}

TEST_CASE("a site policy owned by neither root nor the lock directory's owner is ignored", "[multiprocess][policy]") {
  if (!running_as_root()) OLT_NOT_RUN("giving the file to another owner needs root");
  temp_dir d;
  write_policy(d, R"({"maxPriority": 0})");
  // Neither root nor the owner of the lock's directory (the test's user,
  // root here: the directory is given away too, so root's own file would
  // still count).
  REQUIRE(::chown(d.str().c_str(), 65533, static_cast<gid_t>(-1)) == 0);
  REQUIRE(::chown(policy_of(d).c_str(), 65534, static_cast<gid_t>(-1)) == 0);
  auto rep = ol::site_policy(d.lock());
  CHECK(rep.state == ol::policy_state::ignored);
  CHECK_THAT(rep.reason, Catch::Contains("owned by uid 65534, neither root nor the owner of the lock's directory (uid 65533)"));
  // Root's own file counts wherever the lock is.
  REQUIRE(::chown(policy_of(d).c_str(), 0, static_cast<gid_t>(-1)) == 0);
  CHECK(ol::site_policy(d.lock()).state == ol::policy_state::honoured);
  REQUIRE(::chown(d.str().c_str(), 0, static_cast<gid_t>(-1)) == 0);
}

TEST_CASE("an invalid site policy fails every acquisition with one line naming it", "[multiprocess][policy]") {
  temp_dir d;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"maxHold": "8x"})", "maxHold is not a duration above 0"},
      {R"({"maxPriority": 500})", "maxPriority is not a priority (an integer from -100 to 100)"},
      {R"({"userMaxPriority": {"alice": "high"}})", "userMaxPriority.alice is not a priority"},
      {R"({"maxhold": "2h"})", "unknown key \"maxhold\""},
      {R"({"defaultMaxHold": "3h", "maxHold": "2h"})", "defaultMaxHold is longer than maxHold"},
      {R"({"idleAfter": "10m", "idlePercent": 101})", "idlePercent is not a percentage (an integer from 0 to 100)"},
      {R"({"idleAfter": "10m", "idleYield": "yes"})", "idleYield is not true or false"},
      {R"({"idleYield": true})", "idleYield is set without idleAfter"},
      {R"([1, 2])", "not a JSON object"},
      {"{", "not a JSON object"},
  };
  for (const auto& [json, why] : cases) {
    INFO(json);
    write_policy(d, json);
    auto r = run_cli(with_lock(d, {"run", "--", "true"}));
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::StartsWith("offload-lock: site policy " + policy_of(d) + ": " + why));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(d.lock()));
    ol::lock_options o;
    o.path = d.lock();
    auto l = ol::lock::acquire(o);
    REQUIRE_FALSE(l);
    CHECK(l.error() == ol::errc::bad_input);
    CHECK(ol::site_policy(d.lock()).state == ol::policy_state::invalid);
  }
  CHECK_THAT(run_cli(with_lock(d, {"doctor"})).out, Catch::Contains("is invalid, and every acquisition of the lock fails"));
}

namespace {

// A stand-in nvidia-smi answering from two files the test rewrites: the
// --query-gpu line of GPU 0 and its compute apps. Each run of the GPU
// query adds a line to a counter file.
struct stand_in_gpu {
  explicit stand_in_gpu(const temp_dir& d) : bin(d.path / "bin"), gpu(d.path / "gpu.csv"), apps(d.path / "apps.csv"),
                                             runs(d.path / "gpu-runs") {
    fs::create_directory(bin);
    write_file(bin / "nvidia-smi",
               "#!/bin/sh\ncase \"$*\" in\n"
               "  *-L*) echo 'GPU 0: Stand-in (UUID: GPU-0000aaaa)';;\n"
               "  *query-gpu*) echo run >> '" + runs.string() + "'; cat '" + gpu.string() + "';;\n"
               "  *query-compute-apps*) cat '" + apps.string() + "';;\n  *) exit 9;;\nesac\n");
    fs::permissions(bin / "nvidia-smi", fs::owner_all);
    busy_percent(0);
    write_file(apps, "");
  }
  void busy_percent(int p) {
    write_file(gpu, "0, GPU-0000aaaa, Stand-in, 100, 1000, " + std::to_string(p) + "\n");
  }
  void process(long pid) { write_file(apps, "GPU-0000aaaa, " + std::to_string(pid) + ", job, 50\n"); }
  std::size_t looks() const {
    if (!fs::exists(runs)) return 0;
    const std::string t = read_file(runs);
    return static_cast<std::size_t>(std::count(t.begin(), t.end(), '\n'));
  }
  env_changes env() const { return {{"PATH", bin.string() + ":" + std::string(::getenv("PATH"))}}; }
  fs::path bin, gpu, apps, runs;
};

nlohmann::json status_json(const temp_dir& d, const env_changes& env) {
  return nlohmann::json::parse(run_cli(with_lock(d, {"--json", "status"}), env).out, nullptr, false);
}

bool shown_idle(const temp_dir& d, const env_changes& env) {
  auto j = status_json(d, env);
  return j.is_object() && j["held"] == true && j["idleSince"].is_number_integer() && j["idleForMs"].is_number_integer();
}

// How long idle a view made between `before` and `after` (epoch ms) says
// a mark of `since` has been: the time since it, as of the look.
void check_idle_for(std::int64_t since, std::int64_t idle_for, std::int64_t before, std::int64_t after) {
  CHECK(idle_for >= before - since);
  CHECK(idle_for <= after - since);
}

// The C API's view of the mark (the Python package's): when it was made, 0
// when there is none.
std::int64_t c_idle_since(const temp_dir& d) {
  offload_lock_queue_info q{};
  q.size = sizeof q;
  const std::int64_t before = now_ms();
  REQUIRE(offload_lock_inspect_queue(d.lock().c_str(), 0, nullptr, &q) == OFFLOAD_LOCK_OK);
  const std::int64_t after = now_ms();
  if (q.idle_since_ms == 0) CHECK(q.idle_for_ms == 0);
  else check_idle_for(q.idle_since_ms, q.idle_for_ms, before, after);
  return q.idle_since_ms;
}

}  // namespace

TEST_CASE("a site policy's idle rule marks a holder its GPU shows idle, asks it to yield, and unmarks it when busy",
          "[multiprocess][policy][idle]") {
  // The stand-in would not be the only one answering on a machine with a driver.
  if (fs::exists("/proc/driver/nvidia/gpus")) return;
  temp_dir d;
  stand_in_gpu gpu(d);
  const env_changes env = gpu.env();
  write_policy(d, R"({"idleAfter": "1s", "idlePercent": 5, "idleYield": true})");
  const auto history = run_cli(with_lock(d, {"history", "--start"}));
  REQUIRE(history.code == 0);
  child job(cli_exe(),
            with_lock(d, {"run", "--yield-signal", "USR1", "--", "sh", "-c",
                          "trap 'echo yielded' USR1; echo started $$; while :; do sleep 0.1; done"}),
            env);
  auto started = job.read_line();
  REQUIRE(started);
  REQUIRE_THAT(*started, Catch::StartsWith("started "));
  const long cmd_pid = std::stol(started->substr(8));

  // Its own CMD on the GPU at 0%: busy. Five looks after this one are more
  // than the 1 s of the rule (a look every 250 ms at the soonest).
  gpu.process(cmd_pid);
  const std::size_t before = gpu.looks();
  REQUIRE(eventually([&] { return gpu.looks() >= before + 6; }, 60s));
  CHECK_FALSE(shown_idle(d, env));

  // No process of its own and 3% busy (at most 5%): idle, said everywhere,
  // and the holder asked once to make way (its yield signal).
  write_file(gpu.apps, "GPU-0000aaaa, 1, some-daemon, 10\n");
  gpu.busy_percent(3);
  REQUIRE(eventually([&] { return shown_idle(d, env); }, 60s));
  CHECK_THAT(run_cli(with_lock(d, {"status"}), env).out, Catch::Contains(", idle for "));
  {
    const std::int64_t before = now_ms();
    auto j = status_json(d, env);
    const std::int64_t after = now_ms();
    check_idle_for(j["idleSince"].get<std::int64_t>(), j["idleForMs"].get<std::int64_t>(), before, after);
  }
  CHECK(c_idle_since(d) == status_json(d, env)["idleSince"].get<std::int64_t>());
  CHECK_THAT(run_cli(with_lock(d, {"status", "--prometheus"}), env).out,
             Catch::Contains("offload_lock_holder_idle{lock=\"" + d.lock() + "\",gpu=\"0\"} 1"));
  CHECK(job.read_line(60s) == std::optional<std::string>("yielded"));
  CHECK_THAT(job.err_text(), Catch::Contains("idle for the site policy's idle time; asking sh to make way with SIGUSR1"));

  // Busy again (80%): the mark goes.
  gpu.busy_percent(80);
  REQUIRE(eventually([&] { return !shown_idle(d, env); }, 60s));
  CHECK(status_json(d, env)["idleSince"].is_null());
  CHECK(c_idle_since(d) == 0);
  CHECK_THAT(run_cli(with_lock(d, {"status", "--prometheus"}), env).out,
             Catch::Contains("offload_lock_holder_idle{lock=\"" + d.lock() + "\",gpu=\"0\"} 0"));
  job.kill(SIGTERM);
  (void)job.wait(60s);
  // Both changes are in the history.
  const std::string h = run_cli(with_lock(d, {"--json", "history"})).out;
  CHECK_THAT(h, Catch::Contains(R"("event":"idle")") && Catch::Contains(R"("outcome":"idle")") &&
                    Catch::Contains(R"("outcome":"busy")"));
  CHECK_THAT(run_cli(with_lock(d, {"history"})).out,
             Catch::Contains("its GPU shows it idle") && Catch::Contains("its GPU shows it working again") &&
                 Catch::Contains("was asked to make way: its GPU showed it idle"));
}

TEST_CASE("without a GPU an idle rule marks nothing", "[multiprocess][policy][idle]") {
  temp_dir d;
  stand_in_gpu gpu(d);
  // nvidia-smi fails on every query: nothing is known, nothing is idle.
  write_file(gpu.bin / "nvidia-smi", "#!/bin/sh\necho run >> '" + gpu.runs.string() + "'\nexit 1\n");
  fs::permissions(gpu.bin / "nvidia-smi", fs::owner_all);
  write_policy(d, R"({"idleAfter": "1s"})");
  child job(cli_exe(), with_lock(d, {"run", "--", "sh", "-c", "echo started; exec sleep 600"}), gpu.env());
  REQUIRE(job.read_line() == std::optional<std::string>("started"));
  REQUIRE(eventually([&] { return gpu.looks() >= 6; }, 60s));
  CHECK_FALSE(shown_idle(d, gpu.env()));
  job.kill(SIGTERM);
  (void)job.wait(60s);
}
