// etcd locks as the command and the library use them, against a real etcd
// (one member, started by each case): the same behaviour as a local lock
// (run, hold, acquire, release, status, wait-free, the queue, yield
// requests, the exit codes), liveness by the lease, and the fencing token.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "etcd/client.hpp"
#include "etcd/record.hpp"
#include "etcd/same_machine.hpp"
#include "etcd/cluster.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/offload_lock.h"
#include "os/clock.hpp"
#include "os/process.hpp"

using namespace olt;
using json = nlohmann::json;
namespace ol = offload_lock;
namespace etcd = offload_lock::detail::etcd;

TEST_CASE("etcd lock: run, hold and status as for a local lock, with a fencing token", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  auto free = etcd_cli(c, "gpu", {"status"});
  CHECK(free.code == 1);
  CHECK(free.out.find("free") != std::string::npos);

  child h(cli_exe(), etcd_args(c, "gpu", {"--json", "hold", "--label", "A", "--expect", "20m"}));
  const json j = acquired(h);
  CHECK(j["held"] == true);
  CHECK(j["label"] == "A");
  const std::uint64_t fence = j["fence"].get<std::uint64_t>();
  CHECK(fence > 0);

  auto held = etcd_cli(c, "gpu", {"status"});
  CHECK(held.code == 0);
  CHECK(held.out.find("held by A (pid ") != std::string::npos);
  CHECK(held.out.find("expected free in ~") != std::string::npos);
  auto js = json::parse(etcd_cli(c, "gpu", {"--json", "status"}).out);
  CHECK(js["fence"] == fence);
  CHECK(js["pid"] == h.pid());

  // Busy at once with --wait 0: exit 1, naming the holder.
  auto busy = etcd_cli(c, "gpu", {"run", "--wait", "0", "--", "true"});
  CHECK(busy.code == 1);
  CHECK(busy.err.find("busy: " + c.url("gpu") + " is held by A") != std::string::npos);
  auto timed = etcd_cli(c, "gpu", {"acquire", "--wait", "300ms"});
  CHECK(timed.code == 1);
  CHECK(timed.err.find("timed out") != std::string::npos);

  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(etcd_cli(c, "gpu", {"status"}).code == 1);

  // CMD gets the fencing token, greater than the one before.
  auto r = etcd_cli(c, "gpu", {"run", "--", "sh", "-c", "echo $OFFLOAD_LOCK_FENCE $OFFLOAD_LOCK_PATH"});
  REQUIRE(r.code == 0);
  const std::uint64_t next = std::stoull(r.out);
  CHECK(next > fence);
  CHECK(r.out.find(c.url("gpu")) != std::string::npos);
  // And CMD's status is run's.
  CHECK(etcd_cli(c, "gpu", {"run", "--", "sh", "-c", "exit 7"}).code == 7);
}

