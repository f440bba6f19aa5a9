// Section 10 of the benchmark: etcd locks beside `etcdctl lock` (see
// etcd_bench.hpp).
#include "etcd_bench.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "etcd/client.hpp"
#include "offload_lock/lock.hpp"
#include "os/clock.hpp"
#include "util.hpp"

namespace bench::etcd_bench {

using json = nlohmann::ordered_json;
namespace ec = offload_lock::detail::etcd;
namespace ol = offload_lock;

namespace {

std::vector<int> free_ports(int n) {
  std::vector<int> socks, ports;
  for (int k = 0; k < n; ++k) {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw failure("no free port");
    socks.push_back(s);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int s : socks) ::close(s);
  return ports;
}

ec::endpoint ep_of(int port) { return {"127.0.0.1", static_cast<std::uint16_t>(port)}; }

ol::detail::sys::net_bounds soon(int ms = 5000) { return {ol::detail::sys::monotonic_ms() + ms, {}}; }

// A test etcd cluster: short elections (heartbeat 50 ms, election 500 ms),
// data where fsync costs little (/dev/shm when it exists), so the figures
// are of the lock, not of the disk.
class cluster {
 public:
  cluster(const std::string& dir, int n) : dir_(dir) {
    const auto ports = free_ports(2 * n);
    token_ = "bench-" + std::to_string(::getpid()) + "-" + std::to_string(mono_ns());
    for (int k = 0; k < n; ++k) {
      ms_.push_back({ports[2 * k], ports[2 * k + 1], "b" + std::to_string(k), {}, false});
      initial_ += (k ? "," : "") + ms_.back().name + "=http://127.0.0.1:" + std::to_string(ports[2 * k + 1]);
    }
    for (int k = 0; k < n; ++k) start(k);
    if (!wait_leader(60'000)) throw failure("the etcd cluster elected no leader within 60 s");
  }
  ~cluster() {
    for (auto& m : ms_) m.proc.kill_and_reap();
  }
  int size() const { return static_cast<int>(ms_.size()); }
  std::string endpoints() const {
    std::string s;
    for (int k = 0; k < size(); ++k) s += (k ? "," : "") + std::string("127.0.0.1:") + std::to_string(ms_[k].client);
    return s;
  }
  std::vector<ec::endpoint> eps() const {
    std::vector<ec::endpoint> v;
    for (const auto& m : ms_) v.push_back(ep_of(m.client));
    return v;
  }
  std::string url(const std::string& name) const { return "etcd://" + endpoints() + "/" + name; }
  void start(int k) {
    auto& m = ms_[static_cast<std::size_t>(k)];
    const std::string client = "http://127.0.0.1:" + std::to_string(m.client);
    const std::string peer = "http://127.0.0.1:" + std::to_string(m.peer);
    m.proc = child({"etcd", "--name", m.name, "--data-dir", dir_ + "/" + m.name, "--listen-client-urls", client,
                    "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls",
                    peer, "--initial-cluster", initial_, "--initial-cluster-token", token_, "--initial-cluster-state",
                    m.started ? "existing" : "new", "--heartbeat-interval", "50", "--election-timeout", "500",
                    "--logger", "zap", "--log-level", "error"},
                   {});
    m.started = true;
  }
  void kill(int k) { ms_[static_cast<std::size_t>(k)].proc.kill_and_reap(); }
  void stop(int k) { ::kill(ms_[static_cast<std::size_t>(k)].proc.pid(), SIGSTOP); }
  void resume(int k) { ::kill(ms_[static_cast<std::size_t>(k)].proc.pid(), SIGCONT); }
  bool wait_leader(int ms) {
    const std::int64_t until = mono_ns() + std::int64_t(ms) * 1'000'000;
    while (mono_ns() < until) {
      int ok = 0, up = 0;
      for (auto& m : ms_) {
        if (!m.proc.running()) continue;
        ++up;
        ec::client c({ep_of(m.client)});
        auto s = c.status(soon(1000));
        if (s && s->leader) ++ok;
      }
      if (up && ok == up) return true;
      sleep_ns(20'000'000);
    }
    return false;
  }

 private:
  struct member {
    int client, peer;
    std::string name;
    child proc;
    bool started;
  };
  std::string dir_, token_, initial_;
  std::vector<member> ms_;
};

// How many keys are under `prefix` now.
std::int64_t keys_under(const cluster& c, const std::string& prefix) {
  ec::client cl(c.eps());
  auto r = cl.range(prefix, true, soon());
  return r ? static_cast<std::int64_t>(r->kvs.size()) : -1;
}

void wait_keys(const cluster& c, const std::string& prefix, std::int64_t n, const std::string& what) {
  const std::int64_t until = mono_ns() + 30'000'000'000LL;
  for (std::int64_t seen = keys_under(c, prefix); seen < n; seen = keys_under(c, prefix)) {
    if (mono_ns() > until)
      throw failure(what + " never showed in etcd (" + std::to_string(seen) + " of " + std::to_string(n) +
                    " keys under " + prefix + ")");
    sleep_ns(2'000'000);
  }
}

// One tool's command line to hold or wait for lock `name` and run argv.
using tool_cmd = std::function<std::vector<std::string>(const std::string& name, const std::vector<std::string>& argv,
                                                        int ttl_s)>;

struct tool {
  std::string label;
  tool_cmd cmd;
  // The keys that show one holder plus n waiters of `name`.
  std::function<std::pair<std::string, std::int64_t>(const std::string& name, int waiters)> queued;
};

// Handoff: the holder's CMD stamps just before it exits; the waiter's CMD
// stamps as it starts. Both processes are the tool's own `... -- CMD`. The
// holder's CMD is let go through a FIFO in `dir`, not its standard input:
// etcdctl gives its CMD none.
summary handoff(const cluster& c, const tool& t, const std::string& dir, const std::string& stamp, int rounds,
                std::mt19937& rng) {
  std::vector<double> ms;
  const std::string go = dir + "/handoff-go-" + t.label;
  for (int r = 0; r < rounds; ++r) {
    const std::string name = "ho-" + t.label + "-" + std::to_string(r);
    ::unlink(go.c_str());
    if (::mkfifo(go.c_str(), 0600) != 0) throw failure("cannot make the FIFO " + go);
    child holder(t.cmd(name, {"sh", "-c", "echo held; read x < " + go + "; exec " + stamp}, 10),
                 {false, true, false});
    holder.expect("held", 30'000, t.label + " holder");
    child waiter(t.cmd(name, {stamp}, 10), {false, true, false});
    const auto [prefix, n] = t.queued(name, 1);
    wait_keys(c, prefix, n, t.label + " waiter");
    sleep_ns(std::uniform_int_distribution<std::int64_t>(5, 25)(rng) * 1'000'000);
    {
      // Non-blocking: a holder gone before it opened the FIFO is a failure,
      // not a hang.
      int fd = -1;
      for (const std::int64_t until = mono_ns() + 30'000'000'000LL; fd < 0 && mono_ns() < until;)
        if ((fd = ::open(go.c_str(), O_WRONLY | O_NONBLOCK)) < 0) sleep_ns(200'000);
      if (fd < 0) throw failure(t.label + " holder never read the FIFO " + go);
      write_line_fd(fd, "go");
      ::close(fd);
    }
    auto released = holder.read_line(30'000);
    auto took = waiter.read_line(30'000);
    if (!released || !took) throw failure(t.label + ": no stamp");
    ms.push_back(double(std::stoll(*took) - std::stoll(*released)) / 1e6);
    (void)holder.wait(30'000);
    (void)waiter.wait(30'000);
  }
  ::unlink(go.c_str());
  return summarize(ms);
}

// Crash takeover: the holder (the tool's process) is SIGKILLed; the
// waiter's CMD stamps as it starts. Its lease's TTL is `ttl_s`. With
// `elsewhere`, the holder runs on a host of its own name (a UTS namespace),
// so nothing of it can be judged but its lease.
summary takeover(const cluster& c, const tool& t, const std::string& stamp, int rounds, int ttl_s,
                 bool elsewhere = false) {
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const std::string name = "tk-" + t.label + "-" + std::to_string(r);
    // CMD says its pid: etcdctl's CMD outlives etcdctl, and is killed after.
    std::vector<std::string> argv = t.cmd(name, {"sh", "-c", "echo held $$; exec sleep 60"}, ttl_s);
    if (elsewhere)
      argv.insert(argv.begin(), {"/usr/bin/unshare", "-u", "sh", "-c", "hostname olt-elsewhere && exec \"$0\" \"$@\""});
    child holder(argv, {false, true, false});
    const std::string held = holder.expect("held", 30'000, t.label + " holder");
    const pid_t cmd = static_cast<pid_t>(std::stol(held.substr(5)));
    child waiter(t.cmd(name, {stamp}, ttl_s), {false, true, false});
    const auto [prefix, n] = t.queued(name, 1);
    wait_keys(c, prefix, n, t.label + " waiter");
    // A moment after the last renewal, whenever that was: the kill falls
    // at a random phase of the renewal period.
    sleep_ns(std::int64_t(300 + 200 * r % 700) * 1'000'000);
    const std::int64_t t0 = mono_ns();
    holder.kill_and_reap();
    auto took = waiter.read_line(60'000);
    ::kill(cmd, SIGKILL);
    if (!took) throw failure(t.label + ": the waiter never took over");
    ms.push_back(double(std::stoll(*took) - t0) / 1e6);
    (void)waiter.wait(30'000);
  }
  return summarize(ms);
}

std::string row(const summary& s) { return fmt(s.p50, 1) + " / " + fmt(s.max, 1); }

// ---- stress: no double holder ----

struct stress_result {
  std::int64_t acquisitions = 0, violations = 0, losses = 0, holder_kills = 0, waiter_kills = 0, member_kills = 0;
  double seconds = 0;
};

stress_result stress(const std::string& dir, const context& cx, int target, int procs) {
  cluster c(dir + "/stress-etcd", 3);
  const std::string url = c.url("stress");
  const std::string sentinel = dir + "/sentinel";
  std::vector<child> kids;
  auto spawn = [&] {
    return child({cx.self, "--child", "e-stress", url, sentinel}, {false, true, false});
  };
  for (int k = 0; k < procs; ++k) kids.push_back(spawn());
  stress_result r;
  std::mt19937 rng(12345);
  const std::int64_t t0 = mono_ns();
  std::int64_t next_kill = t0 + 1'000'000'000, next_member = t0 + 3'000'000'000LL, member_back = 0;
  int member_down = -1;
  // Bounded: a run that stops making progress ends after 15 minutes (10,000
  // acquisitions took 595 s on 2 CPUs).
  const std::int64_t give_up = t0 + 900'000'000'000LL;
  while (r.acquisitions < target && mono_ns() < give_up) {
    for (auto& k : kids)
      while (auto line = k.read_line(0)) {
        if (*line == "a") ++r.acquisitions;
        else if (*line == "v") ++r.violations;
        else if (*line == "l") ++r.losses;
      }
    const std::int64_t now = mono_ns();
    if (now >= next_kill) {
      // The holder SIGKILLed: the process the sentinel names. Between
      // holders (nobody named for 200 ms), a waiter instead. Each kill
      // stalls the queue for about the lease TTL (2 s), so one every 1-3 s.
      std::string named;
      {
        std::ifstream f(sentinel);
        std::getline(f, named);
      }
      auto it = std::find_if(kids.begin(), kids.end(),
                             [&](const child& k) { return !named.empty() && std::to_string(k.pid()) == named; });
      const bool holder = it != kids.end();
      if (!holder && now >= next_kill + 200'000'000)
        it = kids.begin() + std::uniform_int_distribution<std::ptrdiff_t>(0, std::ptrdiff_t(kids.size()) - 1)(rng);
      if (it != kids.end()) {
        it->kill_and_reap();
        *it = spawn();
        ++(holder ? r.holder_kills : r.waiter_kills);
        next_kill = now + std::uniform_int_distribution<std::int64_t>(1000, 3000)(rng) * 1'000'000;
      }
    }
    if (member_down < 0 && now >= next_member) {
      member_down = std::uniform_int_distribution<int>(0, 2)(rng);
      c.kill(member_down);
      ++r.member_kills;
      member_back = now + 1'500'000'000LL;
    } else if (member_down >= 0 && now >= member_back) {
      c.start(member_down);
      member_down = -1;
      next_member = now + 3'000'000'000LL;
    }
    sleep_ns(5'000'000);
  }
  r.seconds = double(mono_ns() - t0) / 1e9;
  for (auto& k : kids) k.kill_and_reap();
  return r;
}

// A stress participant: acquires in a loop (the library, TTL 2 s), checks
// the sentinel as it enters and as it leaves, says "a" per acquisition,
// "v" per double holder seen, "l" per loss it was told of.
int stress_child(const std::string& url, const std::string& sentinel) {
  const std::string mine = std::to_string(::getpid());
  std::atomic<bool> lost{false};
  auto read = [&] {
    std::ifstream f(sentinel);
    std::string s;
    std::getline(f, s);
    return s;
  };
  auto say = [](const char* what) { write_line_fd(1, what); };
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  for (;;) {
    ol::lock_options o;
    o.path = url;
    o.ttl = std::chrono::seconds(2);
    o.label = "stress";
    lost = false;
    o.on_lost = [&](const ol::error&) {
      lost = true;
      // Told: this process no longer believes it holds the lock.
      if (read() == mine) ::unlink(sentinel.c_str());
    };
    auto l = ol::lock::acquire(o);
    if (!l) {
      sleep_ns(100'000'000);  // etcd between leaders: again
      continue;
    }
    // Entering: nobody alive may be inside.
    const std::string before = read();
    if (!before.empty() && before != mine && ::kill(std::stoi(before), 0) == 0) say("v");
    const std::string tmp = sentinel + "." + mine;
    { std::ofstream(tmp) << mine << "\n"; }
    ::rename(tmp.c_str(), sentinel.c_str());
    sleep_ns(std::uniform_int_distribution<std::int64_t>(0, 2000)(rng) * 1000);
    // Leaving: still ours, unless we were told we lost it.
    if (read() != mine && !lost) say("v");
    if (read() == mine) ::unlink(sentinel.c_str());
    if (lost) say("l");
    (void)l->release();
    say("a");
  }
}

// The cost of one local acquire+release as this process's environment
// configures the fleet: the median of batches, in microseconds.
int cost_child(const std::string& path, int ops) {
  std::vector<double> per;
  for (int b = 0; b < 7; ++b) {
    const std::int64_t t0 = mono_ns();
    for (int k = 0; k < ops; ++k) {
      auto l = ol::lock::acquire(path, ol::milliseconds(0));
      if (!l) return 1;
      (void)l->release();
    }
    per.push_back(double(mono_ns() - t0) / 1e3 / ops);
  }
  write_line_fd(1, fmt(summarize(per).median, 2));
  return 0;
}

}  // namespace

int run_child(int argc, char** argv) {
  const std::string mode = argv[2];
  if (mode == "e-stress" && argc >= 5) return stress_child(argv[3], argv[4]);
  if (mode == "e-cost" && argc >= 5) return cost_child(argv[3], std::atoi(argv[4]));
  return 2;
}

result run(const context& cx) {
  result res;
  auto say = [&](const std::string& s) { res.report += s; };
  say("\n10. etcd locks, beside etcdctl lock in the same run\n");
  const std::string etcdctl = which("etcdctl");
  if (which("etcd").empty() || etcdctl.empty()) {
    say("  not run here: no etcd or etcdctl (scripts/setup installs etcd-server and etcd-client)\n");
    res.json["skipped"] = "no etcd";
    return res;
  }
  // /dev/shm when there is one: the figures are the lock's, not fsync's.
  struct stat st {};
  const std::string data = ::stat("/dev/shm", &st) == 0 ? "/dev/shm/offload-lock-bench-" + std::to_string(::getpid())
                                                        : cx.dir + "/etcd-data";
  ::mkdir(data.c_str(), 0700);
  std::mt19937 rng(7);
  json& j = res.json;
  j["etcd_data"] = data;
  try {
    cluster c(data + "/one", 1);
    const std::string eps = c.endpoints();
    const tool ours{"offload-lock",
                    [&](const std::string& name, const std::vector<std::string>& argv, int ttl_s) {
                      std::vector<std::string> v{cx.cli, "--lock", c.url(name), "--ttl", std::to_string(ttl_s) + "s",
                                                 "-q", "run", "--"};
                      v.insert(v.end(), argv.begin(), argv.end());
                      return v;
                    },
                    [&](const std::string& name, int) {
                      return std::make_pair("/offload-lock/lock/" + name + "/queue/", std::int64_t(1));
                    }};
    const tool theirs{"etcdctl",
                      [&](const std::string& name, const std::vector<std::string>& argv, int ttl_s) {
                        std::vector<std::string> v{"/usr/bin/env", "ETCDCTL_API=3", etcdctl, "--endpoints", eps,
                                                   "lock", "--ttl", std::to_string(ttl_s), name, "--"};
                        v.insert(v.end(), argv.begin(), argv.end());
                        return v;
                      },
                      [&](const std::string& name, int waiters) {
                        return std::make_pair(name + "/", std::int64_t(1 + waiters));
                      }};
    const int rounds = cx.quick ? 10 : 60;
    const summary ho_ours = handoff(c, ours, cx.dir, cx.stamp, rounds, rng);
    const summary ho_theirs = handoff(c, theirs, cx.dir, cx.stamp, rounds, rng);
    const int tk_rounds = cx.quick ? 2 : 8;
    const int ttl = 2;
    const summary tk_ours = takeover(c, ours, cx.stamp, tk_rounds, ttl);
    const summary tk_theirs = takeover(c, theirs, cx.stamp, tk_rounds, ttl);
    // The holder on another host: judged by its lease alone (needs root
    // for the UTS namespace).
    std::optional<summary> tk_far;
    if (::geteuid() == 0) tk_far = takeover(c, ours, cx.stamp, tk_rounds, ttl, true);
    say("  one etcd member on loopback, data in " + data + "\n");
    say("  | measurement | offload-lock | etcdctl lock | ratio |\n  |---|---|---|---|\n");
    say("  | handoff, `... -- CMD` to `... -- CMD`, p50 / max ms (" + std::to_string(rounds) + " rounds) | " +
        row(ho_ours) + " | " + row(ho_theirs) + " | " + fmt(ho_ours.p50 / ho_theirs.p50, 2) + "x |\n");
    say("  | crash takeover, holder SIGKILLed on the waiter's machine, TTL 2 s, p50 / max ms (" +
        std::to_string(tk_rounds) + " rounds) | " + row(tk_ours) + " | " + row(tk_theirs) + " | " +
        fmt(tk_ours.p50 / tk_theirs.p50, 2) + "x |\n");
    if (tk_far)
      say("  | crash takeover, holder SIGKILLed on another host, TTL 2 s, p50 / max ms (" +
          std::to_string(tk_rounds) + " rounds) | " + row(*tk_far) + " | " + row(tk_theirs) + " | " +
          fmt(tk_far->p50 / tk_theirs.p50, 2) + "x |\n");
    else
      say("  | crash takeover, holder on another host | not run: the UTS namespace needs root | | |\n");
    j["handoff_ms"] = {{"offload_lock", {{"p50", ho_ours.p50}, {"p99", ho_ours.p99}, {"max", ho_ours.max}}},
                       {"etcdctl", {{"p50", ho_theirs.p50}, {"p99", ho_theirs.p99}, {"max", ho_theirs.max}}}};
    j["takeover_ms"] = {{"ttl_ms", ttl * 1000},
                        {"offload_lock", {{"p50", tk_ours.p50}, {"max", tk_ours.max}}},
                        {"etcdctl", {{"p50", tk_theirs.p50}, {"max", tk_theirs.max}}}};
    if (tk_far) j["takeover_ms"]["offload_lock_other_host"] = {{"p50", tk_far->p50}, {"max", tk_far->max}};
    say(std::string("  goal: handoff p50 no slower than etcdctl lock's: ") +
        (ho_ours.p50 <= ho_theirs.p50 ? "held" : "not held") + " (" + fmt(ho_ours.p50, 1) + " vs " +
        fmt(ho_theirs.p50, 1) + " ms)\n");
    say(std::string("  goal: crash takeover <= TTL + 100 ms (2100 ms), holder on the waiter's machine: ") +
        (tk_ours.max <= ttl * 1000 + 100 ? "held" : "not held") + " (max " + fmt(tk_ours.max, 0) + " ms, p50 " +
        fmt(tk_ours.p50, 0) + " ms)\n");
    if (tk_far)
      say(std::string("  goal: crash takeover <= TTL + 100 ms (2100 ms), holder on another host: ") +
          (tk_far->max <= ttl * 1000 + 100 ? "held" : "not held") + " (max " + fmt(tk_far->max, 0) + " ms, p50 " +
          fmt(tk_far->p50, 0) + " ms; the waiter revokes the lease once it has surely expired)\n");

    // The fleet: 100 hosts published, status --fleet read whole.
    {
      ec::client cl(c.eps());
      for (int h = 0; h < 100; ++h)
        for (int k = 0; k < 3; ++k) {
          char host[16];
          std::snprintf(host, sizeof host, "host%03d", h);
          json v = {{"host", host},      {"path", "/tmp/local-offload-gpu.lock"}, {"gpu", 0},
                    {"holding", k == 0}, {"pid", 1000 + k},                       {"label", "job-" + std::to_string(k)},
                    {"since", ol::detail::sys::now_ms() - 60'000}, {"priority", 0}, {"expectMs", 600'000}};
          if (!cl.txn({}, {{ec::txn_op::kind::put, "/offload-lock/fleet/" + std::string(host) + "/" + std::to_string(k),
                            v.dump(), 0, false}},
                      {}, soon()))
            throw failure("cannot publish the 100 hosts");
        }
      std::vector<double> ms;
      for (int k = 0; k < (cx.quick ? 5 : 20); ++k)
        ms.push_back(double(run_timed({"/usr/bin/env", "OFFLOAD_LOCK_FLEET=etcd://" + eps, cx.cli, "status", "--fleet"},
                                      30'000)) /
                     1e6);
      const summary s = summarize(ms);
      say("  | `status --fleet` over 100 hosts (300 records), whole command, p50 / max ms | " + row(s) +
          " | - | - |\n");
      say(std::string("  goal: status --fleet over 100 hosts <= 200 ms: ") + (s.p50 <= 200 ? "held" : "not held") +
          " (p50 " + fmt(s.p50, 1) + " ms)\n");
      j["fleet_status_100_hosts_ms"] = {{"p50", s.p50}, {"max", s.max}};
    }

    // A local acquisition with the fleet's etcd down, stopped, up, or none.
    {
      const std::string lock = cx.dir + "/fleet-cost.lock";
      const std::string ops = cx.quick ? "200" : "1000";
      auto cost = [&](const std::string& env) {
        std::vector<std::string> argv{"/usr/bin/env"};
        if (env.empty()) argv.push_back("-u");
        argv.push_back(env.empty() ? "OFFLOAD_LOCK_FLEET" : "OFFLOAD_LOCK_FLEET=" + env);
        argv.insert(argv.end(), {cx.self, "--child", "e-cost", lock, ops});
        child k(argv, {false, true, false});
        auto line = k.read_line(300'000);
        (void)k.wait(30'000);
        if (!line) throw failure("the cost child said nothing");
        return std::stod(*line);
      };
      const double none = cost("");
      const double down = cost("etcd://127.0.0.1:" + std::to_string(free_ports(1)[0]));
      const double up = cost("etcd://" + eps);
      c.stop(0);
      const double stopped = cost("etcd://" + eps);
      c.resume(0);
      say("  | local acquire+release, µs/op: no fleet / etcd down / etcd stopped / etcd up | " + fmt(none, 1) +
          " / " + fmt(down, 1) + " / " + fmt(stopped, 1) + " / " + fmt(up, 1) + " | - | - |\n");
      const double worst = std::max(down, stopped) - none;
      say(std::string("  goal: a local acquisition with the fleet's etcd down costs <= 1 ms more: ") +
          (worst <= 1000 ? "held" : "not held") + " (+" + fmt(worst, 1) + " µs)\n");
      j["fleet_cost_us"] = {{"none", none}, {"down", down}, {"stopped", stopped}, {"up", up}};
    }
  } catch (const std::exception& e) {
    say("  failed: " + std::string(e.what()) + "\n");
  }

  // No double holder: 8 processes, SIGKILLs of holders, members killed and
  // started again.
  try {
    const int target = cx.acquisitions > 0 ? cx.acquisitions : cx.quick ? 300 : 10'000;
    const stress_result s = stress(data, cx, target, 8);
    say("  no double holder: " + std::to_string(s.acquisitions) + " acquisitions by 8 processes in " +
        fmt(s.seconds, 1) + " s, three members; " + std::to_string(s.holder_kills) + " holders SIGKILLed (and " +
        std::to_string(s.waiter_kills) + " waiters, when none held), " +
        std::to_string(s.member_kills) + " members killed and started again; " + std::to_string(s.losses) +
        " losses told; " + std::to_string(s.violations) + " double holders\n");
    say(std::string("  goal: 0 double holders in >= ") + std::to_string(target) + " acquisitions: " +
        (s.violations == 0 && s.acquisitions >= target ? "held" : "not held") + "\n");
    j["stress"] = {{"acquisitions", s.acquisitions}, {"double_holders", s.violations}, {"losses", s.losses},
                   {"holder_kills", s.holder_kills}, {"waiter_kills", s.waiter_kills}, {"member_kills", s.member_kills}, {"seconds", s.seconds}};
  } catch (const std::exception& e) {
    say("  stress failed: " + std::string(e.what()) + "\n");
  }
  remove_tree(data);
  return res;
}

}  // namespace bench::etcd_bench
