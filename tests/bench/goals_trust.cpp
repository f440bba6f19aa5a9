// Section 9, issue 23's rows: what another local user can cost a waiter
// through the queue: entries churned every 100 ms, and a flood of junk files.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "goals_parts.hpp"

namespace bench::goals {

using json = nlohmann::ordered_json;

namespace {

// The other user: OFFLOAD_LOCK_BENCH_USER when this runs as root and the
// user exists; otherwise (-1) the waiters' own user, and the rows say so.
struct other_user {
  long uid = -1;
  std::string name;
};

other_user pick_user() {
  other_user u;
  const char* want = std::getenv("OFFLOAD_LOCK_BENCH_USER");
  if (::geteuid() != 0 || !want || !*want) return u;
  if (const passwd* pw = ::getpwnam(want); pw && pw->pw_uid != 0) {
    u.uid = static_cast<long>(pw->pw_uid);
    u.name = want;
  }
  return u;
}

std::string who(const other_user& u) {
  return u.uid < 0 ? "same user (another process of this user; " +
                         std::string(::geteuid() == 0 ? "OFFLOAD_LOCK_BENCH_USER not set or unknown" : "not root") +
                         ")"
                   : "user " + u.name + " (uid " + std::to_string(u.uid) + ")";
}

// A lock directory the other user can make the queue registry in, as in /tmp.
std::string shared_dir(const setup& s, const std::string& name) {
  const std::string d = fresh_dir(s, name);
  ::chmod(s.run_dir.c_str(), 0711);
  ::chmod(s.dir.c_str(), 0711);
  ::chmod(d.c_str(), 01777);
  return d;
}

// Milliseconds from the call to holding, for each acquisition of a free lock
// (the 10 s a waiter gave up after, counted in `timeouts`, when it never held).
std::vector<double> time_free(const setup& s, const std::string& path, int n, int* timeouts = nullptr) {
  child c({s.self, "--child", "g-time", "dl:" + s.current.lib, path, std::to_string(n)}, {false, true, true});
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const std::string t = expect(c, "t ", 60'000, "timed waiter");
    ms.push_back(double(std::atoll(t.c_str())) / 1e6);
    if (timeouts && t.find("timeout") != std::string::npos) ++*timeouts;
  }
  c.wait(10'000);
  return ms;
}

void churn(const setup& s, const other_user& u, int rounds, const printer& print, json& out, goal_list& g) {
  print("\n   e) a waiter on a free lock while " + who(u) +
        " churns two queue entries every 100 ms\n"
        "      (forged: well-formed, priority 100, write-locked, naming a live process that never takes the lock;\n"
        "      both replaced by new ones every 100 ms); the same waiter without churn beside it\n");
  std::vector<double> churned, quiet;
  long cycles = 0;
  int timeouts = 0;
  for (int r = 0; r < rounds; ++r) {
    const std::string d = shared_dir(s, "churn-" + std::to_string(r));
    child ch({s.self, "--child", "g-churn", d + "/gpu.lock", std::to_string(u.uid)}, {true, true, true});
    expect(ch, "ready", 15'000, "churner");
    sleep_ns(250'000'000);  // a few churn cycles before the waiter comes
    for (double v : time_free(s, d + "/gpu.lock", 1, &timeouts)) churned.push_back(v);
    ch.close_in();
    cycles += std::atol(expect(ch, "n ", 15'000, "churner").c_str());
    ch.wait(10'000);
    for (double v : time_free(s, fresh_dir(s, "quiet-" + std::to_string(r)) + "/gpu.lock", 1)) quiet.push_back(v);
  }
  summary sc = summarize(churned), sq = summarize(quiet);
  print("      churned | " + std::to_string(sc.n) + " waiters | take the free lock in median " + fmt(sc.median, 1) +
        " ms, max " + fmt(sc.max, 1) + " ms | " + std::to_string(timeouts) + " never held in 10 s | " +
        std::to_string(cycles) + " churn cycles\n");
  print("      quiet   | " + std::to_string(sq.n) + " waiters | median " + fmt(sq.median, 3) + " ms, max " +
        fmt(sq.max, 3) + " ms\n");
  out["churn"] = {{"other_user", u.uid >= 0}, {"who", who(u)}, {"ms_median", sc.median}, {"ms_max", sc.max},
                  {"n", sc.n}, {"never_held_in_10s", timeouts}, {"quiet_ms_median", sq.median}, {"quiet_ms_max", sq.max}, {"churn_cycles", cycles}};
  g.add("a waiter on a free lock takes it within 1 s while " + who(u) + " churns two queue entries every 100 ms",
        sc.n ? std::optional(sc.max <= 1000) : std::nullopt,
        "max " + fmt(sc.max, 1) + " ms of " + std::to_string(sc.n) + ", " + std::to_string(timeouts) +
            " never held in 10 s (quiet: max " + fmt(sq.max, 3) + " ms)");
}

void junk(const setup& s, const other_user& u, int files, int ops, const printer& print, json& out, goal_list& g) {
  print("\n   f) " + std::to_string(files) + " junk files of " + who(u) +
        " in the queue (empty files named like entries, wake channels and anything) vs none;\n"
        "      an acquisition of the free lock, call -> holding, " + std::to_string(ops) +
        " of each, interleaved\n");
  const std::string jd = shared_dir(s, "junk"), cd = fresh_dir(s, "clean");
  child p({s.self, "--child", "g-junk", jd + "/gpu.lock", std::to_string(files), std::to_string(u.uid)},
          {false, true, true});
  const long planted = std::atol(expect(p, "planted ", 600'000, "planter").c_str());
  p.wait(10'000);
  std::vector<double> with, without;
  for (int half = 0; half < 2; ++half) {
    for (double v : time_free(s, jd + "/gpu.lock", ops / 2)) with.push_back(v);
    for (double v : time_free(s, cd + "/gpu.lock", ops / 2)) without.push_back(v);
  }
  summary sw = summarize(with), so = summarize(without);
  const double extra = sw.median - so.median;
  print("      " + std::to_string(planted) + " junk files | median " + fmt(sw.median, 3) + " ms, p99 " +
        fmt(sw.p99, 3) + " ms\n      none            | median " + fmt(so.median, 3) + " ms, p99 " + fmt(so.p99, 3) +
        " ms\n");
  out["junk"] = {{"files", planted},        {"other_user", u.uid >= 0},  {"ms_median", sw.median},
                 {"ms_p99", sw.p99},        {"none_ms_median", so.median}, {"none_ms_p99", so.p99},
                 {"extra_ms_median", extra}};
  g.add(std::to_string(planted) + " junk files of " + who(u) + " cost an acquisition ≤ 10 ms more than none",
        sw.n && so.n ? std::optional(extra <= 10) : std::nullopt,
        fmt(extra, 3) + " ms more (median " + fmt(sw.median, 3) + " vs " + fmt(so.median, 3) + " ms)");
}

}  // namespace

void trust_rows(const setup& s, int rounds, int junk_files, int junk_ops, const printer& print, json& out,
                goal_list& g) {
  const other_user u = pick_user();
  try {
    churn(s, u, rounds, print, out, g);
  } catch (const std::exception& e) {
    print("      churn failed: " + std::string(e.what()) + "\n");
    g.add("a waiter on a free lock takes it within 1 s while another user churns the queue", std::nullopt, e.what());
  }
  try {
    junk(s, u, junk_files, junk_ops, print, out, g);
  } catch (const std::exception& e) {
    print("      junk failed: " + std::string(e.what()) + "\n");
    g.add("junk files of another user cost an acquisition ≤ 10 ms more than none", std::nullopt, e.what());
  }
}

}  // namespace bench::goals
