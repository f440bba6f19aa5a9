// Section 9: the goals, measured side by side (see goals_bench.hpp).
#include "goals_bench.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include "goals_parts.hpp"
#include "util.hpp"

namespace bench::goals {

using json = nlohmann::ordered_json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct sizes {
  int rounds;        // interleaved rounds of every throughput and handoff configuration
  int tp_ms, ho_ms;  // window per configuration and round
  int churn_rounds;  // acquisitions timed while another user churns the queue
  int junk_files, junk_ops;
};
constexpr sizes kFull{3, 1500, 2500, 5, 100000, 40};
constexpr sizes kQuick{1, 400, 500, 1, 10000, 6};
constexpr int kDrainWaiters = 25;
// Handoff rounds: each hold lasts 2 ms and each participant pauses 0.5 ms
// after its release, so it is queued again long before the next release.
constexpr int kHoldUs = 2000, kPauseUs = 500;

std::string fmt_or(double v, int d) { return std::isnan(v) ? "n/a" : fmt(v, d); }
std::string times(double a, double b) {
  return std::isnan(a) || std::isnan(b) || b <= 0 ? "n/a" : fmt(a / b, 2) + "×";
}
json num(double v) { return std::isnan(v) ? json() : json(std::round(v * 1000) / 1000); }

// A participant: a build (through its library) or a reference mechanism.
struct participant {
  std::string name, mech;
};

struct loop_run {
  std::vector<long> counts;
  std::vector<std::array<std::int64_t, 3>> holds;  // acquired, releasing, participant index
};

loop_run run_loop(const setup& s, const participant& p, const std::string& path, int procs, int hold_us,
                  int pause_us, int ms, bool stamps) {
  std::vector<child> cs;
  for (int i = 0; i < procs; ++i)
    cs.emplace_back(std::vector<std::string>{s.self, "--child", "g-loop", p.mech, path, std::to_string(hold_us),
                                             std::to_string(pause_us), std::to_string(ms), stamps ? "1" : "0"},
                    child::streams{true, true, true});
  for (auto& c : cs) expect(c, "ready", 15'000, p.name + " participant");
  for (auto& c : cs) c.write_line("start");
  loop_run r;
  for (int i = 0; i < procs; ++i) {
    r.counts.push_back(std::atol(expect(cs[i], "n ", ms + 60'000, p.name + " participant").c_str()));
    for (;;) {
      auto l = cs[i].read_line(30'000);
      if (!l || *l == "end") break;
      long long a = 0, b = 0;
      if (std::sscanf(l->c_str(), "s %lld %lld", &a, &b) == 2) r.holds.push_back({a, b, i});
    }
    cs[i].wait(10'000);
  }
  return r;
}

// ---- a) contended throughput ----

void throughput(const setup& s, const sizes& n, const printer& print, json& out, goal_list& g) {
  print("\n   a) contended throughput: N processes loop acquire -> release (C API through each build's library;\n"
        "      the bare directory protocol is mkdir + meta.json, rm + rmdir, an inotify wait, no order), " +
        fmt(n.tp_ms / 1000.0, 1) + " s per configuration, " + std::to_string(n.rounds) +
        " interleaved round(s); max/min: acquisitions per process, the worst round\n");
  std::vector<participant> ps{{"this build", "dl:" + s.current.lib}};
  for (auto& b : s.baselines) ps.push_back({b.name, "dl:" + b.lib});
  ps.push_back({"bare directory protocol", "bare"});
  struct acc {
    long total = 0;
    double seconds = 0, worst = 0;
    std::string error;
  };
  std::map<std::pair<std::size_t, int>, acc> res;
  for (int round = 0; round < n.rounds; ++round)
    for (std::size_t i = 0; i < ps.size(); ++i)
      for (int procs : {4, 8}) {
        acc& a = res[{i, procs}];
        if (!a.error.empty()) continue;
        try {
          const std::string d = fresh_dir(s, "tp-" + std::to_string(i) + "-" + std::to_string(procs) + "-" +
                                                 std::to_string(round));
          loop_run r = run_loop(s, ps[i], d + "/gpu.lock", procs, 0, 0, n.tp_ms, false);
          long mx = 0, mn = std::numeric_limits<long>::max();
          for (long c : r.counts) a.total += c, mx = std::max(mx, c), mn = std::min(mn, c);
          a.seconds += n.tp_ms / 1000.0;
          a.worst = std::max(a.worst, mn > 0 ? double(mx) / double(mn) : std::numeric_limits<double>::infinity());
        } catch (const std::exception& e) {
          a.error = e.what();
        }
      }
  auto rate = [&](std::size_t i, int procs) {
    const acc& a = res[{i, procs}];
    return a.error.empty() && a.seconds > 0 ? double(a.total) / a.seconds : kNaN;
  };
  const std::size_t bare = ps.size() - 1;
  std::size_t v01 = 0;
  for (std::size_t i = 1; i < bare; ++i)
    if (ps[i].name == "0.1") v01 = i;
  std::vector<std::string> lines;
  json rows = json::array();
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (int procs : {4, 8}) {
      const acc& a = res[{i, procs}];
      const double r = rate(i, procs);
      lines.push_back(ps[i].name + " | " + std::to_string(procs) + " | " +
                      (a.error.empty() ? fmt(r, 0) + " acq/s | " + times(r, rate(bare, procs)) + " of bare | max/min " +
                                             fmt(a.worst, 2)
                                       : "error: " + a.error));
      rows.push_back({{"build", ps[i].name}, {"processes", procs}, {"acquisitions_per_s", num(r)},
                      {"ratio_to_bare", num(r / rate(bare, procs))}, {"max_over_min_worst", num(a.worst)},
                      {"error", a.error.empty() ? json() : json(a.error)}});
    }
  for (auto& l : lines) print("      " + l + "\n");
  out["throughput"] = rows;
  for (int procs : {4, 8}) {
    const double r = rate(0, procs), b = rate(bare, procs);
    const std::string p = std::to_string(procs) + " processes";
    g.add("throughput, " + p + ": ≥ 0.5× the bare directory protocol", std::isnan(r / b) ? std::nullopt : std::optional(r / b >= 0.5),
          fmt_or(r, 0) + " vs " + fmt_or(b, 0) + " acq/s (" + times(r, b) + ")");
    g.add("throughput, " + p + ": ≥ 0.1's, side by side",
          v01 && !std::isnan(r) && !std::isnan(rate(v01, procs)) ? std::optional(r >= rate(v01, procs)) : std::nullopt,
          v01 ? fmt_or(r, 0) + " vs " + fmt_or(rate(v01, procs), 0) + " acq/s (" + times(r, rate(v01, procs)) + ")"
              : "not measured (no --baseline 0.1=...)");
    const acc& a = res[{0, procs}];
    g.add("throughput fairness, " + p + ": max/min acquisitions per process ≤ 1.25",
          a.error.empty() ? std::optional(a.worst <= 1.25) : std::nullopt,
          a.error.empty() ? fmt(a.worst, 2) + " (worst of " + std::to_string(n.rounds) + " round(s))" : a.error);
  }
}

// ---- b) handoff ----

void handoff(const setup& s, const sizes& n, const printer& print, json& out, goal_list& g) {
  print("\n   b) handoff: 1 + K processes loop acquire -> hold " + std::to_string(kHoldUs / 1000) +
        " ms -> release -> pause 0.5 ms, so K wait at every release; handoff = the\n"
        "      holder's stamp just before release -> the next holder's stamp right after it holds (another\n"
        "      process's; a participant taking the lock back is not a handoff); " +
        fmt(n.ho_ms / 1000.0, 1) + " s per configuration and round\n");
  std::vector<participant> ps{{"this build", "dl:" + s.current.lib}};
  for (auto& b : s.baselines) ps.push_back({b.name, "dl:" + b.lib});
  ps.push_back({"flock(2)", "flock"});
  std::map<std::pair<std::size_t, int>, std::vector<double>> ms;
  std::map<std::pair<std::size_t, int>, int> overlaps;
  std::map<std::pair<std::size_t, int>, std::string> errors;
  for (int round = 0; round < n.rounds; ++round)
    for (std::size_t i = 0; i < ps.size(); ++i)
      for (int k : {1, 10}) {
        if (errors.count({i, k})) continue;
        try {
          const std::string d =
              fresh_dir(s, "ho-" + std::to_string(i) + "-" + std::to_string(k) + "-" + std::to_string(round));
          loop_run r = run_loop(s, ps[i], d + (i + 1 == ps.size() ? "/gpu.flock" : "/gpu.lock"), k + 1, kHoldUs,
                                kPauseUs, n.ho_ms, true);
          std::sort(r.holds.begin(), r.holds.end());
          for (std::size_t h = 1; h < r.holds.size(); ++h) {
            if (r.holds[h][2] == r.holds[h - 1][2]) continue;
            const std::int64_t d_ns = r.holds[h][0] - r.holds[h - 1][1];
            if (d_ns < 0) ++overlaps[{i, k}];
            else ms[{i, k}].push_back(double(d_ns) / 1e6);
          }
        } catch (const std::exception& e) {
          errors[{i, k}] = e.what();
        }
      }
  json rows = json::array();
  const std::size_t fl = ps.size() - 1;
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (int k : {1, 10}) {
      summary sm = summarize(ms[{i, k}]), sf = summarize(ms[{fl, k}]);
      const bool ok = !errors.count({i, k}) && sm.n > 0;
      print("      " + ps[i].name + " | " + std::to_string(k) + " waiting | " +
            (ok ? "p50 " + fmt(sm.p50, 3) + " ms, p99 " + fmt(sm.p99, 3) + " ms, n=" + std::to_string(sm.n) +
                      (i == fl ? "" : " | p50 " + times(sm.p50, sf.p50) + " flock's") +
                      " | overlapping holds " + std::to_string(overlaps[{i, k}])
                : "error: " + (errors.count({i, k}) ? errors[{i, k}] : std::string("no handoff"))) +
            "\n");
      rows.push_back({{"build", ps[i].name}, {"waiting", k}, {"n", sm.n}, {"ms_p50", ok ? num(sm.p50) : json()},
                      {"ms_p99", ok ? num(sm.p99) : json()}, {"overlaps", overlaps[{i, k}]},
                      {"p50_ratio_to_flock", ok && sf.n ? num(sm.p50 / sf.p50) : json()},
                      {"error", errors.count({i, k}) ? json(errors[{i, k}]) : json()}});
      if (i == 0) {
        const bool both = sm.n > 0 && sf.n > 0;
        g.add("handoff p50 ≤ 10× flock(2), " + std::to_string(k) + " waiting",
              both ? std::optional(sm.p50 <= 10 * sf.p50) : std::nullopt,
              both ? fmt(sm.p50, 3) + " ms vs " + fmt(sf.p50, 3) + " ms (" + times(sm.p50, sf.p50) + "); p99 " +
                         fmt(sm.p99, 3) + " ms vs " + fmt(sf.p99, 3) + " ms"
                   : "a row is missing");
        g.add("no overlapping holds in the handoff rounds, " + std::to_string(k) + " waiting",
              sm.n > 0 ? std::optional(overlaps[{i, k}] == 0) : std::nullopt, std::to_string(overlaps[{i, k}]));
      }
    }
  out["handoff"] = rows;
}

// ---- c) the lock path never absent during a drain ----

struct drain_figures {
  std::int64_t samples = 0, absent = 0, no_live_meta = 0;
  double drain_ms = kNaN, rate = kNaN;
};

// What a sample saw: 0 held (a meta.json naming a live pid), 1 absent, 2 no such meta.json.
int look(const std::string& path, const std::string& meta) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? 1 : 2;
  std::ifstream f(meta);
  std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto at = body.find("\"pid\":");
  if (at == std::string::npos) return 2;
  const long pid = std::atol(body.c_str() + at + 6);
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) ? 0 : 2;
}

drain_figures drain(const setup& s, const std::string& mech, int idx) {
  const std::string path = fresh_dir(s, "drain-" + std::to_string(idx)) + "/gpu.lock", meta = path + "/meta.json";
  child holder({s.self, "--child", "g-hold", mech, path}, {true, true, true});
  expect(holder, "held", 15'000, "holder");
  std::vector<child> ws;
  for (int i = 0; i < kDrainWaiters; ++i) {
    ws.emplace_back(std::vector<std::string>{s.self, "--child", "g-wait", mech, path, "120000"},
                    child::streams{false, true, true});
    expect(ws.back(), "calling", 15'000, "waiter");
    sleep_ns(20'000'000);  // arrivals apart, as a queue forms in practice
  }
  sleep_ns(500'000'000);  // generous: the last waiter has joined the queue on a loaded machine too
  std::vector<std::pair<std::int64_t, int>> seen;
  seen.reserve(4'000'000);
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    while (!stop.load(std::memory_order_relaxed) && seen.size() < seen.capacity())
      seen.emplace_back(mono_ns(), look(path, meta));
  });
  drain_figures f;
  std::int64_t released = 0, last = 0;
  try {
    holder.write_line("release");
    released = std::atoll(expect(holder, "r ", 15'000, "holder").c_str());
    for (auto& w : ws) last = std::max<std::int64_t>(last, std::atoll(expect(w, "a ", 180'000, "waiter").c_str()));
  } catch (...) {
    stop = true;
    sampler.join();
    throw;
  }
  stop = true;
  sampler.join();
  for (auto& [t, what] : seen)
    if (t >= released && t <= last) {
      ++f.samples;
      f.absent += what == 1;
      f.no_live_meta += what == 2;
    }
  f.drain_ms = double(last - released) / 1e6;
  f.rate = f.drain_ms > 0 ? double(f.samples) / (f.drain_ms / 1000) : kNaN;
  return f;
}

void never_absent(const setup& s, const printer& print, json& out, goal_list& g) {
  print("\n   c) the lock path during a drain: " + std::to_string(kDrainWaiters) +
        " waiters queue behind a holder (one process each, C API); from the release to the last one holding,\n"
        "      a thread of this process looks at the path in a loop (lstat, then meta.json's pid, alive?)\n");
  std::vector<participant> bs{{"this build", "dl:" + s.current.lib}};
  for (auto& b : s.baselines) bs.push_back({b.name, "dl:" + b.lib});
  // The control: the same C API linked into this program rather than loaded.
  bs.push_back({"(control) this build, C API linked in, not loaded", "linked"});
  json rows = json::array();
  for (std::size_t i = 0; i < bs.size(); ++i) {
    const std::string who = bs[i].name;
    try {
      drain_figures f = drain(s, bs[i].mech, static_cast<int>(i));
      const double pa = f.samples ? 100.0 * double(f.absent) / double(f.samples) : kNaN;
      const double pm = f.samples ? 100.0 * double(f.no_live_meta) / double(f.samples) : kNaN;
      print("      " + who + " | " + std::to_string(f.samples) + " samples (" + fmt_or(f.rate / 1000, 0) +
            "k/s) | absent " + fmt_or(pa, 3) + "% | present without a live holder's meta.json " + fmt_or(pm, 3) +
            "% | drain " + fmt(f.drain_ms, 1) + " ms\n");
      rows.push_back({{"build", who}, {"samples", f.samples}, {"absent", f.absent}, {"absent_percent", num(pa)},
                      {"without_live_meta", f.no_live_meta}, {"without_live_meta_percent", num(pm)},
                      {"drain_ms", num(f.drain_ms)}});
      if (i == 0) {
        g.add("during the drain of 25 waiters the lock path is never absent", f.samples ? std::optional(f.absent == 0) : std::nullopt,
              fmt_or(pa, 3) + "% of " + std::to_string(f.samples) + " samples");
        g.add("... and never without a meta.json naming a live pid", f.samples ? std::optional(f.no_live_meta == 0) : std::nullopt,
              fmt_or(pm, 3) + "% of " + std::to_string(f.samples) + " samples");
      }
    } catch (const std::exception& e) {
      print("      " + who + " | error: " + e.what() + "\n");
      rows.push_back({{"build", who}, {"error", e.what()}});
      if (i == 0) g.add("during the drain of 25 waiters the lock path is never absent", std::nullopt, e.what());
    }
  }
  out["path_during_drain"] = rows;
}

// ---- d) figures of sections 1 and 7 ----

const json* find_row(const json* rows, const std::string& key, const json& value, bool prefix) {
  if (!rows || !rows->is_array()) return nullptr;
  for (const auto& r : *rows) {
    if (!r.contains(key)) continue;
    if (prefix ? r[key].is_string() && r[key].get<std::string>().rfind(value.get<std::string>(), 0) == 0
               : r[key] == value)
      return &r;
  }
  return nullptr;
}

double field(const json* row, const std::string& k) {
  return row && row->contains(k) && (*row)[k].is_number() ? (*row)[k].get<double>() : kNaN;
}

void reused(const setup& s, const printer& print, goal_list& g) {
  print("\n   d) from sections 1 and 7 of this run (not measured again): uncontended acquire+release (heartbeat on)\n"
        "      vs the v1 cycle; CPU per handoff and drain time with 200 and 10 queued waiters\n");
  const json& e = s.earlier ? *s.earlier : json::object();
  const json* un = e.contains("uncontended") ? &e["uncontended"]["rows"] : nullptr;
  // The side-by-side pair when section 1 measured it (interleaved rounds),
  // else its two rows, measured one after the other.
  double lib = field(find_row(un, "name", "side by side: library", true), "us_per_op_median");
  double v1 = field(find_row(un, "name", "side by side: v1 cycle", true), "us_per_op_median");
  if (std::isnan(lib) || std::isnan(v1)) {
    lib = field(find_row(un, "name", "library lock::acquire", true), "us_per_op_median");
    v1 = field(find_row(un, "name", "v1 cycle", true), "us_per_op_median");
  }
  g.add("uncontended acquire+release ≤ 1.0× the v1 mkdir+write+rm cycle, heartbeat on",
        std::isnan(lib) || std::isnan(v1) ? std::nullopt : std::optional(lib <= v1),
        std::isnan(lib) || std::isnan(v1) ? "not measured (section 1 not run, or node missing)"
                                          : fmt(lib, 2) + " µs vs " + fmt(v1, 2) + " µs (" + times(lib, v1) + ")");
  const json* herd = e.contains("queue") && e["queue"].contains("herd") ? &e["queue"]["herd"] : nullptr;
  const json *h10 = find_row(herd, "waiters", 10, false), *h200 = find_row(herd, "waiters", 200, false);
  const double c10 = field(h10, "cpu_ms_per_handoff"), c200 = field(h200, "cpu_ms_per_handoff");
  const double d200 = field(h200, "drain_ms");
  g.add("CPU per handoff at 200 waiters ≤ 2× at 10", std::isnan(c10) || std::isnan(c200) ? std::nullopt : std::optional(c200 <= 2 * c10),
        std::isnan(c10) || std::isnan(c200) ? "not measured (section 7 not run)"
                                            : fmt(c200, 3) + " ms vs " + fmt(c10, 3) + " ms (" + times(c200, c10) + ")");
  g.add("200 queued waiters drain in ≤ 2 s", std::isnan(d200) ? std::nullopt : std::optional(d200 <= 2000),
        std::isnan(d200) ? "not measured (section 7 not run)" : fmt(d200, 1) + " ms");
}

}  // namespace

void goal_list::add(const std::string& goal, std::optional<bool> held, const std::string& figure) {
  const std::string tag = !held ? "[NOT MEASURED]" : *held ? "[HELD]    " : "[NOT HELD]";
  text += "  " + tag + " " + goal + ": " + figure + "\n";
  j.push_back({{"goal", goal}, {"held", held ? json(*held) : json()}, {"figure", figure}});
}

std::string expect(child& c, const std::string& prefix, int timeout_ms, const std::string& what) {
  const std::int64_t end = mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    const int left = static_cast<int>(std::max<std::int64_t>(0, (end - mono_ns()) / 1'000'000));
    auto l = c.read_line(left);
    if (!l) throw failure(what + ": no \"" + prefix + "\" line (" + c.drain_err() + ")");
    if (l->rfind(prefix, 0) == 0) return l->substr(prefix.size());
    if (l->rfind("e ", 0) == 0) throw failure(what + ": " + l->substr(2));
  }
}

std::string fresh_dir(const setup& s, const std::string& name) {
  const std::string d = s.dir + "/" + name;
  if (::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) throw failure("mkdir " + d + ": " + std::strerror(errno));
  return d;
}

std::optional<build> parse_baseline(const std::string& arg, std::string& error) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    error = "--baseline wants NAME=PATH, not " + arg;
    return std::nullopt;
  }
  build b{arg.substr(0, eq), arg.substr(eq + 1)};
  struct stat st{};
  if (::stat(b.lib.c_str(), &st) != 0) {
    error = "--baseline " + b.name + ": " + b.lib + ": " + std::strerror(errno);
    return std::nullopt;
  }
  // A directory holds the library; a command has it beside itself.
  if (S_ISDIR(st.st_mode)) b.lib += "/liboffload_lock.so";
  else if (b.lib.find(".so") == std::string::npos) {
    const auto slash = b.lib.rfind('/');
    b.lib = (slash == std::string::npos ? std::string(".") : b.lib.substr(0, slash)) + "/liboffload_lock.so";
  }
  if (::access(b.lib.c_str(), R_OK) != 0) {
    error = "--baseline " + b.name + ": no shared library at " + b.lib;
    return std::nullopt;
  }
  return b;
}

json run(const setup& s, const printer& print) {
  const sizes n = s.quick ? kQuick : kFull;
  print("\n9. Goals, side by side: this build (" + s.current.lib + ")");
  for (auto& b : s.baselines) print(", " + b.name + " (" + b.lib + ")");
  print(s.baselines.empty() ? "; no older build given (--baseline NAME=PATH): their rows are not measured\n" : "\n");
  json out;
  out["builds"] = json::array({{{"name", "this build"}, {"lib", s.current.lib}}});
  for (auto& b : s.baselines) out["builds"].push_back({{"name", b.name}, {"lib", b.lib}});
  goal_list g;
  auto part = [&](const char* name, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      print("      " + std::string(name) + " failed: " + e.what() + "\n");
      g.add(name, std::nullopt, e.what());
    }
  };
  part("throughput", [&] { throughput(s, n, print, out, g); });
  part("handoff", [&] { handoff(s, n, print, out, g); });
  part("path during a drain", [&] { never_absent(s, print, out, g); });
  part("sections 1 and 7", [&] { reused(s, print, g); });
  part("another user", [&] { trust_rows(s, n.churn_rounds, n.junk_files, n.junk_ops, print, out, g); });
  print("\n   goals of section 9\n" + g.text);
  out["goals"] = g.j;
  return out;
}

}  // namespace bench::goals