TEST_CASE("etcd lock: waiters are served by priority, then arrival, and see their places", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  temp_dir d;
  const std::string order = (d.path / "order").string();
  child h(cli_exe(), etcd_args(c, "q", {"hold", "--label", "holder", "--expect", "1m"}));
  (void)acquired(h);
  std::vector<std::unique_ptr<child>> ws;
  const std::vector<std::pair<std::string, std::string>> arrivals = {
      {"w1", "0"}, {"w2", "interactive"}, {"w3", "0"}, {"w4", "batch"}};
  for (const auto& [label, priority] : arrivals) {
    ws.push_back(std::make_unique<child>(
        cli_exe(), etcd_args(c, "q", {"run", "--label", label, "--priority", priority, "--expect", "2m", "--", "sh",
                                      "-c", "echo " + label + " >> " + order})));
    const int n = static_cast<int>(ws.size());
    REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "q") == n; }, 30s));
  }
  auto st = json::parse(etcd_cli(c, "q", {"--json", "status"}).out);
  REQUIRE(st["waiters"].size() == 4);
  CHECK(st["waiters"][0]["label"] == "w2");
  CHECK(st["waiters"][0]["position"] == 1);
  CHECK(st["waiters"][1]["label"] == "w1");
  CHECK(st["waiters"][3]["label"] == "w4");
  // ETAs: the holder's expected free time, plus 2m for each one ahead.
  const auto eta0 = st["waiters"][0]["etaMs"].get<long long>();
  const auto eta2 = st["waiters"][2]["etaMs"].get<long long>();
  CHECK(eta0 > 0);
  CHECK(eta0 <= 60'000);
  CHECK(eta2 - eta0 >= 239'000);
  CHECK(eta2 - eta0 <= 241'000);
  auto text = etcd_cli(c, "q", {"status"}).out;
  CHECK(text.find("waiting: w2 (pid ") != std::string::npos);
  CHECK(text.find(", #1, priority 10, ETA ~") != std::string::npos);

  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  for (auto& w : ws) CHECK(w->wait(60s) == 0);
  CHECK(read_file(order) == "w2\nw1\nw3\nw4\n");
}

TEST_CASE("etcd lock: a release wakes the one waiter next, not every waiter (herd-free)", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child h(cli_exe(), etcd_args(c, "herd", {"hold", "--label", "holder"}));
  (void)acquired(h);
  constexpr int n = 8;
  std::vector<std::unique_ptr<child>> ws;
  for (int k = 0; k < n; ++k) {
    ws.push_back(std::make_unique<child>(cli_exe(), etcd_args(c, "herd", {"-q", "run", "--", "true"})));
    REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "herd") == k + 1; }, 30s));
  }
  // Events etcd delivered to watchers while the queue drained: each
  // handoff wakes the next waiter (the holder key deleted) and the one
  // after it (the entry ahead of it deleted). Were every waiter to watch
  // the holder key, each release would wake all that remain: n(n+1)/2.
  const long long before = etcd_metric(c, 0, "etcd_debugging_mvcc_events_total");
  REQUIRE(before >= 0);
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  for (auto& w : ws) CHECK(w->wait(60s) == 0);
  const long long events = etcd_metric(c, 0, "etcd_debugging_mvcc_events_total") - before;
  INFO("watch events during " << n << " handoffs: " << events);
  CHECK(events <= 3 * (n + 1));
}

TEST_CASE("etcd lock: a killed holder on this machine is taken over at once, and its CMD dies with it", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  temp_dir d;
  const std::string cmd_pid = (d.path / "cmd.pid").string();
  // A lease of 30 s: it cannot lapse before 20 s (renewed every third).
  child victim(cli_exe(), etcd_args(c, "crash", {"--ttl", "30s", "run", "--label", "victim", "--", "sh", "-c",
                                                  "echo $$ > " + cmd_pid + "; exec sleep 60"}));
  REQUIRE(eventually_every_50ms([&] { return fs::exists(cmd_pid) && read_file(cmd_pid).size() > 1; }, 30s));
  const int cmd = std::stoi(read_file(cmd_pid));
  child next(cli_exe(), etcd_args(c, "crash", {"run", "--label", "next", "--", "true"}));
  REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "crash") == 1; }, 30s));
  // Alive, it keeps its lease: the waiter, reading the lease's remaining
  // time as it nears its end, never counts it expired.
  CHECK_FALSE(next.wait(3s));
  const auto killed = std::chrono::steady_clock::now();
  victim.kill(SIGKILL);
  CHECK(victim.wait() == 128 + SIGKILL);
  // CMD held nothing once run was gone: it is killed at once.
  CHECK(eventually([&] { return ::kill(cmd, 0) != 0 || process_state(cmd) == 'Z'; }, 10s));
  CHECK(next.wait(30s) == 0);
  const auto took = std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed);
  INFO("taken over after " << took.count() << " ms (TTL 30 s)");
  // Its death seen on this machine, not its lease's lapse: well before
  // the lease could have lapsed. Speed is the benchmark's to measure.
  CHECK(took < 15s);
}

