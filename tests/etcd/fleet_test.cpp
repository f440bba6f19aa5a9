// The fleet view: hosts (processes in UTS namespaces of their own, each with
// its own host name) publish their local locks to a real etcd; status
// --fleet shows every host; a host's records go with its processes; an
// etcd that is down or stopped never holds up a local acquisition, and
// status and doctor then say the view is stale.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "etcd/client.hpp"
#include "etcd/cluster.hpp"
#include "os/clock.hpp"

using namespace olt;
using json = nlohmann::json;
namespace etcd = offload_lock::detail::etcd;

namespace {

// Whether this test can give a process a host name of its own.
std::optional<std::string> no_uts_namespace() {
  if (!running_as_root()) return "simulated hosts need root (unshare -u)";
  child probe("/usr/bin/unshare", {"-u", "sh", "-c", "hostname olt-probe && hostname"});
  auto line = probe.read_line(30s);
  (void)probe.wait(30s);
  if (line != std::optional<std::string>("olt-probe")) return "unshare -u cannot set a host name here";
  return std::nullopt;
}

// offload-lock `args` on host `host` (a UTS namespace named so).
std::unique_ptr<child> on_host(const std::string& host, const std::vector<std::string>& args, const env_changes& env) {
  std::string cmd = "hostname " + host + " && exec \"$0\"";
  for (std::size_t k = 0; k < args.size(); ++k) cmd += " \"$" + std::to_string(k + 1) + "\"";
  std::vector<std::string> argv{"-u", "sh", "-c", cmd, cli_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> full;
  std::string exe = "/usr/bin/unshare";
  if (!env.empty()) {
    for (const auto& [k, v] : env) full.push_back(k + "=" + v.value_or(""));
    full.push_back(exe);
    exe = "/usr/bin/env";
  }
  full.insert(full.end(), argv.begin(), argv.end());
  return std::make_unique<child>(exe, full);
}

json fleet_json(const env_changes& env) {
  auto r = run_cli({"--json", "status", "--fleet"}, env);
  REQUIRE(r.code == 0);
  return json::parse(r.out);
}

// The host entry named `host` in `status --fleet --json`, or null.
json host_of(const json& fleet, const std::string& host) {
  for (const auto& h : fleet["hosts"])
    if (h["host"] == host) return h;
  return json();
}

}  // namespace

TEST_CASE("fleet: each host publishes its holders and waiters, status --fleet shows every host", "[etcd][fleet]") {
  if (!etcd_exe()) OLT_NOT_RUN("no etcd server on this machine");
  if (auto why = no_uts_namespace()) OLT_NOT_RUN(*why);
  etcd_cluster c;
  const env_changes env{{"OFFLOAD_LOCK_FLEET", "etcd://" + c.endpoints()}};
  temp_dir a, b;
  // Host A: a holder and a waiter of a higher priority; host B: a holder.
  auto a_holder = on_host("olt-host-a", {"--lock", a.lock(), "hold", "--label", "render", "--expect", "10m"}, env);
  REQUIRE(a_holder->read_line(30s));
  auto a_waiter = on_host("olt-host-a", {"--lock", a.lock(), "run", "--label", "train", "--priority", "10", "--",
                                         "true"}, env);
  auto b_holder = on_host("olt-host-b", {"--lock", b.lock(), "hold", "--label", "upscale"}, env);
  REQUIRE(b_holder->read_line(30s));
  json f;
  REQUIRE(eventually_every_50ms(
      [&] {
        f = fleet_json(env);
        const json ha = host_of(f, "olt-host-a"), hb = host_of(f, "olt-host-b");
        return !ha.is_null() && !hb.is_null() && ha["locks"][0]["waiters"].size() == 1 &&
               !ha["locks"][0]["holder"].is_null() && !hb["locks"][0]["holder"].is_null();
      },
      30s));
  const json la = host_of(f, "olt-host-a")["locks"][0];
  CHECK(la["path"] == a.lock());
  CHECK(la["holder"]["label"] == "render");
  CHECK(la["holder"]["expectMs"] == 600000);
  CHECK(la["waiters"][0]["label"] == "train");
  CHECK(la["waiters"][0]["priority"] == 10);
  CHECK(la["waiters"][0]["position"] == 1);
  CHECK(host_of(f, "olt-host-b")["locks"][0]["holder"]["label"] == "upscale");
  auto text = run_cli({"status", "--fleet"}, env);
  CHECK(text.code == 0);
  CHECK(text.out.find("olt-host-a: " + a.lock() + ": held by render (pid ") != std::string::npos);
  CHECK(text.out.find("  waiting: train (pid ") != std::string::npos);
  CHECK(text.out.find("fleet: 2 hosts, 2 locks held, 1 waiting") != std::string::npos);
  auto prom = run_cli({"status", "--fleet", "--prometheus"}, env);
  CHECK(prom.out.find("offload_lock_fleet_hosts 2\n") != std::string::npos);
  CHECK(prom.out.find("offload_lock_fleet_waiters{host=\"olt-host-a\",lock=\"" + a.lock() + "\",gpu=\"0\"} 1") !=
        std::string::npos);

  // The waiter takes the lock in turn; host B's holder is killed: its
  // records go with its lease.
  a_holder->close_stdin();
  CHECK(a_holder->wait(30s) == 0);
  CHECK(a_waiter->wait(30s) == 0);
  b_holder->kill(SIGKILL);
  (void)b_holder->wait(30s);
  CHECK(eventually_every_50ms([&] { return fleet_json(env)["hosts"].empty(); }, 30s));
}

TEST_CASE("fleet: an etcd that is down or stopped never holds up a local lock, and the view is said stale",
          "[etcd][fleet]") {
  if (!etcd_exe()) OLT_NOT_RUN("no etcd server on this machine");
  etcd_cluster c;
  temp_dir d;
  const env_changes down{{"OFFLOAD_LOCK_FLEET", "etcd://127.0.0.1:" + std::to_string(free_port())}};
  // Refused at once.
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_cli({"--lock", d.lock(), "run", "--", "true"}, down);
  CHECK(r.code == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  child h(cli_exe(), {"--lock", d.lock(), "hold", "--label", "H"}, down);
  REQUIRE(h.read_line(30s));
  auto st = run_cli({"--lock", d.lock(), "status"}, down);
  CHECK(st.code == 0);
  CHECK(st.out.find("fleet: stale: etcd://127.0.0.1:") != std::string::npos);
  CHECK(st.out.find("cannot be reached") != std::string::npos);
  auto js = json::parse(run_cli({"--lock", d.lock(), "--json", "status"}, down).out);
  CHECK(js["fleet"]["stale"] == true);
  auto doc = run_cli({"--lock", d.lock(), "doctor"}, down);
  CHECK(doc.out.find("warn  fleet: the fleet view is stale: ") != std::string::npos);
  CHECK(run_cli({"status", "--fleet"}, down).code == 4);
  h.close_stdin();
  CHECK(h.wait(30s) == 0);

  // Stopped: connections are accepted and never answered.
  const env_changes stopped{{"OFFLOAD_LOCK_FLEET", "etcd://" + c.endpoints()}};
  c.stop(0);
  t0 = std::chrono::steady_clock::now();
  auto s = run_cli({"--lock", d.lock(), "run", "--", "true"}, stopped);
  CHECK(s.code == 0);
  // The publisher's calls wait 2 s for a stopped member; the command does
  // not wait for them (its exit may wait 300 ms for the lease's revoke).
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  c.resume(0);
  // Back up: published again, and fresh.
  child h2(cli_exe(), {"--lock", d.lock(), "hold", "--label", "H2"}, stopped);
  REQUIRE(h2.read_line(30s));
  CHECK(eventually_every_50ms(
      [&] { return run_cli({"--lock", d.lock(), "status"}, stopped).out.find("fleet: published to ") != std::string::npos; },
      30s));
  h2.close_stdin();
  CHECK(h2.wait(30s) == 0);
}

TEST_CASE("fleet: records that are not records are left out and counted, and shown escaped", "[etcd][fleet]") {
  if (!etcd_exe()) OLT_NOT_RUN("no etcd server on this machine");
  etcd_cluster c;
  const std::string ep = c.endpoint(0);
  etcd::client cl({{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)))}});
  auto put = [&](const std::string& k, const std::string& v) {
    REQUIRE(cl.txn({}, {{etcd::txn_op::kind::put, k, v, 0, false}}, {},
                   {offload_lock::detail::sys::monotonic_ms() + 5000, {}}));
  };
  put("/offload-lock/fleet/x/1", "junk");
  put("/offload-lock/fleet/x/2", "{\"host\":\"h\",\"path\":\"/p\",\"pid\":\"1\"}");
  put("/offload-lock/fleet/x/3",
      "{\"host\":\"evil\\u001b[2J\",\"path\":\"/p\\r\\n\",\"holding\":true,\"pid\":5,\"label\":\"\\u001b]0;x\\u0007l\"}");
  const env_changes env{{"OFFLOAD_LOCK_FLEET", "etcd://" + c.endpoints()}};
  auto r = run_cli({"status", "--fleet"}, env);
  CHECK(r.code == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\r') == std::string::npos);
  CHECK(r.out.find("2 unreadable record(s) left out") != std::string::npos);
  CHECK(r.out.find("fleet: 1 host, 1 lock held") != std::string::npos);
}
