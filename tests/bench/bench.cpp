// offload-lock-bench: measures, in one run and side by side, the costs and
// latencies of the offload-lock library and command against the v1 Node
// protocol (tests/interop/reference/gpu-lock-v1.mjs) and flock.
//
//   offload-lock-bench [--quick] [--json FILE] [--dir DIR] [--keep] [--only 1,3,...]
//
// Sections (each on fresh lock paths under one temporary directory):
//   1 uncontended acquire+release per operation
//   2 whole process: offload-lock run -- true vs flock(1) FILE true
//   3 handoff latency: holder releases -> waiter (another process) holds
//   4 crash takeover: holder SIGKILLed -> waiter holds
//   5 idle cost of a waiter while nobody releases
//   6 throughput and fairness of N contending processes
//   7 the ordered queue: order, wakeups per handoff, junk entries, v1
//     runners barging, handoff behind a queue
//   8 the history and the live views (ops_bench.cpp)
//   10 etcd locks beside etcdctl lock (etcd_bench.cpp)
// It prints tables, the targets held / not held, and writes JSON.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <deque>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lease_join.hpp"
#include "offload_lock/lock.hpp"
#include "plan.hpp"
#include "etcd_bench.hpp"
#include "goals_bench.hpp"
#include "ops_bench.hpp"
#include "queue_bench.hpp"
#include "util.hpp"

namespace ol = offload_lock;
using json = nlohmann::ordered_json;

namespace bench {
int run_child(int argc, char** argv);
}

namespace {

using namespace bench;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- configuration ----

struct config {
  bool quick = false;
  bool keep = false;
  std::string json_path;
  std::string base_dir;  // parent of the temporary directory
  std::set<int> only;
  std::string self, cli, node, flock_bin, stamp, helper, true_bin;
  std::vector<goals::build> baselines;  // section 9: older builds to compare with
  int etcd_acquisitions = 0;            // section 10's no-double-holder run (0: 10,000, --quick 300)
};

// How much of everything: the full run, and --quick (CI smoke run, < ~60 s).
struct sizes {
  int batches;                     // section 1 batches per mechanism
  int lib_ops, flock_ops, mkdir_ops, node_ops;  // operations per batch
  int whole_runs, whole_node_runs; // section 2 runs per command
  int ho_lib, ho_flock, ho_cli, ho_v1, ho_spawn, ho_long;  // section 3 rounds
  int crash_lib, crash_v1;         // section 4 rounds
  int idle_s;                      // section 5 window
  int tp_ms;                       // section 6 window per configuration
};
constexpr sizes kFull{9, 1000, 20000, 5000, 1000, 100, 40, 400, 400, 150, 30, 100, 60, 200, 20, 10, 5000};
constexpr sizes kQuick{5, 200, 5000, 1000, 200, 20, 6, 60, 60, 20, 4, 20, 10, 30, 3, 2, 1000};

// Section 7 (the queue): its own sizes, since the goals it reports name
// their scales (1,000 handoffs, 10/100/200 waiters, 5,000 junk entries).
struct queue_sizes {
  int fifo_handoffs, fifo_batch;  // handoffs in all, waiters per batch
  int junk_entries, junk_waiters;
  int v1_ms;                      // v1 barging window
  int ho_rounds, ho_single;       // handoffs behind 10 queued, single-waiter rounds
};
constexpr queue_sizes kQueueFull{1000, 25, 5000, 10, 20000, 300, 200};
constexpr queue_sizes kQueueQuick{100, 12, 5000, 10, 3000, 40, 40};
constexpr int kHerdSizes[] = {10, 100, 200};
constexpr int kArrivalGapMs = 5;
constexpr int kV1Runners = 4, kV1QueueDepth = 4, kV1HoldMs = 10;
constexpr int kQueuedDepth = 10;
constexpr uid_t kJunkUid = 65534;  // nobody

// Delay between "the waiter is waiting" and the release, drawn uniformly so
// the release falls at a random phase of a polling waiter's cycle.
constexpr int kDelayLoMs = 5, kDelayHiMs = 25;
constexpr int kV1DelayLoMs = 5, kV1DelayHiMs = 1005;
// Section 3 diagnostic: longer holds.
constexpr int kLongLoMs = 200, kLongHiMs = 300;
// Section 5 diagnostic: unrelated files created and deleted per second in the
// lock's parent directory.
constexpr int kChurnPerS = 10;

// ---- output ----

struct table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string render() const {
    std::vector<std::size_t> w(head.size(), 0);
    auto width = [](const std::string& s) {
      std::size_t n = 0;
      for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // UTF-8 code points
      return n;
    };
    for (std::size_t i = 0; i < head.size(); ++i) w[i] = width(head[i]);
    for (const auto& r : rows)
      for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], width(r[i]));
    std::string out;
    auto line = [&](const std::vector<std::string>& r) {
      std::string l = "  ";
      for (std::size_t i = 0; i < w.size(); ++i) {
        std::string c = i < r.size() ? r[i] : "";
        std::string pad(w[i] - width(c), ' ');
        l += i == 0 ? c + pad : pad + c;
        if (i + 1 < w.size()) l += "  ";
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      out += l + "\n";
    };
    line(head);
    std::size_t total = 2;
    for (auto x : w) total += x + 2;
    out += "  " + std::string(total - 4, '-') + "\n";
    for (const auto& r : rows) line(r);
    return out;
  }
};

std::string ratio(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || b <= 0) return "n/a";
  char buf[32];
  double r = a / b;
  std::snprintf(buf, sizeof buf, r >= 100 ? "%.0f×" : "%.3g×", r);
  return buf;
}

json num(double v) { return std::isnan(v) ? json() : json(v); }
double round3(double v) { return std::round(v * 1000) / 1000; }

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return b;
}

// ---- the benchmark ----

struct handoff_stats {
  std::string name;
  std::vector<double> ms;
  std::vector<double> release_ms;  // how long the holder's release step itself took
  int discarded = 0;  // rounds where the waiter was not waiting before the release
  int clock_bad = 0;  // stamps outside the window they must lie in
  std::string error;
  summary s() const { return summarize(ms); }
  summary rel() const { return summarize(release_ms); }
};

struct idle_stats {
  std::string name;
  bool ok = false;
  std::string error;
  pid_t pid = 0;
  sched_counters before, after;
  double window_s = 0;
  bool acquired_after = false;  // the waiter did take the lock once it was released
};

class benchmark {
 public:
  benchmark(config c) : cfg_(std::move(c)), n_(cfg_.quick ? kQuick : kFull), rng_(20240601) {}

  int run();

 private:
  bool want(int section) const { return cfg_.only.empty() || cfg_.only.count(section); }
  std::string fresh(const std::string& name) {
    std::string d = tmp_ + "/" + name;
    if (::mkdir(d.c_str(), 0777) != 0 && errno != EEXIST)
      throw failure("mkdir " + d + ": " + std::strerror(errno));
    return d;
  }
  void print(const std::string& s) {
    std::cout << s << std::flush;
    report_ += s;
  }
  bool have_node() const { return !cfg_.node.empty(); }
  bool have_flock1() const { return !cfg_.flock_bin.empty(); }
  int delay_ms(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi - 1)(rng_); }

  void uncontended();
  void whole_process();
  void handoff();
  void crash();
  void idle();
  void throughput();
  void queue();
  void targets();

  handoff_stats rounds(const std::string& name, int n, int lo, int hi, const std::function<void()>& hold,
                       const std::function<std::int64_t()>& start_waiter, const std::function<void()>& release,
                       const std::function<std::int64_t()>& collect, const std::function<void()>& after,
                       bool stamp_checked);
  json handoff_json(const handoff_stats& h);

  config cfg_;
  sizes n_;
  std::mt19937 rng_;
  std::string tmp_;
  std::string report_;
  json out_;
  // Values the targets and ratios are judged on.
  double lib_us_ = kNaN, v1_cycle_us_ = kNaN;
  std::optional<handoff_stats> ho_lib_, ho_cli_, crash_lib_;
  std::optional<idle_stats> idle_lib_, idle_cli_;
  // Section 7.
  std::optional<qbench::fifo_result> q_fifo_;
  std::vector<std::pair<int, qbench::drain_result>> q_herd_;
  std::optional<qbench::drain_result> q_junk_, q_junk_base_;
  std::optional<qbench::plant_result> q_plant_;
  std::optional<qbench::barging_result> q_v1_;
  std::optional<qbench::queued_handoff_result> q_ho_;
  std::optional<handoff_stats> q_single_;
};

// ---- section 1 ----

template <class F>
std::vector<double> batches_us(int batches, int ops, F&& op) {
  for (int i = 0; i < std::max(10, ops / 4); ++i) op();  // warm-up, not reported
  std::vector<double> us;
  for (int b = 0; b < batches; ++b) {
    std::int64_t t0 = mono_ns();
    for (int i = 0; i < ops; ++i) op();
    us.push_back(double(mono_ns() - t0) / ops / 1000.0);
  }
  return us;
}