TEST_CASE("etcd lock: a killed holder on another host is taken over when its lease lapses", "[etcd]") {
  ETCD_OR_SKIP();
  if (!running_as_root()) OLT_NOT_RUN("another host is simulated with unshare -u, which needs root");
  etcd_cluster c;
  // The victim on a host of its own name (a UTS namespace): nothing of it
  // can be judged here but its lease.
  std::vector<std::string> args{"-u", "sh", "-c", "hostname olt-elsewhere && exec \"$0\" \"$@\"", cli_exe()};
  for (auto& a : etcd_args(c, "crash", {"--ttl", "2s", "run", "--label", "victim", "--", "sleep", "60"}))
    args.push_back(a);
  child victim("/usr/bin/unshare", args);
  REQUIRE(eventually_every_50ms([&] {
    auto st = etcd_cli(c, "crash", {"--json", "status"});
    return st.code == 0 && json::parse(st.out).value("host", "") == "olt-elsewhere";
  }, 30s));
  child next(cli_exe(), etcd_args(c, "crash", {"run", "--label", "next", "--", "true"}));
  REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "crash") == 1; }, 30s));
  // Alive, it keeps its lease: the waiter, reading the lease's remaining
  // time as it nears its end, never counts it expired.
  CHECK_FALSE(next.wait(3s));
  const auto killed = std::chrono::steady_clock::now();
  victim.kill(SIGKILL);
  CHECK(next.wait(30s) == 0);
  const auto took = std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed);
  INFO("taken over after " << took.count() << " ms (TTL 2 s)");
  // Not before its lease could lapse (at least two thirds of the TTL after
  // its last renewal); within it, generously for a loaded machine (the
  // waiter revokes the lease once it has surely expired).
  CHECK(took >= 1300ms);
  CHECK(took < 15s);
}

TEST_CASE("etcd lock: a holder or waiter on this machine is judged by its pid as a local one is: gone, reused, exited, elsewhere",
          "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  auto cl = client_of(c);
  const std::string holder = "/offload-lock/lock/gpu/holder";
  // A lease of a minute, kept by nobody: the key stays for the whole case
  // unless a waiter takes it.
  auto lease = cl.grant(60, soon());
  REQUIRE(lease);
  auto put = [&](const etcd::record& r) {
    REQUIRE(cl.txn({}, {{etcd::txn_op::kind::put, holder, etcd::encode(r), lease->id, false}}, {}, soon()));
  };
  // A single try: taken only when judged free at once, no lease lapsing.
  auto try_now = [&] { return etcd_cli(c, "gpu", {"run", "--wait", "0", "--", "true"}).code; };
  child sleeper("/bin/sleep", {"60"});
  etcd::record alive;
  alive.pid = sleeper.pid();
  alive.host = offload_lock::detail::sys::host_name();
  alive.label = "by hand";
  etcd::stamp_here(alive);
  REQUIRE(alive.proc_ticks > 0);
  CHECK(alive.keeper_pid == ::getpid());

  // Alive: held.
  put(alive);
  CHECK(try_now() == 1);
  // The pid now names a process started since (reused): taken.
  etcd::record reused = alive;
  reused.proc_ticks += 1;
  put(reused);
  CHECK(try_now() == 0);
  // Dead and reaped: taken.
  child ended("/bin/true", {});
  REQUIRE(ended.wait() == 0);
  etcd::record dead = alive;
  dead.pid = ended.pid();
  put(dead);
  CHECK(try_now() == 0);
  // The same dead pid, counted in another boot, pid or time namespace, or
  // on another host: not this machine's to judge, held (its lease decides).
  for (int k = 0; k < 4; ++k) {
    etcd::record other = dead;
    if (k == 0) other.boot_id = "00000000-0000-0000-0000-000000000000";
    if (k == 1) other.pid_ns += 1;
    if (k == 2) other.time_ns += 1;
    if (k == 3) other.host = "elsewhere";
    put(other);
    INFO("variant " << k);
    CHECK(try_now() == 1);
  }
  // And without the start it was recorded with: held.
  etcd::record unstamped = dead;
  unstamped.proc_ticks = 0;
  put(unstamped);
  CHECK(try_now() == 1);

  // Exited but not reaped (a zombie of this test) while its keeper, this
  // process, lives: its other threads may still work (a main thread that
  // ended by itself looks the same), or its keeper be releasing it. Never
  // taken while the keeper lives, however long a waiter waits...
  child zombie("/bin/true", {});
  REQUIRE(eventually([&] { return process_state(zombie.pid()) == 'Z'; }, 10s));
  etcd::record exited = alive;
  exited.pid = zombie.pid();
  etcd::stamp_here(exited);
  REQUIRE(exited.proc_ticks > 0);
  put(exited);
  CHECK(try_now() == 1);
  {
    child waiter(cli_exe(), etcd_args(c, "gpu", {"run", "--wait", "60s", "--", "true"}));
    REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "gpu") == 1; }, 30s));
    // (A grace of a second for the keeper, once allowed, took it here.)
    CHECK_FALSE(waiter.wait(3s));
    // ...until it is reaped: dead, it is taken by the one waiting.
    REQUIRE(zombie.wait() == 0);
    CHECK(waiter.wait(30s) == 0);
  }
  // A zombie kept by another process, which lives: held; once that keeper
  // dies, the waiter watching it takes the lock at once.
  child zombie2("/bin/true", {});
  REQUIRE(eventually([&] { return process_state(zombie2.pid()) == 'Z'; }, 10s));
  child keeper("/bin/sleep", {"60"});
  exited.pid = zombie2.pid();
  etcd::stamp_here(exited);
  REQUIRE(exited.proc_ticks > 0);
  const auto keeper_start = offload_lock::detail::sys::start_of(keeper.pid());
  REQUIRE(keeper_start);
  exited.keeper_pid = keeper.pid();
  exited.keeper_ticks = static_cast<std::int64_t>(keeper_start->ticks);
  put(exited);
  CHECK(try_now() == 1);
  {
    child waiter(cli_exe(), etcd_args(c, "gpu", {"run", "--wait", "60s", "--", "true"}));
    REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "gpu") == 1; }, 30s));
    CHECK_FALSE(waiter.wait(2s));
    keeper.kill(SIGKILL);
    (void)keeper.wait();
    CHECK(waiter.wait(30s) == 0);
  }
  // A zombie that keeps its own lease (its keeper is itself) with nothing
  // left running: it keeps nothing, taken at once.
  exited.keeper_pid = exited.pid;
  exited.keeper_ticks = exited.proc_ticks;
  put(exited);
  CHECK(try_now() == 0);
  // One whose main thread ended while another still works (a zombie to
  // /proc): held, its keeper its own or alive elsewhere, for as long as
  // that thread works.
  {
    child half(self_exe(), {"--child", "main-exits", "60"});
    REQUIRE(half.read_line(30s) == std::optional<std::string>("ready"));
    REQUIRE(eventually([&] { return process_state(half.pid()) == 'Z'; }, 10s));
    etcd::record working = alive;
    working.pid = half.pid();
    etcd::stamp_here(working);
    REQUIRE(working.proc_ticks > 0);
    working.keeper_pid = working.pid;
    working.keeper_ticks = working.proc_ticks;
    put(working);
    CHECK(try_now() == 1);
    working.keeper_pid = sleeper.pid();
    working.keeper_ticks = alive.proc_ticks;
    put(working);
    CHECK(try_now() == 1);
    half.kill(SIGKILL);
    (void)half.wait();
  }
  // A zombie whose keeper is gone: taken at once.
  exited.keeper_pid = dead.pid;
  put(exited);
  CHECK(try_now() == 0);

  // A waiter ahead in the line that is gone leaves it at once, not when its
  // lease lapses: the one behind it takes the free lock well within that.
  etcd::record waiting = dead;
  // A lease of its own, a minute long: what frees the line well within it
  // is the judgment, not the lease.
  auto waiter_lease = cl.grant(60, soon());
  REQUIRE(waiter_lease);
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(waiter_lease->id));
  REQUIRE(cl.txn({}, {{etcd::txn_op::kind::put, "/offload-lock/lock/gpu/queue/" + std::string(name),
                       etcd::encode(waiting), waiter_lease->id, false}}, {}, soon()));
  CHECK(waiting_count(c, "gpu") == 1);
  CHECK(etcd_cli(c, "gpu", {"run", "--wait", "20s", "--", "true"}).code == 0);
  CHECK(waiting_count(c, "gpu") == 0);
  (void)zombie2.wait();
  sleeper.kill(SIGKILL);
}