void benchmark::uncontended() {
  print("\n1. Uncontended acquire+release, one process (µs per acquire+release; median of " +
        std::to_string(n_.batches) + " batches)\n");
  struct row {
    std::string name, what;
    int ops = 0;
    std::vector<double> us;
    std::string error;
  };
  std::vector<row> rows;

  auto lib_row = [&](const std::string& name, bool heartbeat, const std::string& what) {
    row r{name, what, n_.lib_ops, {}, {}};
    try {
      ol::lock_options o;
      o.path = fresh(heartbeat ? "u-lib" : "u-lib-nohb") + "/gpu.lock";
      o.wait = std::chrono::milliseconds(0);
      o.heartbeat = heartbeat;
      r.us = batches_us(n_.batches, n_.lib_ops, [&] {
        auto l = ol::lock::acquire(o);
        if (!l) throw failure("acquire: " + l.error().message());
        if (auto e = l->release()) throw failure("release: " + e.message());
      });
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    rows.push_back(r);
  };
  lib_row("library lock::acquire + release", true,
          "offload_lock::lock::acquire({path, wait 0}) then release(), default options (heartbeat thread on)");
  lib_row("library, heartbeat off", false, "the same with lock_options.heartbeat = false (no heartbeat thread)");

  // The gpulease lease (src/lease_join.cpp): what looking for a state root
  // costs where none exists (every row above pays it: the default root is
  // absent on a machine without gpulease), and what holding both costs
  // where one does.
  const char* saved_root = std::getenv("OFFLOAD_LOCK_LEASE_ROOT");
  const std::string saved = saved_root ? saved_root : "";
  const std::string lease_root = fresh("u-lease-root");
  ::setenv("OFFLOAD_LOCK_LEASE_ROOT", (lease_root + "/absent").c_str(), 1);
  {
    row r{"the lease lookup alone, no root",
          "lease_to_take() of a plain lock's plan, the step each acquisition makes (src/lease_join.cpp)", n_.lib_ops,
          {}, {}};
    offload_lock::detail::plan p;
    p.slots = {0};
    r.us = batches_us(n_.batches, n_.lib_ops, [&] {
      if (offload_lock::detail::lease_to_take(p)) throw failure("a lease root exists");
    });
    rows.push_back(r);
  }
  lib_row("library, no gpulease root", true,
          "as the first row, OFFLOAD_LOCK_LEASE_ROOT naming a path that does not exist");
  ::setenv("OFFLOAD_LOCK_LEASE_ROOT", lease_root.c_str(), 1);
  lib_row("library, holding both (a gpulease root)", true,
          "as the first row with a gpulease state root: the lock and a gpulease lease each time");
  if (saved_root) ::setenv("OFFLOAD_LOCK_LEASE_ROOT", saved.c_str(), 1);
  else ::unsetenv("OFFLOAD_LOCK_LEASE_ROOT");

  auto node_row = [&](const std::string& name, const std::string& mode, const std::string& what) {
    row r{name, what, n_.node_ops, {}, {}};
    if (!have_node()) {
      r.error = "node not found";
    } else {
      try {
        std::string lock = fresh("u-v1-" + mode) + "/gpu.lock";
        child c({cfg_.node, cfg_.helper, mode, lock, std::to_string(n_.batches), std::to_string(n_.node_ops)},
                {false, true, true});
        auto line = c.read_line(300'000);
        if (!line) throw failure("no output from node: " + c.drain_err());
        for (double ns : json::parse(*line)) r.us.push_back(ns / 1000.0);
        c.wait(10'000);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
    rows.push_back(r);
  };
  node_row("v1 cycle in Node (mkdir+write+rm)", "cycle",
           "fs.mkdirSync + fs.writeFileSync(meta.json) + fs.rmSync({recursive, force}), timed in Node with hrtime");
  node_row("v1 acquireGpuLock()+release() in Node", "acquire",
           "await acquireGpuLock({waitMs: 0}) + release() from gpu-lock-v1.mjs, timed in Node");

  // The goal's two rows again, side by side: a batch of the library's
  // cycle, then a Node process timing two batches of the v1 cycle (the
  // second counted: the first warms Node up), round after round, so that
  // both meet the same moments of a machine whose speed changes from one
  // minute to the next (the rows above run one after the other).
  {
    row lib{"side by side: library lock::acquire + release",
            "the first row's cycle, one batch per round, alternating with the next row", n_.lib_ops, {}, {}};
    row v1{"side by side: v1 cycle in Node", "the v1 cycle row's, a fresh Node per round, alternating with the row above",
           n_.node_ops, {}, {}};
    if (!have_node()) {
      lib.error = v1.error = "node not found";
    } else {
      try {
        ol::lock_options o;
        o.path = fresh("u-side-lib") + "/gpu.lock";
        o.wait = std::chrono::milliseconds(0);
        const std::string v1_lock = fresh("u-side-v1") + "/gpu.lock";
        for (int b = 0; b < n_.batches; ++b) {
          lib.us.push_back(batches_us(1, n_.lib_ops, [&] {
                             auto l = ol::lock::acquire(o);
                             if (!l) throw failure("acquire: " + l.error().message());
                             if (auto e = l->release()) throw failure("release: " + e.message());
                           }).front());
          child c({cfg_.node, cfg_.helper, "cycle", v1_lock, "2", std::to_string(n_.node_ops)}, {false, true, true});
          auto line = c.read_line(300'000);
          if (!line) throw failure("no output from node: " + c.drain_err());
          const json got = json::parse(*line);
          if (!got.is_array() || got.empty()) throw failure("node printed no batch: " + *line);
          v1.us.push_back(got.back().get<double>() / 1000.0);
          c.wait(10'000);
        }
      } catch (const std::exception& e) {
        lib.error = v1.error = e.what();
      }
    }
    rows.push_back(lib);
    rows.push_back(v1);
  }

  {
    row r{"flock(2) LOCK_EX + LOCK_UN", "flock on a file opened once", n_.flock_ops, {}, {}};
    try {
      std::string f = fresh("u-flock") + "/gpu.flock";
      int fd = ::open(f.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd < 0) throw failure("open " + f + ": " + std::strerror(errno));
      r.us = batches_us(n_.batches, n_.flock_ops, [&] {
        if (::flock(fd, LOCK_EX) != 0 || ::flock(fd, LOCK_UN) != 0) throw failure(std::strerror(errno));
      });
      ::close(fd);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    rows.push_back(r);
  }
  {
    row r{"mkdir + rmdir in C++", "mkdir(2) then rmdir(2) of the lock path", n_.mkdir_ops, {}, {}};
    try {
      std::string p = fresh("u-mkdir") + "/gpu.lock";
      r.us = batches_us(n_.batches, n_.mkdir_ops, [&] {
        if (::mkdir(p.c_str(), 0777) != 0 || ::rmdir(p.c_str()) != 0) throw failure(std::strerror(errno));
      });
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    rows.push_back(r);
  }

  double flock_us = kNaN, v1_us = kNaN;
  for (auto& r : rows) {
    if (r.error.empty() && r.name.rfind("flock", 0) == 0) flock_us = summarize(r.us).median;
    if (r.error.empty() && r.name.rfind("v1 cycle", 0) == 0) v1_us = summarize(r.us).median;
  }
  v1_cycle_us_ = v1_us;
  table t{{"mechanism", "µs/op", "min–max", "ops/batch", "vs flock", "vs v1 cycle"}, {}};
  json j = json::array();
  double side_lib = kNaN, side_v1 = kNaN;
  for (auto& r : rows) {
    summary s = summarize(r.us);
    if (!r.error.empty()) {
      t.rows.push_back({r.name, "error: " + r.error});
    } else {
      t.rows.push_back({r.name, fmt(s.median, 2), fmt(s.min, 1) + "–" + fmt(s.max, 1), std::to_string(r.ops),
                        ratio(s.median, flock_us), ratio(s.median, v1_us)});
    }
    // The goal's ratio from the side-by-side pair when it was measured.
    if (r.name.rfind("side by side: library", 0) == 0 && r.error.empty()) side_lib = s.median;
    if (r.name.rfind("side by side: v1", 0) == 0 && r.error.empty()) side_v1 = s.median;
    if (r.name.rfind("library lock", 0) == 0 && r.error.empty()) lib_us_ = s.median;
    json jr{{"name", r.name}, {"what", r.what}, {"ops_per_batch", r.ops}};
    if (!r.error.empty()) jr["error"] = r.error;
    else {
      jr["us_per_op_median"] = round3(s.median);
      jr["us_per_op_min"] = round3(s.min);
      jr["us_per_op_max"] = round3(s.max);
      json b = json::array();
      for (double x : r.us) b.push_back(round3(x));
      jr["batches_us_per_op"] = b;
      jr["ratio_to_flock"] = num(s.median / flock_us);
      jr["ratio_to_v1_cycle"] = num(s.median / v1_us);
    }
    j.push_back(jr);
  }
  print(t.render());
  if (!std::isnan(side_lib) && !std::isnan(side_v1)) {
    lib_us_ = side_lib;
    v1_cycle_us_ = side_v1;
    print("Side by side, the library's cycle is " + ratio(side_lib, side_v1) + " the v1 cycle's (" + fmt(side_lib, 2) +
          " vs " + fmt(side_v1, 2) + " µs): the goal's figure.\n");
  }
  double lookup_us = kNaN, lib_us = kNaN;
  for (auto& r : rows) {
    if (!r.error.empty()) continue;
    if (r.name.rfind("the lease lookup", 0) == 0) lookup_us = summarize(r.us).median;
    if (r.name.rfind("library lock", 0) == 0) lib_us = summarize(r.us).median;
  }
  print("The lease lookup without a root is " + fmt(100.0 * lookup_us / lib_us, 2) +
        "% of an uncontended library acquire+release (" + fmt(lookup_us, 2) + " of " + fmt(lib_us, 2) + " µs).\n");
  out_["uncontended"] = {{"unit", "µs per acquire+release"}, {"batches", n_.batches}, {"rows", j},
                         {"lease_lookup_share", num(lookup_us / lib_us)}};
}

// ---- section 2 ----

void benchmark::whole_process() {
  print("\n2. Whole process, uncontended (wall ms from spawn to reap; median of " + std::to_string(n_.whole_runs) +
        " runs, interleaved)\n");
  struct cmd {
    std::string name;
    std::vector<std::string> argv;
    int runs;
    std::vector<double> ms;
    std::string error;
  };
  std::vector<cmd> cmds;
  cmds.push_back({"true (no lock, baseline)", {cfg_.true_bin}, n_.whole_runs, {}, {}});
  try {
    cmds.push_back({"offload-lock --lock P run -- true",
                    {cfg_.cli, "--lock", fresh("w-cli") + "/gpu.lock", "run", "--", "true"}, n_.whole_runs, {}, {}});
    if (have_flock1())
      cmds.push_back({"flock FILE true (util-linux)", {cfg_.flock_bin, fresh("w-flock") + "/gpu.flock", "true"},
                      n_.whole_runs, {}, {}});
    else
      cmds.push_back({"flock FILE true (util-linux)", {}, 0, {}, "flock(1) not found"});
    if (have_node())
      cmds.push_back({"node: v1 acquireGpuLock+release, exit", {cfg_.node, cfg_.helper, "once", fresh("w-v1") + "/gpu.lock"},
                      n_.whole_node_runs, {}, {}});
    else
      cmds.push_back({"node: v1 acquireGpuLock+release, exit", {}, 0, {}, "node not found"});
  } catch (const std::exception& e) {
    print("  error: " + std::string(e.what()) + "\n");
    return;
  }
  constexpr int kWarm = 2;
  int most = 0;
  for (auto& c : cmds) most = std::max(most, c.runs);
  for (int i = -kWarm; i < most; ++i) {
    for (auto& c : cmds) {
      if (!c.error.empty() || i >= c.runs) continue;
      try {
        double ms = double(run_timed(c.argv, 30'000)) / 1e6;
        if (i >= 0) c.ms.push_back(ms);
      } catch (const std::exception& e) {
        c.error = e.what();
      }
    }
  }
  double flock_ms = kNaN, v1_ms = kNaN;
  for (auto& c : cmds) {
    if (!c.error.empty()) continue;
    if (c.name.rfind("flock", 0) == 0) flock_ms = summarize(c.ms).median;
    if (c.name.rfind("node", 0) == 0) v1_ms = summarize(c.ms).median;
  }
  table t{{"command", "median ms", "min", "p99", "runs", "vs flock(1)", "vs v1 node"}, {}};
  json j = json::array();
  for (auto& c : cmds) {
    summary s = summarize(c.ms);
    json jr{{"name", c.name}};
    if (!c.argv.empty()) jr["argv"] = c.argv;
    if (!c.error.empty()) {
      t.rows.push_back({c.name, "error: " + c.error});
      jr["error"] = c.error;
    } else {
      t.rows.push_back({c.name, fmt(s.median, 2), fmt(s.min, 2), fmt(s.p99, 2), std::to_string(s.n),
                        ratio(s.median, flock_ms), ratio(s.median, v1_ms)});
      jr["runs"] = s.n;
      jr["ms_median"] = round3(s.median);
      jr["ms_min"] = round3(s.min);
      jr["ms_p99"] = round3(s.p99);
      jr["ratio_to_flock1"] = num(s.median / flock_ms);
      jr["ratio_to_v1_node"] = num(s.median / v1_ms);
    }
    j.push_back(jr);
  }
  print(t.render());
  out_["whole_process"] = {{"unit", "ms wall per invocation"}, {"rows", j}};
}

// ---- sections 3 and 4: rounds of hold -> waiter waits -> release -> waiter holds ----

handoff_stats benchmark::rounds(const std::string& name, int n, int lo, int hi, const std::function<void()>& hold,
                                const std::function<std::int64_t()>& start_waiter,
                                const std::function<void()>& release, const std::function<std::int64_t()>& collect,
                                const std::function<void()>& after, bool stamp_checked) {
  handoff_stats h;
  h.name = name;
  try {
    for (int i = 0; i < n; ++i) {
      hold();
      std::int64_t t_go = mono_ns();
      std::int64_t t_wait = start_waiter();
      std::int64_t t_seen = mono_ns();
      bool waited = t_wait >= 0;
      if (stamp_checked && waited && (t_wait < t_go || t_wait > t_seen)) ++h.clock_bad;
      sleep_ns(std::int64_t(delay_ms(lo, hi)) * 1'000'000);
      std::int64_t t_release = mono_ns();
      release();
      h.release_ms.push_back(double(mono_ns() - t_release) / 1e6);
      std::int64_t t_hold = collect();
      if (after) after();
      if (!waited) {
        ++h.discarded;
      } else if (t_hold < t_release) {
        ++h.clock_bad;
      } else {
        h.ms.push_back(double(t_hold - t_release) / 1e6);
      }
    }
  } catch (const std::exception& e) {
    h.error = e.what();
  }
  return h;
}

json benchmark::handoff_json(const handoff_stats& h) {
  summary s = h.s();
  json j{{"name", h.name}, {"rounds", s.n}};
  if (!h.error.empty()) j["error"] = h.error;
  if (s.n) {
    j["ms_p50"] = round3(s.p50);
    j["ms_p99"] = round3(s.p99);
    j["ms_min"] = round3(s.min);
    j["ms_max"] = round3(s.max);
    j["ms_mean"] = round3(s.mean);
  }
  if (!h.release_ms.empty()) {
    j["holder_release_call_ms_p50"] = round3(h.rel().p50);
    j["holder_release_call_ms_p99"] = round3(h.rel().p99);
  }
  j["discarded_not_waiting"] = h.discarded;
  j["clock_check_failures"] = h.clock_bad;
  return j;
}

namespace {

std::int64_t stamp_of(const std::string& line) {
  // "w <ns>[ nowait]" / "a <ns>" / "<ns>"
  auto sp = line.find(' ');
  std::string v = sp == std::string::npos ? line : line.substr(sp + 1);
  return std::strtoll(v.c_str(), nullptr, 10);
}

// The waiting side of one round, for a persistent waiter child speaking the
// go / w / a protocol (library, flock and v1 Node waiters).
struct line_waiter {
  child c;
  int timeout_ms;
  std::int64_t start() {
    c.write_line("go");
    std::string w = c.expect("w ", timeout_ms, "waiter");
    if (w.find("nowait") != std::string::npos) return -1;
    return stamp_of(w);
  }
  std::int64_t collect() { return stamp_of(c.expect("a ", timeout_ms, "waiter")); }
};

// The parent as the library holder of one lock path.
struct lib_holder {
  std::string path;
  ol::lock held;
  bool heartbeat = true;
  void hold() {
    ol::lock_options o;
    o.path = path;
    o.wait = std::chrono::seconds(10);
    o.heartbeat = heartbeat;
    auto l = ol::lock::acquire(o);
    if (!l) throw failure("holder acquire: " + l.error().message());
    held = std::move(*l);
  }
  void release() {
    if (auto e = held.release()) throw failure("holder release: " + e.message());
  }
};

struct flock_holder {
  int fd = -1;
  explicit flock_holder(const std::string& file) {
    fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw failure("open " + file + ": " + std::strerror(errno));
  }
  ~flock_holder() {
    if (fd >= 0) ::close(fd);
  }
  void hold() {
    if (::flock(fd, LOCK_EX) != 0) throw failure(std::string("flock: ") + std::strerror(errno));
  }
  void release() { ::flock(fd, LOCK_UN); }
};

}  // namespace

void benchmark::handoff() {
  print("\n3. Handoff latency: holder releases -> waiter in another process holds (ms)\n"
        "   holder: this process (library lock; flock(2) for the flock row), release stamped just before release()\n"
        "   (release() p50: how long that call itself took);\n"
        "   waiter stamps CLOCK_MONOTONIC right after it holds; the release comes " +
        std::to_string(kDelayLoMs) + "–" + std::to_string(kDelayHiMs) + " ms (v1: " + std::to_string(kV1DelayLoMs) +
        "–" + std::to_string(kV1DelayHiMs) + " ms, uniform) after the waiter reports it is waiting\n");
  std::vector<handoff_stats> all;
  const int to = 15'000;

  // Library waiter.
  try {
    lib_holder h{fresh("h-lib") + "/gpu.lock", {}, true};
    line_waiter w{child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true}), to};
    w.c.expect("ready", to, "library waiter");
    all.push_back(rounds("library: lock::acquire waiter", n_.ho_lib, kDelayLoMs, kDelayHiMs, [&] { h.hold(); },
                         [&] { return w.start(); }, [&] { h.release(); }, [&] { return w.collect(); }, nullptr, true));
  } catch (const std::exception& e) {
    all.push_back({"library: lock::acquire waiter", {}, {}, 0, 0, e.what()});
  }
  ho_lib_ = all.back();

  // Diagnostic: the same with longer holds (the release after a long hold
  // may cost the holder more than after a short one).
  try {
    lib_holder h{fresh("h-lib-long") + "/gpu.lock", {}, true};
    line_waiter w{child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true}), to};
    w.c.expect("ready", to, "library waiter");
    all.push_back(rounds("(diagnostic) library waiter, holds of " + std::to_string(kLongLoMs) + "–" +
                             std::to_string(kLongHiMs) + " ms",
                         n_.ho_long, kLongLoMs, kLongHiMs, [&] { h.hold(); }, [&] { return w.start(); },
                         [&] { h.release(); }, [&] { return w.collect(); }, nullptr, true));
  } catch (const std::exception& e) {
    all.push_back({"(diagnostic) library waiter, long holds", {}, {}, 0, 0, e.what()});
  }

  // Diagnostic: the same with the holder's heartbeat off (no heartbeat thread
  // to stop in release()), to separate the holder's share from the waiter's.
  try {
    lib_holder h{fresh("h-lib-nohb") + "/gpu.lock", {}, false};
    line_waiter w{child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true}), to};
    w.c.expect("ready", to, "library waiter");
    all.push_back(rounds("(diagnostic) library waiter, holder heartbeat off", n_.ho_lib, kDelayLoMs, kDelayHiMs,
                         [&] { h.hold(); }, [&] { return w.start(); }, [&] { h.release(); },
                         [&] { return w.collect(); }, nullptr, true));
  } catch (const std::exception& e) {
    all.push_back({"(diagnostic) library waiter, holder heartbeat off", {}, {}, 0, 0, e.what()});
  }

  // CLI waiter: a new `offload-lock run -- stamp` each round.
  try {
    lib_holder h{fresh("h-cli") + "/gpu.lock", {}, true};
    std::optional<child> c;
    all.push_back(rounds(
        "CLI: offload-lock run -- stamp", n_.ho_cli, kDelayLoMs, kDelayHiMs, [&] { h.hold(); },
        [&]() -> std::int64_t {
          c.emplace(std::vector<std::string>{cfg_.cli, "--lock", h.path, "run", "--", cfg_.stamp},
                    child::streams{false, true, true});
          for (;;) {
            auto l = c->read_err_line(to);
            if (!l) throw failure("offload-lock run never said it was waiting");
            if (l->find("waiting for") != std::string::npos) return mono_ns();
          }
        },
        [&] { h.release(); },
        [&]() -> std::int64_t {
          auto l = c->read_line(to);
          if (!l) throw failure("no stamp from the command under offload-lock run: " + c->drain_err());
          return std::strtoll(l->c_str(), nullptr, 10);
        },
        [&] {
          auto st = c->wait(to);
          if (!st || *st != 0) throw failure("offload-lock run exited with " + (st ? std::to_string(*st) : "timeout"));
        },
        false));
  } catch (const std::exception& e) {
    all.push_back({"CLI: offload-lock run -- stamp", {}, {}, 0, 0, e.what()});
  }
  ho_cli_ = all.back();

  // v1 reference runner waiter.
  if (have_node()) {
    try {
      lib_holder h{fresh("h-v1") + "/gpu.lock", {}, true};
      line_waiter w{child({cfg_.node, cfg_.helper, "waiter", h.path}, {true, true, true}), to};
      w.c.expect("ready", 60'000, "v1 waiter");
      all.push_back(rounds("v1 runner: acquireGpuLock waiter", n_.ho_v1, kV1DelayLoMs, kV1DelayHiMs,
                           [&] { h.hold(); }, [&] { return w.start(); }, [&] { h.release(); },
                           [&] { return w.collect(); }, nullptr, true));
    } catch (const std::exception& e) {
      all.push_back({"v1 runner: acquireGpuLock waiter", {}, {}, 0, 0, e.what()});
    }
  } else {
    all.push_back({"v1 runner: acquireGpuLock waiter", {}, {}, 0, 0, "node not found"});
  }

  // flock(2) waiter.
  try {
    std::string f = fresh("h-flock") + "/gpu.flock";
    flock_holder h(f);
    line_waiter w{child({cfg_.self, "--child", "flock-waiter", f}, {true, true, true}), to};
    w.c.expect("ready", to, "flock waiter");
    all.push_back(rounds("flock(2): waiter blocked in flock", n_.ho_flock, kDelayLoMs, kDelayHiMs,
                         [&] { h.hold(); }, [&] { return w.start(); }, [&] { h.release(); },
                         [&] { return w.collect(); }, nullptr, true));
  } catch (const std::exception& e) {
    all.push_back({"flock(2): waiter blocked in flock", {}, {}, 0, 0, e.what()});
  }

  // Context for the CLI row: what starting the stamp command costs by itself.
  {
    handoff_stats b;
    b.name = "(context) spawn -> stamp command running";
    try {
      for (int i = 0; i < n_.ho_spawn; ++i) {
        std::int64_t t0 = mono_ns();
        child c({cfg_.stamp}, {false, true, false});
        auto l = c.read_line(to);
        if (!l) throw failure("no output from " + cfg_.stamp);
        b.ms.push_back(double(std::strtoll(l->c_str(), nullptr, 10) - t0) / 1e6);
        c.wait(to);
      }
    } catch (const std::exception& e) {
      b.error = e.what();
    }
    all.push_back(b);
  }

  double flock50 = kNaN, flock99 = kNaN, v150 = kNaN, v199 = kNaN;
  for (auto& h : all) {
    if (h.ms.empty()) continue;
    if (h.name.rfind("flock", 0) == 0) flock50 = h.s().p50, flock99 = h.s().p99;
    if (h.name.rfind("v1", 0) == 0) v150 = h.s().p50, v199 = h.s().p99;
  }
  table t{{"waiter", "p50 ms", "p99 ms", "min", "max", "n", "release() p50", "p50 vs flock", "p50 vs v1", "p99 vs v1"},
          {}};
  json j = json::array();
  for (auto& h : all) {
    summary s = h.s();
    std::string name = h.name;
    if (h.discarded) name += " [" + std::to_string(h.discarded) + " rounds discarded: waiter not yet waiting]";
    if (h.clock_bad) name += " [" + std::to_string(h.clock_bad) + " clock-check failures]";
    if (!h.error.empty() && s.n == 0) {
      t.rows.push_back({name, "error: " + h.error});
    } else {
      t.rows.push_back({name, fmt(s.p50, 3), fmt(s.p99, 3), fmt(s.min, 3), fmt(s.max, 3), std::to_string(s.n),
                        h.release_ms.empty() ? "" : fmt(h.rel().p50, 3), ratio(s.p50, flock50), ratio(s.p50, v150),
                        ratio(s.p99, v199)});
      if (!h.error.empty()) t.rows.push_back({"  stopped early: " + h.error});
    }
    json jr = handoff_json(h);
    jr["p50_ratio_to_flock"] = num(s.p50 / flock50);
    jr["p99_ratio_to_flock"] = num(s.p99 / flock99);
    jr["p50_ratio_to_v1"] = num(s.p50 / v150);
    jr["p99_ratio_to_v1"] = num(s.p99 / v199);
    j.push_back(jr);
  }
  print(t.render());
  out_["handoff"] = {{"unit", "ms from the holder's release stamp to the waiter's holding stamp"},
                     {"delay_ms", {kDelayLoMs, kDelayHiMs}},
                     {"v1_delay_ms", {kV1DelayLoMs, kV1DelayHiMs}},
                     {"rows", j}};
}

void benchmark::crash() {
  print("\n4. Crash takeover: holder process SIGKILLed -> waiter holds (ms)\n"
        "   holder: a fresh library process per round (offload-lock-bench --child lib-hold), killed and reaped;\n"
        "   stamp taken just before kill(SIGKILL)\n");
  std::vector<handoff_stats> all;
  const int to = 15'000;
  auto run_with = [&](const std::string& name, int n, int lo, int hi, std::vector<std::string> waiter_argv,
                      const std::string& path, int ready_to, bool holder_heartbeat) {
    std::vector<std::string> holder_argv{cfg_.self, "--child", "lib-hold", path};
    if (!holder_heartbeat) holder_argv.push_back("nohb");
    try {
      line_waiter w{child(waiter_argv, {true, true, true}), to};
      w.c.expect("ready", ready_to, name);
      std::optional<child> holder;
      all.push_back(rounds(
          name, n, lo, hi,
          [&] {
            holder.emplace(holder_argv, child::streams{true, true, true});
            holder->expect("held", to, "crash holder");
          },
          [&] { return w.start(); }, [&] { holder->kill_and_reap(); }, [&] { return w.collect(); }, nullptr, true));
    } catch (const std::exception& e) {
      all.push_back({name, {}, {}, 0, 0, e.what()});
    }
  };
  try {
    std::string p = fresh("c-lib") + "/gpu.lock";
    run_with("library: lock::acquire waiter", n_.crash_lib, kDelayLoMs, kDelayHiMs,
             {cfg_.self, "--child", "lib-waiter", p}, p, to, true);
  } catch (const std::exception& e) {
    all.push_back({"library: lock::acquire waiter", {}, {}, 0, 0, e.what()});
  }
  crash_lib_ = all.back();
  // Diagnostic: a holder without the heartbeat thread (and its watcher).
  try {
    std::string p = fresh("c-lib-nohb") + "/gpu.lock";
    run_with("(diagnostic) library waiter, holder heartbeat off", n_.crash_lib, kDelayLoMs, kDelayHiMs,
             {cfg_.self, "--child", "lib-waiter", p}, p, to, false);
  } catch (const std::exception& e) {
    all.push_back({"(diagnostic) library waiter, holder heartbeat off", {}, {}, 0, 0, e.what()});
  }
  if (have_node()) {
    std::string p = fresh("c-v1") + "/gpu.lock";
    run_with("v1 runner: acquireGpuLock waiter", n_.crash_v1, kV1DelayLoMs, kV1DelayHiMs,
             {cfg_.node, cfg_.helper, "waiter", p}, p, 60'000, true);
  } else {
    all.push_back({"v1 runner: acquireGpuLock waiter", {}, {}, 0, 0, "node not found"});
  }
  double v150 = kNaN, v199 = kNaN;
  for (auto& h : all)
    if (h.name.rfind("v1", 0) == 0 && !h.ms.empty()) v150 = h.s().p50, v199 = h.s().p99;
  table t{{"waiter", "p50 ms", "p99 ms", "min", "max", "n", "kill+reap p50", "p50 vs v1", "p99 vs v1"}, {}};
  json j = json::array();
  for (auto& h : all) {
    summary s = h.s();
    std::string name = h.name;
    if (h.discarded) name += " [" + std::to_string(h.discarded) + " discarded]";
    if (h.clock_bad) name += " [" + std::to_string(h.clock_bad) + " clock-check failures]";
    if (!h.error.empty() && s.n == 0) {
      t.rows.push_back({name, "error: " + h.error});
    } else {
      t.rows.push_back({name, fmt(s.p50, 3), fmt(s.p99, 3), fmt(s.min, 3), fmt(s.max, 3), std::to_string(s.n),
                        h.release_ms.empty() ? "" : fmt(h.rel().p50, 3), ratio(s.p50, v150), ratio(s.p99, v199)});
      if (!h.error.empty()) t.rows.push_back({"  stopped early: " + h.error});
    }
    json jr = handoff_json(h);
    jr["p50_ratio_to_v1"] = num(s.p50 / v150);
    jr["p99_ratio_to_v1"] = num(s.p99 / v199);
    j.push_back(jr);
  }
  print(t.render());
  out_["crash_takeover"] = {{"unit", "ms from the kill stamp to the waiter's holding stamp"}, {"rows", j}};
}

// ---- section 5 ----

void benchmark::idle() {
  print("\n5. Idle cost of one waiter while the holder keeps holding (" + std::to_string(n_.idle_s) +
        " s window, all waiters measured side by side, each on its own lock; counts summed over the waiter's threads)\n");
  const int to = 15'000;
  std::vector<idle_stats> rows;
  struct live {
    std::size_t row;
    child c;
    bool lines;  // speaks the w/a protocol (else: CLI run, stamps on stdout)
  };
  std::vector<live> waiters;
  std::deque<lib_holder> holders;  // stable references
  std::optional<flock_holder> fh;

  auto add = [&](const std::string& name, const std::function<void(live&)>& start) {
    rows.push_back({name, false, {}, 0, {}, {}, 0, false});
    try {
      live l{rows.size() - 1, child(), true};
      start(l);
      rows.back().pid = l.c.pid();
      waiters.push_back(std::move(l));
    } catch (const std::exception& e) {
      rows.back().error = e.what();
    }
  };
  auto lib_lock = [&](const std::string& name) -> lib_holder& {
    holders.push_back({fresh(name) + "/gpu.lock", {}, true});
    holders.back().hold();
    return holders.back();
  };

  add("library: lock::acquire waiter", [&](live& l) {
    auto& h = lib_lock("i-lib");
    l.c = child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true});
    l.c.expect("ready", to, "library waiter");
    l.c.write_line("go");
    l.c.expect("w ", to, "library waiter");
  });
  add("CLI: offload-lock run waiter", [&](live& l) {
    auto& h = lib_lock("i-cli");
    l.lines = false;
    l.c = child({cfg_.cli, "--lock", h.path, "run", "--", cfg_.stamp}, {false, true, true});
    for (;;) {
      auto e = l.c.read_err_line(to);
      if (!e) throw failure("offload-lock run never said it was waiting");
      if (e->find("waiting for") != std::string::npos) break;
    }
  });
  add("v1 runner: acquireGpuLock waiter", [&](live& l) {
    if (!have_node()) throw failure("node not found");
    auto& h = lib_lock("i-v1");
    l.c = child({cfg_.node, cfg_.helper, "waiter", h.path}, {true, true, true});
    l.c.expect("ready", 60'000, "v1 waiter");
    l.c.write_line("go");
    l.c.expect("w ", to, "v1 waiter");
  });
  add("flock(2): waiter blocked in flock", [&](live& l) {
    std::string f = fresh("i-flock") + "/gpu.flock";
    fh.emplace(f);
    fh->hold();
    l.c = child({cfg_.self, "--child", "flock-waiter", f}, {true, true, true});
    l.c.expect("ready", to, "flock waiter");
    l.c.write_line("go");
    l.c.expect("w ", to, "flock waiter");
  });

  // Diagnostic: a library waiter whose lock shares its parent directory with
  // unrelated files that come and go (as in a busy /tmp, the default parent).
  std::string churn_dir;
  add("(diagnostic) library waiter, " + std::to_string(kChurnPerS) + " unrelated files/s created+deleted in its dir",
      [&](live& l) {
        auto& h = lib_lock("i-lib-churn");
        churn_dir = tmp_ + "/i-lib-churn";
        l.c = child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true});
        l.c.expect("ready", to, "library waiter");
        l.c.write_line("go");
        l.c.expect("w ", to, "library waiter");
      });

  // Let every waiter settle into its wait (Node finishes starting up).
  sleep_ns(500'000'000);
  std::int64_t t0 = mono_ns();
  for (auto& l : waiters) rows[l.row].before = read_sched(l.c.pid());
  const std::int64_t end = t0 + std::int64_t(n_.idle_s) * 1'000'000'000;
  int churned = 0;
  for (std::int64_t next = t0; mono_ns() < end;) {
    if (!churn_dir.empty()) {
      std::string f = churn_dir + "/unrelated-" + std::to_string(churned++);
      int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) ::close(fd);
      ::unlink(f.c_str());
    }
    next += 1'000'000'000 / kChurnPerS;
    sleep_ns(std::min(next, end) - mono_ns());
  }
  std::int64_t t1 = mono_ns();
  for (auto& l : waiters) {
    idle_stats& r = rows[l.row];
    r.after = read_sched(l.c.pid());
    r.window_s = double(t1 - t0) / 1e9;
    r.ok = r.before.ok && r.after.ok;
    if (!r.ok) r.error = "could not read /proc/" + std::to_string(l.c.pid()) + "/task";
  }
  // Release everything; each waiter must now get its lock.
  for (auto& h : holders)
    if (h.held.owns()) (void)h.held.release();
  if (fh) fh->release();
  for (auto& l : waiters) {
    try {
      if (l.lines) l.c.expect("a ", to, "idle waiter");
      else if (!l.c.read_line(to)) throw failure("no stamp");
      rows[l.row].acquired_after = true;
    } catch (const std::exception&) {
    }
    l.c.close_in();
    if (!l.c.wait(5'000)) l.c.kill_and_reap();
  }

  double v1_wake = kNaN;
  for (auto& r : rows)
    if (r.ok && r.name.rfind("v1", 0) == 0) v1_wake = double(r.after.voluntary - r.before.voluntary);
  table t{{"waiter", "wakeups (vol. switches)", "invol.", "CPU ms", "threads", "per 10 s", "got lock after"}, {}};
  json j = json::array();
  for (auto& r : rows) {
    json jr{{"name", r.name}};
    if (!r.ok) {
      t.rows.push_back({r.name, "error: " + r.error});
      jr["error"] = r.error;
    } else {
      std::int64_t vol = r.after.voluntary - r.before.voluntary;
      std::int64_t inv = r.after.involuntary - r.before.involuntary;
      double cpu = double(r.after.cpu_ns - r.before.cpu_ns) / 1e6;
      double per10 = double(vol) * 10.0 / r.window_s;
      t.rows.push_back({r.name, std::to_string(vol), std::to_string(inv), fmt(cpu, 3), std::to_string(r.after.threads),
                        fmt(per10, 1), r.acquired_after ? "yes" : "NO"});
      jr["window_s"] = round3(r.window_s);
      jr["voluntary_switches"] = vol;
      jr["involuntary_switches"] = inv;
      jr["wakeups_per_10s"] = round3(per10);
      jr["cpu_ms"] = round3(cpu);
      jr["threads"] = r.after.threads;
      jr["acquired_after_release"] = r.acquired_after;
      jr["ratio_wakeups_to_v1"] = num(double(vol) / v1_wake);
      if (r.name.rfind("library", 0) == 0) idle_lib_ = r;
      if (r.name.rfind("CLI", 0) == 0) idle_cli_ = r;
    }
    j.push_back(jr);
  }
  print(t.render());
  out_["idle_waiter"] = {{"window_s", n_.idle_s},
                         {"what", "deltas of voluntary_ctxt_switches, nonvoluntary_ctxt_switches and schedstat "
                                  "run time summed over /proc/<pid>/task/*; CLI: the offload-lock process only"},
                         {"rows", j}};
}

// ---- section 6 ----

void benchmark::throughput() {
  print("\n6. Throughput and fairness: N processes looping acquire -> release for " + fmt(n_.tp_ms / 1000.0, 1) +
        " s each\n");
  struct res {
    std::string mech;
    int procs;
    std::vector<long> counts;
    double seconds;
    std::string error;
  };
  std::vector<res> all;
  for (std::string mech : {"library", "flock(2)"}) {
    for (int procs : {2, 4, 8}) {
      res r{mech, procs, {}, n_.tp_ms / 1000.0, {}};
      try {
        std::string dir = fresh("t-" + std::string(mech == "library" ? "lib" : "flock") + "-" + std::to_string(procs));
        std::string path = dir + (mech == "library" ? "/gpu.lock" : "/gpu.flock");
        std::vector<child> cs;
        for (int i = 0; i < procs; ++i)
          cs.emplace_back(std::vector<std::string>{cfg_.self, "--child", mech == "library" ? "lib-loop" : "flock-loop",
                                                   path, std::to_string(n_.tp_ms)},
                          child::streams{true, true, true});
        for (auto& c : cs) c.expect("ready", 15'000, "loop child");
        for (auto& c : cs) c.write_line("start");
        for (auto& c : cs) r.counts.push_back(std::strtol(c.expect("n ", n_.tp_ms + 60'000, "loop child").c_str() + 2,
                                                          nullptr, 10));
        for (auto& c : cs) c.wait(10'000);
      } catch (const std::exception& e) {
        r.error = e.what();
      }
      all.push_back(r);
    }
  }
  table t{{"mechanism", "procs", "acq/s total", "per process (acquisitions)", "max/min", "vs flock"}, {}};
  json j = json::array();
  auto total_of = [](const res& r) {
    long s = 0;
    for (long c : r.counts) s += c;
    return double(s) / r.seconds;
  };
  for (auto& r : all) {
    json jr{{"mechanism", r.mech}, {"processes", r.procs}, {"seconds", r.seconds}};
    if (!r.error.empty()) {
      t.rows.push_back({r.mech, std::to_string(r.procs), "error: " + r.error});
      jr["error"] = r.error;
      j.push_back(jr);
      continue;
    }
    double total = total_of(r);
    long mx = *std::max_element(r.counts.begin(), r.counts.end());
    long mn = *std::min_element(r.counts.begin(), r.counts.end());
    double fair = mn > 0 ? double(mx) / double(mn) : std::numeric_limits<double>::infinity();
    double flock_total = kNaN;
    for (auto& o : all)
      if (o.mech != r.mech && o.mech == "flock(2)" && o.procs == r.procs && o.error.empty()) flock_total = total_of(o);
    std::string per;
    for (long c : r.counts) per += (per.empty() ? "" : " ") + std::to_string(c);
    t.rows.push_back({r.mech, std::to_string(r.procs), fmt(total, 0), per, fmt(fair, 2),
                      r.mech == "library" ? ratio(total, flock_total) : ""});
    jr["acquisitions_per_s"] = round3(total);
    jr["per_process"] = r.counts;
    jr["max_over_min"] = std::isinf(fair) ? json("inf") : json(round3(fair));
    if (r.mech == "library") jr["ratio_to_flock"] = num(total / flock_total);
    j.push_back(jr);
  }
  print(t.render());
  out_["throughput"] = {{"rows", j}};
}

// ---- section 7 ----

namespace {

json order_json(const qbench::order_result& o) {
  return {{"inversions", o.inversions}, {"priority_violations", o.priority_violations}, {"overlaps", o.overlaps}};
}

std::string order_text(const qbench::order_result& o) {
  return std::to_string(o.inversions) + " inversions, " + std::to_string(o.priority_violations) +
         " priority violations, " + std::to_string(o.overlaps) + " overlapping holds";
}

}  // namespace

void benchmark::queue() {
  const queue_sizes q = cfg_.quick ? kQueueQuick : kQueueFull;
  const int inotify_limit = qbench::inotify_instance_limit();
  print("\n7. The ordered queue: offload-lock waiters are separate processes (offload-lock-bench --child q-waiter,\n"
        "   lock::acquire); the queue forms behind this process holding the lock. Per-user inotify instance limit\n"
        "   (/proc/sys/fs/inotify/max_user_instances): " +
        (inotify_limit < 0 ? std::string("unknown") : std::to_string(inotify_limit)) +
        "; waiters beyond it cannot watch and poll instead (other processes of this user count too).\n");
  json jq;
  jq["inotify_max_user_instances"] = inotify_limit < 0 ? json() : json(inotify_limit);

  // FIFO.
  print("\n   a) FIFO: batches of " + std::to_string(q.fifo_batch) + " waiters queue behind the holder, arrivals ≥ " +
        std::to_string(kArrivalGapMs) + " ms apart (each is waiting before the next starts), every 5th at priority 10;\n"
        "      about 1 in 8 SIGKILLed while queued and one more right after the release; goal: 0 inversions\n");
  q_fifo_ = qbench::fifo(cfg_.self, fresh("q-fifo") + "/gpu.lock", q.fifo_handoffs, q.fifo_batch, kArrivalGapMs, rng_);
  {
    const auto& r = *q_fifo_;
    table t{{"handoffs", "waiters", "batches", "killed queued", "killed draining", "prio 10 served", "min gap ms",
             "inversions", "prio violations", "overlaps", "s"},
            {}};
    t.rows.push_back({std::to_string(r.handoffs), std::to_string(r.waiters), std::to_string(r.batches),
                      std::to_string(r.killed_queued), std::to_string(r.killed_draining),
                      std::to_string(r.high_priority), fmt(r.min_arrival_gap_ms, 2), std::to_string(r.order.inversions),
                      std::to_string(r.order.priority_violations), std::to_string(r.order.overlaps),
                      fmt(r.seconds, 1)});
    print(t.render());
    if (!r.error.empty()) print("  error: " + r.error + "\n");
    jq["fifo"] = {{"handoffs", r.handoffs},
                  {"waiters", r.waiters},
                  {"batches", r.batches},
                  {"killed_while_queued", r.killed_queued},
                  {"killed_while_draining", r.killed_draining},
                  {"priority_10_served", r.high_priority},
                  {"min_arrival_gap_ms", round3(r.min_arrival_gap_ms)},
                  {"order", order_json(r.order)},
                  {"seconds", round3(r.seconds)}};
    if (!r.error.empty()) jq["fifo"]["error"] = r.error;
  }

  // Herd-free.
  print("\n   b) Herd-free: N waiters queued one after another, then released and drained (each holds and releases\n"
        "      at once); wakeups = voluntary context switches summed over every waiter from just before the release\n"
        "      to its exit (every thread, /proc then getrusage), CPU the same; \"until held\": only up to the moment\n"
        "      each waiter held (its own acquire-to-exit left out); handoffs = N; handoff p50 split by whether the\n"
        "      waiter taking the lock could watch (inotify) or had to poll;\n"
        "      goals: ≤ 3 wakeups per handoff, CPU per handoff at 200 ≤ 2× at 10\n");
  q_herd_.clear();
  for (int n : kHerdSizes) q_herd_.push_back({n, qbench::drain(cfg_.self, fresh("q-herd-" + std::to_string(n)) + "/gpu.lock", n)});
  double cpu10 = kNaN;
  {
    table t{{"waiters", "watching (inotify)", "wakeups", "per handoff", "until held", "CPU ms", "CPU ms per handoff",
             "until held", "vs 10", "drain ms", "handoff p50 ms watching", "polling", "inversions"},
            {}};
    json rows = json::array();
    for (auto& [n, r] : q_herd_) {
      json jr{{"waiters", n}};
      if (!r.error.empty()) {
        t.rows.push_back({std::to_string(n), "error: " + r.error});
        jr["error"] = r.error;
        rows.push_back(jr);
        continue;
      }
      const double per = double(r.voluntary) / n, cpu_per = double(r.cpu_ns) / 1e6 / n;
      const double per_w = double(r.voluntary_waiting) / n, cpu_per_w = double(r.cpu_waiting_ns) / 1e6 / n;
      if (n == 10) cpu10 = cpu_per;
      t.rows.push_back({std::to_string(n), std::to_string(r.with_inotify) + "/" + std::to_string(n),
                        std::to_string(r.voluntary), fmt(per, 2), fmt(per_w, 2), fmt(double(r.cpu_ns) / 1e6, 1),
                        fmt(cpu_per, 3), fmt(cpu_per_w, 3), ratio(cpu_per, cpu10), fmt(r.drain_ms, 1),
                        r.handoff_watching_ms.empty() ? "" : fmt(summarize(r.handoff_watching_ms).p50, 3),
                        r.handoff_polling_ms.empty() ? "" : fmt(summarize(r.handoff_polling_ms).p50, 3),
                        std::to_string(r.order.inversions)});
      if (!r.handoff_watching_ms.empty())
        jr["handoff_ms_p50_watching"] = round3(summarize(r.handoff_watching_ms).p50);
      if (!r.handoff_polling_ms.empty()) {
        jr["handoff_ms_p50_polling"] = round3(summarize(r.handoff_polling_ms).p50);
        jr["handoffs_polling"] = r.handoff_polling_ms.size();
      }
      jr["wakeups_per_handoff_until_held"] = round3(per_w);
      jr["cpu_ms_per_handoff_until_held"] = round3(cpu_per_w);
      jr["with_inotify"] = r.with_inotify;
      jr["voluntary_switches"] = r.voluntary;
      jr["wakeups_per_handoff"] = round3(per);
      jr["cpu_ms"] = round3(double(r.cpu_ns) / 1e6);
      jr["cpu_ms_per_handoff"] = round3(cpu_per);
      jr["cpu_per_handoff_ratio_to_10"] = num(round3(cpu_per / cpu10));
      jr["drain_ms"] = round3(r.drain_ms);
      jr["order"] = order_json(r.order);
      rows.push_back(jr);
    }
    print(t.render());
    jq["herd"] = rows;
  }

  // Junk flood.
  print("\n   c) Junk flood: " + std::to_string(q.junk_entries) +
        " entries planted in the lock's waiter registry (half 60 KiB garbage, half well-formed entries claiming\n"
        "      priority 100 and the earliest arrival for live pids that do not wait; none write-locked), then " +
        std::to_string(q.junk_waiters) + " waiters queue and drain;\n"
        "      CPU = each waiter's whole process (start-up included); the same waiters without junk for comparison;\n"
        "      goal: ≤ 50 ms of CPU per waiter in all\n");
  {
    const std::string lock = fresh("q-junk") + "/gpu.lock";
    // The planting user must reach the registry: the run's directory is
    // made 0700 by mkdtemp.
    ::chmod(tmp_.c_str(), 0711);
    q_plant_ = qbench::plant_junk(cfg_.self, lock, q.junk_entries, kJunkUid, "mix");
    if (q_plant_->error.empty()) q_junk_ = qbench::drain(cfg_.self, lock, q.junk_waiters);
    q_junk_base_ = qbench::drain(cfg_.self, fresh("q-junk-base") + "/gpu.lock", q.junk_waiters);
    // Diagnostics (full run): each kind of junk on its own, half as many.
    std::vector<std::pair<std::string, qbench::drain_result>> kinds;
    if (!cfg_.quick && q_plant_->error.empty())
      for (std::string kind : {"big", "forged"}) {
        const std::string l = fresh("q-junk-" + kind) + "/gpu.lock";
        auto p = qbench::plant_junk(cfg_.self, l, q.junk_entries / 2, kJunkUid, kind);
        qbench::drain_result d;
        if (p.error.empty()) d = qbench::drain(cfg_.self, l, q.junk_waiters);
        else d.error = p.error;
        kinds.push_back({"(diagnostic) " + std::to_string(q.junk_entries / 2) +
                             (kind == "big" ? " 60 KiB garbage only" : " forged entries only"),
                         d});
      }
    const auto& p = *q_plant_;
    if (!p.error.empty()) print("  planting failed: " + p.error + "\n");
    else
      print("  planted " + std::to_string(p.planted) + " files as uid " + std::to_string(p.uid) +
            (p.other_user ? " (another user than the waiters)"
                          : " (the waiters' own user: not running as root, so no other user to plant as)") +
            "\n");
    table t{{"registry", "waiters", "CPU ms median", "max", "drain ms", "inversions"}, {}};
    json rows = json::array();
    auto row = [&](const std::string& name, const std::optional<qbench::drain_result>& r) {
      json jr{{"registry", name}};
      if (!r) return;
      if (!r->error.empty()) {
        t.rows.push_back({name, "error: " + r->error});
        jr["error"] = r->error;
      } else {
        summary s = summarize(r->whole_cpu_ms);
        t.rows.push_back({name, std::to_string(r->waiters), fmt(s.median, 2), fmt(s.max, 2), fmt(r->drain_ms, 1),
                          std::to_string(r->order.inversions)});
        jr["waiters"] = r->waiters;
        jr["cpu_ms_per_waiter_median"] = round3(s.median);
        jr["cpu_ms_per_waiter_max"] = round3(s.max);
        jr["drain_ms"] = round3(r->drain_ms);
        jr["order"] = order_json(r->order);
      }
      rows.push_back(jr);
    };
    row(std::to_string(q.junk_entries) + " junk entries", q_junk_);
    row("no junk (baseline)", q_junk_base_);
    for (auto& [name, d] : kinds) row(name, d);
    print(t.render());
    jq["junk_flood"] = {{"entries", q.junk_entries},
                        {"planted", p.planted},
                        {"planted_as_uid", p.uid},
                        {"other_user", p.other_user},
                        {"rows", rows}};
    if (!p.error.empty()) jq["junk_flood"]["error"] = p.error;
  }

  // v1 barging.
  print("\n   d) v1 barging: " + std::to_string(kV1Runners) +
        " v1 runners (Node, gpu-lock-v1.mjs acquireGpuLock: 1 s polls) loop acquire -> hold " +
        std::to_string(kV1HoldMs) + " ms -> release -> pause 0–200 ms,\n      while " +
        std::to_string(kV1QueueDepth) + " offload-lock waiters stay queued (each holds " + std::to_string(kV1HoldMs) +
        " ms; a new one joins as one is served), for " + fmt(q.v1_ms / 1000.0, 0) +
        " s; counted: releases inside the window while an\n      offload-lock waiter was queued, by who held next; goal: the queue's head takes ≥ 95% of releases\n");
  if (!have_node()) {
    print("  not run: node not found\n");
    jq["v1_barging"] = {{"error", "node not found"}};
  } else {
    q_v1_ = qbench::v1_barging(cfg_.self, cfg_.node, cfg_.helper, fresh("q-v1") + "/gpu.lock", kV1Runners,
                               kV1QueueDepth, kV1HoldMs, q.v1_ms);
    const auto& r = *q_v1_;
    const int total = r.lib_acquisitions + r.v1_acquisitions;
    const double share = total ? 100.0 * r.lib_acquisitions / total : kNaN;
    table t{{"releases with a queue", "taken by its head", "taken by v1", "head's share", "releases, queue empty",
             "overlaps", "holds lost to v1 rm -rf", "queue inversions"},
            {}};
    t.rows.push_back({std::to_string(total), std::to_string(r.lib_acquisitions), std::to_string(r.v1_acquisitions),
                      fmt(share, 2) + "%", std::to_string(r.releases_unqueued), std::to_string(r.order.overlaps),
                      std::to_string(r.lost), std::to_string(r.order.inversions)});
    print(t.render());
    if (!r.error.empty()) print("  error: " + r.error + "\n");
    jq["v1_barging"] = {{"v1_runners", r.v1_runners},          {"queue_depth", r.queued_depth},
                        {"seconds", round3(r.seconds)},        {"releases_with_queue", total},
                        {"queue_acquisitions", r.lib_acquisitions}, {"v1_acquisitions", r.v1_acquisitions},
                        {"queue_share_percent", num(share)},   {"releases_queue_empty", r.releases_unqueued},
                        {"holds_lost_to_v1", r.lost},
                        {"order", order_json(r.order)}};
    if (!r.error.empty()) jq["v1_barging"]["error"] = r.error;
  }

  // Handoff behind a queue, and a single waiter in the same run.
  print("\n   e) Handoff with " + std::to_string(kQueuedDepth) +
        " queued waiters (waiter holds 5–25 ms, stamps just before release(); the next stamps right after it holds;\n"
        "      the queue is topped up as it moves, only handoffs with ≥ " + std::to_string(kQueuedDepth) +
        " waiting at the release count), and a single library waiter (section 3's rounds) in the same run;\n"
        "      goal: p50 ≤ 1 ms with " + std::to_string(kQueuedDepth) + " queued\n");
  q_ho_ = qbench::queued_handoff(cfg_.self, fresh("q-ho10") + "/gpu.lock", kQueuedDepth, q.ho_rounds);
  try {
    lib_holder h{fresh("q-ho1") + "/gpu.lock", {}, true};
    line_waiter w{child({cfg_.self, "--child", "lib-waiter", h.path}, {true, true, true}), 15'000};
    w.c.expect("ready", 15'000, "library waiter");
    q_single_ = rounds("single library waiter", q.ho_single, kDelayLoMs, kDelayHiMs, [&] { h.hold(); },
                       [&] { return w.start(); }, [&] { h.release(); }, [&] { return w.collect(); }, nullptr, true);
  } catch (const std::exception& e) {
    q_single_ = handoff_stats{"single library waiter", {}, {}, 0, 0, e.what()};
  }
  {
    table t{{"waiters queued at the release", "p50 ms", "p99 ms", "min", "max", "n", "p50 vs single"}, {}};
    const auto& r = *q_ho_;
    summary s = summarize(r.ms), sa = summarize(r.all_ms), s1 = q_single_->s();
    std::vector<double> d(r.depths.begin(), r.depths.end());
    summary sd = summarize(d);
    t.rows.push_back({"≥ " + std::to_string(kQueuedDepth) + " (depth median " + fmt(sd.median, 0) + ", " +
                          fmt(sd.min, 0) + "–" + fmt(sd.max, 0) + ")",
                      fmt(s.p50, 3), fmt(s.p99, 3), fmt(s.min, 3), fmt(s.max, 3), std::to_string(s.n),
                      ratio(s.p50, s1.p50)});
    t.rows.push_back({"(every handoff of that run)", fmt(sa.p50, 3), fmt(sa.p99, 3), fmt(sa.min, 3), fmt(sa.max, 3),
                      std::to_string(sa.n), ratio(sa.p50, s1.p50)});
    t.rows.push_back({"1 (single waiter)", fmt(s1.p50, 3), fmt(s1.p99, 3), fmt(s1.min, 3), fmt(s1.max, 3),
                      std::to_string(s1.n), ""});
    if (ho_lib_ && !ho_lib_->ms.empty())
      t.rows.push_back({"1 (section 3's library row)", fmt(ho_lib_->s().p50, 3), fmt(ho_lib_->s().p99, 3),
                        fmt(ho_lib_->s().min, 3), fmt(ho_lib_->s().max, 3), std::to_string(ho_lib_->s().n), ""});
    print(t.render());
    if (!r.error.empty()) print("  error: " + r.error + "\n");
    if (!q_single_->error.empty()) print("  single waiter error: " + q_single_->error + "\n");
    json jh{{"depth", kQueuedDepth},
            {"rounds", s.n},
            {"ms_p50", num(s.n ? round3(s.p50) : kNaN)},
            {"ms_p99", num(s.n ? round3(s.p99) : kNaN)},
            {"all_handoffs_ms_p50", num(sa.n ? round3(sa.p50) : kNaN)},
            {"all_handoffs", sa.n},
            {"depth_median", num(sd.n ? sd.median : kNaN)},
            {"order", order_json(r.order)},
            {"single_waiter", handoff_json(*q_single_)},
            {"p50_ratio_to_single", num(s.p50 / s1.p50)}};
    if (!r.error.empty()) jh["error"] = r.error;
    jq["queued_handoff"] = jh;
  }
  out_["queue"] = jq;
}

// ---- targets ----

void benchmark::targets() {
  print("\nTargets\n");
  json j = json::array();
  auto report = [&](const std::string& what, std::optional<bool> held, const std::string& value,
                    double measured = kNaN, double limit = kNaN, const std::string& unit = "") {
    std::string tag = !held ? "[NOT MEASURED]" : *held ? "[HELD]    " : "[NOT HELD]";
    print("  " + tag + " " + what + ": " + value + "\n");
    j.push_back({{"target", what}, {"held", held ? json(*held) : json()}, {"value", value},
                 {"measured", num(measured)}, {"limit", num(limit)}, {"unit", unit}});
  };
  auto ho = [&](const std::optional<handoff_stats>& h, const std::string& who) {
    if (!h || h->ms.empty()) {
      report("handoff p50 ≤ 1 ms (" + who + ")", std::nullopt, h ? h->error : "not run");
      report("handoff p99 ≤ 10 ms (" + who + ")", std::nullopt, h ? h->error : "not run");
      return;
    }
    summary s = h->s();
    report("handoff p50 ≤ 1 ms (" + who + ")", s.p50 <= 1.0, fmt(s.p50, 3) + " ms, n=" + std::to_string(s.n), s.p50,
           1.0, "ms");
    report("handoff p99 ≤ 10 ms (" + who + ")", s.p99 <= 10.0, fmt(s.p99, 3) + " ms, n=" + std::to_string(s.n), s.p99,
           10.0, "ms");
  };
  ho(ho_lib_, "library");
  ho(ho_cli_, "CLI run, includes exec of the command");
  if (crash_lib_ && !crash_lib_->ms.empty()) {
    summary s = crash_lib_->s();
    report("crash takeover p50 ≤ 5 ms (library)", s.p50 <= 5.0, fmt(s.p50, 3) + " ms, n=" + std::to_string(s.n), s.p50,
           5.0, "ms");
  } else {
    report("crash takeover p50 ≤ 5 ms (library)", std::nullopt, crash_lib_ ? crash_lib_->error : "not run");
  }
  auto idle_target = [&](const std::optional<idle_stats>& r, const std::string& who) {
    std::string what = "idle waiter ≤ 2 wakeups in 10 s (" + who + ")";
    if (!r) {
      report(what, std::nullopt, "not run");
      return;
    }
    std::int64_t vol = r->after.voluntary - r->before.voluntary;
    std::string value = std::to_string(vol) + " voluntary switches in " + fmt(r->window_s, 1) + " s";
    if (n_.idle_s < 10) value += " (--quick: shorter window, same threshold)";
    report(what, vol <= 2, value, double(vol), 2.0, "wakeups");
  };
  idle_target(idle_lib_, "library");
  idle_target(idle_cli_, "CLI run");
  if (!std::isnan(lib_us_) && !std::isnan(v1_cycle_us_))
    report("uncontended library acquire+release no slower than the v1 mkdir+write+rm cycle", lib_us_ <= v1_cycle_us_,
           fmt(lib_us_, 2) + " µs vs " + fmt(v1_cycle_us_, 2) + " µs (" + ratio(lib_us_, v1_cycle_us_) + ")", lib_us_,
           v1_cycle_us_, "µs");
  else
    report("uncontended library acquire+release no slower than the v1 mkdir+write+rm cycle", std::nullopt,
           "library or v1 row missing");
  // Section 7: the queue's goals.
  if (want(7)) {
    if (q_fifo_ && q_fifo_->error.empty())
      report("queue FIFO: 0 order inversions in " + std::to_string(q_fifo_->handoffs) +
                 " handoffs, waiters SIGKILLed while queued",
             q_fifo_->order.inversions == 0,
             std::to_string(q_fifo_->order.inversions) + " inversions (" + order_text(q_fifo_->order) + ")",
             q_fifo_->order.inversions, 0, "inversions");
    else
      report("queue FIFO: 0 order inversions", std::nullopt, q_fifo_ ? q_fifo_->error : "not run");
    double cpu10 = kNaN, cpu200 = kNaN;
    for (auto& [n, r] : q_herd_) {
      std::string what = "queue herd-free: ≤ 3 wakeups per handoff, " + std::to_string(n) + " waiters";
      if (!r.error.empty()) {
        report(what, std::nullopt, r.error);
        continue;
      }
      const double per = double(r.voluntary) / n, per_w = double(r.voluntary_waiting) / n;
      report(what, per <= 3.0,
             fmt(per, 2) + " (until each held: " + fmt(per_w, 2) + "; " + std::to_string(r.with_inotify) + "/" +
                 std::to_string(n) + " waiters watching)",
             per, 3.0, "wakeups/handoff");
      if (n == 10) cpu10 = double(r.cpu_ns) / 1e6 / n;
      if (n == 200) cpu200 = double(r.cpu_ns) / 1e6 / n;
    }
    if (!std::isnan(cpu10) && !std::isnan(cpu200))
      report("queue herd-free: CPU per handoff at 200 waiters ≤ 2× at 10", cpu200 <= 2 * cpu10,
             fmt(cpu200, 3) + " ms vs " + fmt(cpu10, 3) + " ms (" + ratio(cpu200, cpu10) + ")", cpu200 / cpu10, 2.0,
             "ratio");
    else
      report("queue herd-free: CPU per handoff at 200 waiters ≤ 2× at 10", std::nullopt, "a size is missing");
    if (q_junk_ && q_junk_->error.empty() && !q_junk_->whole_cpu_ms.empty()) {
      summary s = summarize(q_junk_->whole_cpu_ms);
      report("queue junk flood: ≤ 50 ms CPU per waiter in all, " + std::to_string(q_plant_->planted) +
                 " junk entries" + (q_plant_->other_user ? " of another user" : " of the same user"),
             s.max <= 50.0,
             "max " + fmt(s.max, 2) + " ms, median " + fmt(s.median, 2) + " ms over " +
                 std::to_string(q_junk_->waiters) + " waiters",
             s.max, 50.0, "ms");
    } else {
      report("queue junk flood: ≤ 50 ms CPU per waiter in all", std::nullopt,
             q_junk_ ? q_junk_->error : q_plant_ ? q_plant_->error : "not run");
    }
    if (q_v1_ && q_v1_->error.empty() && q_v1_->lib_acquisitions + q_v1_->v1_acquisitions > 0) {
      const int total = q_v1_->lib_acquisitions + q_v1_->v1_acquisitions;
      const double share = 100.0 * q_v1_->lib_acquisitions / total;
      report("queue vs 4 v1 runners: the queue's head takes ≥ 95% of releases", share >= 95.0,
             fmt(share, 2) + "% of " + std::to_string(total) + " (" + std::to_string(q_v1_->order.overlaps) +
                 " overlapping holds)",
             share, 95.0, "%");
    } else {
      report("queue vs 4 v1 runners: the queue's head takes ≥ 95% of releases", std::nullopt,
             q_v1_ ? q_v1_->error : "not run (node?)");
    }
    if (q_ho_ && !q_ho_->ms.empty()) {
      summary s = summarize(q_ho_->ms);
      std::string single = q_single_ && !q_single_->ms.empty()
                               ? "; single waiter " + fmt(q_single_->s().p50, 3) + " ms in the same run"
                               : "";
      report("queue handoff p50 ≤ 1 ms with 10 queued waiters (library)", s.p50 <= 1.0,
             fmt(s.p50, 3) + " ms, n=" + std::to_string(s.n) + single, s.p50, 1.0, "ms");
    } else {
      report("queue handoff p50 ≤ 1 ms with 10 queued waiters (library)", std::nullopt,
             q_ho_ ? q_ho_->error : "not run");
    }
  }
  out_["targets"] = j;
}

int benchmark::run() {
  std::int64_t t_start = mono_ns();
  std::string base = cfg_.base_dir;
  if (base.empty()) {
    for (const char* v : {"TMPDIR", "TMP", "TEMP"})
      if (const char* e = std::getenv(v); e && *e) {
        base = e;
        break;
      }
    if (base.empty()) base = "/tmp";
  }
  std::string templ = base + "/offload-lock-bench-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    std::cerr << "offload-lock-bench: mkdtemp " << templ << ": " << std::strerror(errno) << "\n";
    return 1;
  }
  tmp_ = buf.data();

  machine_info m = describe_machine(tmp_);
  std::string node_v = have_node() ? first_line_of({cfg_.node, "--version"}) : "";
  std::string flock_v = have_flock1() ? first_line_of({cfg_.flock_bin, "--version"}) : "";
  print("offload-lock-bench (" + std::string(cfg_.quick ? "quick" : "full") + " run) " + now_iso() + "\n");
  print("machine: " + std::to_string(m.nproc) + " CPUs" + (m.cpu.empty() ? "" : " (" + m.cpu + ")") + ", " + m.kernel +
        "\ntemp dir: " + tmp_ + " on " + (m.fs_type.empty() ? "?" : m.fs_type) + " (mount " + m.fs_mount + ")" +
        "\nload average at start: " + m.loadavg + "\n");
  print("offload-lock " + std::string(ol::version()) + " (" + cfg_.cli + "), node " +
        (node_v.empty() ? "not found" : node_v) + ", " + (flock_v.empty() ? "flock(1) not found" : flock_v) + "\n");
  out_["tool"] = "offload-lock-bench";
  out_["mode"] = cfg_.quick ? "quick" : "full";
  out_["started"] = now_iso();
  out_["machine"] = {{"nproc", m.nproc},     {"cpu", m.cpu},           {"kernel", m.kernel},
                     {"temp_dir", tmp_},     {"filesystem", m.fs_type}, {"mount", m.fs_mount},
                     {"loadavg_start", m.loadavg}};
  out_["versions"] = {{"offload_lock", ol::version()}, {"node", node_v}, {"flock", flock_v}};

  auto section = [&](int n, void (benchmark::*f)()) {
    if (!want(n)) return;
    try {
      (this->*f)();
    } catch (const std::exception& e) {
      print("  section " + std::to_string(n) + " failed: " + e.what() + "\n");
    }
  };
  section(1, &benchmark::uncontended);
  section(2, &benchmark::whole_process);
  section(3, &benchmark::handoff);
  section(4, &benchmark::crash);
  section(5, &benchmark::idle);
  section(6, &benchmark::throughput);
  section(7, &benchmark::queue);
  // Section 8, the history and the live views: its own file and goals.
  if (want(8)) {
    try {
      auto r = ops::run({fresh("ops"), cfg_.cli, cfg_.node, OFFLOAD_LOCK_BENCH_SOURCE_DIR, cfg_.quick});
      print(r.report);
      out_["ops"] = r.json;
    } catch (const std::exception& e) {
      print("  section 8 failed: " + std::string(e.what()) + "\n");
    }
  }
  if (want(9)) try {
      goals::setup g{cfg_.self, fresh("goals"), tmp_, {"this build", OFFLOAD_LOCK_BENCH_SHARED_LIB}, cfg_.baselines,
                     cfg_.quick, &out_};
      out_["goals"] = goals::run(g, [&](const std::string& s) { print(s); });
    } catch (const std::exception& e) {
      print("  section 9 failed: " + std::string(e.what()) + "\n");
    }
  // Section 10, etcd locks: its own etcd cluster and a long run under
  // kills, so only when named (--only 10), never in a default or --quick run.
  if (cfg_.only.count(10)) {
    try {
      auto r = etcd_bench::run({fresh("etcd"), cfg_.cli, cfg_.self, cfg_.stamp, cfg_.quick,
                                cfg_.etcd_acquisitions});
      print(r.report);
      out_["etcd"] = r.json;
    } catch (const std::exception& e) {
      print("  section 10 failed: " + std::string(e.what()) + "\n");
    }
  }
  targets();

  double secs = double(mono_ns() - t_start) / 1e9;
  std::string load_end = read_loadavg();
  print("\nload average at end: " + load_end + "; total " + fmt(secs, 1) + " s\n");
  out_["machine"]["loadavg_end"] = load_end;
  out_["total_seconds"] = round3(secs);
  out_["report"] = report_;

  if (!cfg_.keep) remove_tree(tmp_);
  if (!cfg_.json_path.empty()) {
    std::ofstream f(cfg_.json_path);
    f << out_.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!f) {
      std::cerr << "offload-lock-bench: cannot write " << cfg_.json_path << "\n";
      return 1;
    }
  }
  return 0;
}

std::string self_exe() {
  char b[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  if (n <= 0) return {};
  b[n] = '\0';
  return b;
}

int usage(std::ostream& o, int code) {
  o << "usage: offload-lock-bench [--quick] [--json FILE] [--dir DIR] [--keep] [--only 1,2,...]\n"
       "                          [--cli PATH] [--node PATH] [--flock PATH] [--baseline NAME=PATH ...]\n"
       "  --quick     short run (CI smoke test, under a minute)\n"
       "  --json      also write the results as JSON to FILE\n"
       "  --dir       create the temporary directory under DIR (default: $TMPDIR, $TMP, $TEMP or /tmp)\n"
       "  --keep      keep the temporary directory\n"
       "  --only      run only these sections: 1 uncontended, 2 whole process, 3 handoff, 4 crash,\n"
       "              5 idle waiter, 6 throughput, 7 queue, 8 history and live views, 9 goals side by side,\n"
       "              10 etcd locks beside etcdctl lock (only when named here)\n"
       "  --etcd-acquisitions N  section 10's no-double-holder run ends after N acquisitions\n"
       "              (default 10000, --quick 300)\n"
       "  --baseline  an older build for section 9: its liboffload_lock.so, its build directory or its command\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") return bench::run_child(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  config c;
  c.cli = OFFLOAD_LOCK_BENCH_CLI;
  c.node = OFFLOAD_LOCK_BENCH_NODE;
  c.stamp = OFFLOAD_LOCK_BENCH_STAMP;
  c.helper = OFFLOAD_LOCK_BENCH_SOURCE_DIR "/v1-helper.mjs";
  c.flock_bin = "flock";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "offload-lock-bench: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--quick") c.quick = true;
    else if (a == "--keep") c.keep = true;
    else if (a == "--json") c.json_path = value();
    else if (a == "--dir") c.base_dir = value();
    else if (a == "--cli") c.cli = value();
    else if (a == "--node") c.node = value();
    else if (a == "--flock") c.flock_bin = value();
    else if (a == "--baseline") {
      std::string err;
      auto b = goals::parse_baseline(value(), err);
      if (!b) return std::cerr << "offload-lock-bench: " << err << "\n", 2;
      c.baselines.push_back(*b);
    }
    else if (a == "--etcd-acquisitions") c.etcd_acquisitions = std::atoi(value().c_str());
    else if (a == "--only") {
      std::stringstream ss(value());
      std::string x;
      while (std::getline(ss, x, ',')) c.only.insert(std::atoi(x.c_str()));
    } else if (a == "--help" || a == "-h") return usage(std::cout, 0);
    else {
      std::cerr << "offload-lock-bench: unknown argument " << a << "\n";
      return usage(std::cerr, 2);
    }
  }
  c.self = self_exe();
  c.node = c.node.empty() ? "" : bench::which(c.node);
  c.flock_bin = bench::which(c.flock_bin);
  c.true_bin = bench::which("true");
  if (c.self.empty() || ::access(c.cli.c_str(), X_OK) != 0 || ::access(c.stamp.c_str(), X_OK) != 0 ||
      c.true_bin.empty()) {
    std::cerr << "offload-lock-bench: missing " << (c.self.empty() ? "/proc/self/exe" : "") << " "
              << (::access(c.cli.c_str(), X_OK) != 0 ? c.cli : "") << " "
              << (::access(c.stamp.c_str(), X_OK) != 0 ? c.stamp : "") << (c.true_bin.empty() ? " true" : "")
              << "\n";
    return 1;
  }
  return benchmark(std::move(c)).run();
}