TEST_CASE("etcd lock: acquire keeps it for --pid until that process exits, and release by token, pid and force", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child sleeper("/bin/sleep", {"60"});
  auto a = etcd_cli(c, "k", {"acquire", "--pid", std::to_string(sleeper.pid()), "--label", "script"});
  REQUIRE(a.code == 0);
  const std::string token = a.out.substr(0, a.out.find('\n'));
  CHECK(token.size() == 32);
  auto st = json::parse(etcd_cli(c, "k", {"--json", "status"}).out);
  CHECK(st["pid"] == sleeper.pid());
  CHECK(st["token"] == token);
  // Not the owner: left in place, exit 3.
  auto wrong = etcd_cli(c, "k", {"release", "--token", "0123456789abcdef"});
  CHECK(wrong.code == 3);
  CHECK(etcd_cli(c, "k", {"status"}).code == 0);
  // The recorded holder exits: its keeper releases the lock.
  sleeper.kill(SIGKILL);
  (void)sleeper.wait();
  CHECK(eventually_every_50ms([&] { return etcd_cli(c, "k", {"status"}).code == 1; }, 30s));

  // By token.
  child sleeper2("/bin/sleep", {"60"});
  auto b = etcd_cli(c, "k", {"acquire", "--pid", std::to_string(sleeper2.pid())});
  REQUIRE(b.code == 0);
  CHECK(etcd_cli(c, "k", {"release", "--token", b.out.substr(0, 32)}).code == 0);
  CHECK(etcd_cli(c, "k", {"status"}).code == 1);
  // By pid, and by force.
  auto e = etcd_cli(c, "k", {"acquire", "--pid", std::to_string(sleeper2.pid())});
  REQUIRE(e.code == 0);
  CHECK(etcd_cli(c, "k", {"release", "--pid", std::to_string(sleeper2.pid())}).code == 0);
  auto f = etcd_cli(c, "k", {"acquire", "--pid", std::to_string(sleeper2.pid()), "--label", "forced"});
  REQUIRE(f.code == 0);
  auto forced = etcd_cli(c, "k", {"release", "--force"});
  CHECK(forced.code == 0);
  CHECK(forced.err.find("removed " + c.url("k") + ", held by forced") != std::string::npos);
  CHECK(etcd_cli(c, "k", {"status"}).code == 1);
  sleeper2.kill(SIGKILL);
}

TEST_CASE("etcd lock: acquire --pid keeps it while that process's main thread has ended but another works",
          "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child half(self_exe(), {"--child", "main-exits", "60"});
  REQUIRE(half.read_line(30s) == std::optional<std::string>("ready"));
  REQUIRE(eventually([&] { return process_state(half.pid()) == 'Z'; }, 10s));
  // A short TTL: the keeper looks at the process every renewal (667 ms).
  REQUIRE(etcd_cli(c, "half", {"--ttl", "2s", "acquire", "--pid", std::to_string(half.pid())}).code == 0);
  // A zombie to /proc, but still at work: held for as long as it works.
  for (int k = 0; k < 6; ++k) {
    std::this_thread::sleep_for(500ms);
    CHECK(etcd_cli(c, "half", {"status"}).code == 0);
  }
  half.kill(SIGKILL);
  (void)half.wait();
  CHECK(eventually_every_50ms([&] { return etcd_cli(c, "half", {"status"}).code == 1; }, 30s));
}

TEST_CASE("etcd lock: a holder whose key is removed is told, as for a local lock (hold exit 5, run --on-lost term)",
          "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  auto cl = client_of(c);
  child h(cli_exe(), etcd_args(c, "lost", {"--json", "hold", "--label", "H"}));
  (void)acquired(h);
  auto del = cl.txn({}, {{etcd::txn_op::kind::del, "/offload-lock/lock/lost/holder", "", 0, false}}, {}, soon());
  REQUIRE(del);
  // Told while it holds, not only at its release.
  CHECK(eventually_every_50ms([&] { return h.err_text().find("WARNING") != std::string::npos; }, 30s));
  h.close_stdin();
  CHECK(h.wait(30s) == 5);
  CHECK(h.err_text().find("WARNING: the lock " + c.url("lost") + " was removed or replaced by someone else") !=
        std::string::npos);
  CHECK(h.err_text().find("{\"event\":\"lost\",\"path\":\"" + c.url("lost") + "\"") != std::string::npos);

  // A value put over the holder key in place (its create revision kept) by
  // someone else: told as a loss, and left alone by the release.
  {
    child o(cli_exe(), etcd_args(c, "over", {"--json", "hold", "--label", "O"}));
    (void)acquired(o);
    REQUIRE(cl.txn({}, {{etcd::txn_op::kind::put, "/offload-lock/lock/over/holder", "theirs", 0, false}}, {}, soon()));
    CHECK(eventually_every_50ms([&] { return o.err_text().find("WARNING") != std::string::npos; }, 30s));
    o.close_stdin();
    CHECK(o.wait(30s) == 5);
    auto left = cl.range("/offload-lock/lock/over/holder", false, soon());
    REQUIRE(left);
    REQUIRE(left->kvs.size() == 1);
    CHECK(left->kvs[0].value == "theirs");
  }

  temp_dir d;
  const std::string started = (d.path / "started").string();
  child r(cli_exe(), etcd_args(c, "lost", {"run", "--on-lost", "term", "--", "sh", "-c",
                                            "touch " + started + "; exec sleep 60"}));
  REQUIRE(eventually([&] { return fs::exists(started); }, 30s));
  REQUIRE(cl.txn({}, {{etcd::txn_op::kind::del, "/offload-lock/lock/lost/holder", "", 0, false}}, {}, soon()));
  CHECK(r.wait(30s) == 128 + SIGTERM);
  CHECK(r.err_text().find("sending it SIGTERM") != std::string::npos);
}

TEST_CASE("etcd lock: run reports a lock removed while CMD ran, though CMD has ended by the time run looks", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  auto cl = client_of(c);
  temp_dir d;
  const std::string started = (d.path / "started").string(), go = (d.path / "go").string();
  child r(cli_exe(), etcd_args(c, "gone", {"run", "--", "sh", "-c",
                                           "touch " + started + "; while [ ! -e " + go + " ]; do sleep 0.05; done"}));
  REQUIRE(eventually([&] { return fs::exists(started); }, 30s));
  const int cmd = json::parse(etcd_cli(c, "gone", {"--json", "status"}).out).value("pid", 0);
  REQUIRE(cmd > 0);
  // run paused: the lock is removed while CMD runs, then CMD ends; run
  // sees both only when it runs again, with CMD's exit already there.
  REQUIRE(stop_process(r.pid()));
  REQUIRE(cl.txn({}, {{etcd::txn_op::kind::del, "/offload-lock/lock/gone/holder", "", 0, false}}, {}, soon()));
  write_file(go, "");
  REQUIRE(eventually([&] { return process_state(cmd) == 'Z'; }, 30s));
  ::kill(r.pid(), SIGCONT);
  CHECK(r.wait(30s) == 0);
  CHECK(r.err_text().find("removed or replaced by someone else") != std::string::npos);
}

TEST_CASE("etcd lock: wait-free wakes on the release, and --within answers at once", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  CHECK(etcd_cli(c, "wf", {"wait-free", "--wait", "0"}).code == 0);
  child h(cli_exe(), etcd_args(c, "wf", {"hold", "--label", "H", "--expect", "1h"}));
  (void)acquired(h);
  CHECK(etcd_cli(c, "wf", {"wait-free", "--wait", "0"}).code == 1);
  auto within = etcd_cli(c, "wf", {"wait-free", "--within", "1m", "--wait", "1m"}, {}, 30s);
  CHECK(within.code == 1);
  CHECK(within.err.find("not free within 1m") != std::string::npos);
  child w(cli_exe(), etcd_args(c, "wf", {"wait-free", "--wait", "2m"}));
  CHECK(!w.wait(500ms));
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(w.wait(30s) == 0);
}

TEST_CASE("etcd lock: a waiter of a higher priority asks a holder that can yield to make way", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  temp_dir d;
  const std::string ready = (d.path / "ready").string(), yielded = (d.path / "yielded").string();
  child low(cli_exe(),
            etcd_args(c, "y", {"run", "--label", "low", "--yield-signal", "USR1", "--", "sh", "-c",
                               "trap 'touch " + yielded + "; exit 0' USR1; touch " + ready +
                                   "; while true; do sleep 0.1; done"}));
  REQUIRE(eventually([&] { return fs::exists(ready); }, 30s));
  // A waiter of the same priority asks nothing.
  child same(cli_exe(), etcd_args(c, "y", {"run", "--label", "same", "--", "true"}));
  REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "y") == 1; }, 30s));
  CHECK(!eventually([&] { return fs::exists(yielded); }, 1s));
  child high(cli_exe(), etcd_args(c, "y", {"run", "--label", "high", "--priority", "10", "--", "true"}));
  CHECK(eventually([&] { return fs::exists(yielded); }, 30s));
  CHECK(low.wait(30s) == 0);
  CHECK(high.wait(30s) == 0);
  CHECK(same.wait(30s) == 0);
  CHECK(low.err_text().find("high (pid ") != std::string::npos);
}

TEST_CASE("etcd lock: status --watch --json prints a line on each change", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child watch(cli_exe(), etcd_args(c, "w", {"--json", "status", "--watch"}));
  auto first = watch.read_line(30s);
  REQUIRE(first);
  CHECK(json::parse(*first)["held"] == false);
  // Lines until one shows `want` (the hold queues for a moment first: a
  // line of its own), each a --json status object.
  auto until = [&](const std::function<bool(const json&)>& want) {
    for (int k = 0; k < 10; ++k) {
      auto line = watch.read_line(30s);
      if (!line) return false;
      const json j = json::parse(*line);
      REQUIRE(j.contains("waiters"));
      if (want(j)) return true;
    }
    return false;
  };
  child h(cli_exe(), etcd_args(c, "w", {"hold", "--label", "H"}));
  (void)acquired(h);
  CHECK(until([](const json& j) { return j["label"] == "H"; }));
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(until([](const json& j) { return j["held"] == false; }));
  watch.kill(SIGTERM);
  CHECK(watch.wait(30s) == 0);
}

TEST_CASE("etcd lock through the library and the C API: fence, nesting, children, loss", "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  const std::string url = c.url("lib");
  ol::lock_options o;
  o.path = url;
  o.label = "lib";
  std::atomic<int> lost{0};
  o.on_lost = [&](const ol::error& e) {
    if (e == ol::errc::lost) ++lost;
  };
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  CHECK(l->fence() > 0);
  CHECK(l->path() == url);
  CHECK(l->still_held());
  CHECK(ol::inspect(url).fence == l->fence());
  // Nested on the same thread: straight through, and its release leaves the lock.
  {
    auto inner = ol::lock::acquire(url, ol::milliseconds(0));
    REQUIRE(inner);
    CHECK(inner->nested());
    CHECK(!inner->release());
  }
  CHECK(l->still_held());
  // Another thread waits for it (busy at once).
  std::thread([&] { CHECK(ol::lock::acquire(url, ol::milliseconds(0)).error() == ol::errc::busy); }).join();
  // A child process started with child_environment() passes through.
  env_changes env;
  for (const auto& [k, v] : l->child_environment()) env[k] = v;
  auto passed = run_cli({"--lock", url, "acquire", "--wait", "0"}, env);
  CHECK(passed.code == 0);
  CHECK(passed.err.find("passing through") != std::string::npos);
  CHECK(env["OFFLOAD_LOCK_FENCE"].value_or("") == std::to_string(l->fence()));
  CHECK(!l->release());
  CHECK(!ol::inspect(url).held);

  // The C API: acquire, fence, release; a busy message names the holder.
  offload_lock_options co;
  offload_lock_options_init(&co);
  co.path = url.c_str();
  co.label = "c-api";
  offload_lock_handle* ch = nullptr;
  char message[512] = "";
  REQUIRE(offload_lock_acquire_ex(&co, &ch, message, sizeof message) == OFFLOAD_LOCK_OK);
  const std::uint64_t cf = offload_lock_fence(ch);
  CHECK(cf > 0);
  offload_lock_queue_info q{};
  q.size = sizeof q;
  offload_lock_info_ex info;
  CHECK(offload_lock_inspect_queue(url.c_str(), 0, &info, &q) == OFFLOAD_LOCK_OK);
  CHECK(q.fence == cf);
  CHECK(std::string(info.label) == "c-api");
  std::thread([&] {
    offload_lock_handle* other = nullptr;
    char m[512] = "";
    CHECK(offload_lock_acquire(url.c_str(), 0, "x", &other, m, sizeof m) == OFFLOAD_LOCK_BUSY);
    CHECK(std::string(m).find("is held by c-api") != std::string::npos);
  }).join();
  CHECK(offload_lock_release(ch) == OFFLOAD_LOCK_OK);

  // Loss: the key removed by someone else.
  auto l2 = ol::lock::acquire(o);
  REQUIRE(l2);
  auto cl = client_of(c);
  REQUIRE(cl.txn({}, {{etcd::txn_op::kind::del, "/offload-lock/lock/lib/holder", "", 0, false}}, {}, soon()));
  CHECK(eventually([&] { return lost.load() == 1; }, 30s));
  CHECK(!l2->still_held());
  CHECK(l2->release() == ol::errc::lost);
  // Bad input: several slots to choose among, a bad URL.
  ol::lock_options many = o;
  many.gpus = 2;
  CHECK(ol::lock::acquire(many).error() == ol::errc::bad_input);
  CHECK(ol::lock::acquire("etcd://127.0.0.1:1/bad name", ol::milliseconds(0)).error() == ol::errc::bad_input);
}

TEST_CASE("etcd lock: a server that remembers the highest fencing token refuses a holder that lost the lock",
          "[etcd]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  temp_dir d;
  const std::string script = std::string(OFFLOAD_LOCK_SOURCE_DIR) + "/tests/etcd/fence_server.py";
  const std::string port = std::to_string(free_port());
  child server("/usr/bin/python3", {script, "serve", port});
  REQUIRE(server.read_line(30s) == std::optional<std::string>("ready"));
  const std::string ready = (d.path / "ready").string(), go = (d.path / "go").string();
  const std::string a_said = (d.path / "a").string(), b_said = (d.path / "b").string();
  // A takes the lock, then waits (for `go`) before it sends its work.
  child a(cli_exe(), etcd_args(c, "fence", {"--ttl", "2s", "run", "--label", "A", "--", "sh", "-c",
                                             "touch " + ready + "; while [ ! -e " + go + " ]; do sleep 0.05; done; " +
                                                 "python3 " + script + " send " + port + " > " + a_said}));
  REQUIRE(eventually([&] { return fs::exists(ready); }, 30s));
  // A's offload-lock is paused past its lease's TTL: B takes the lock and sends.
  REQUIRE(stop_process(a.pid()));
  auto b = etcd_cli(c, "fence", {"run", "--wait", "60s", "--label", "B", "--", "sh", "-c",
                                 "python3 " + script + " send " + port + " > " + b_said});
  CHECK(b.code == 0);
  CHECK(read_file(b_said) == "accepted\n");
  // A's CMD still believes it holds the lock, and sends with its older token.
  write_file(go, "");
  CHECK(eventually([&] { return fs::exists(a_said) && !read_file(a_said).empty(); }, 30s));
  CHECK(read_file(a_said).rfind("stale fencing token ", 0) == 0);
  ::kill(a.pid(), SIGCONT);
  CHECK(a.wait(30s) == 0);
  // And A's offload-lock, running again, learned it lost the lock.
  CHECK(a.err_text().find("lost its etcd lease") != std::string::npos);
}
