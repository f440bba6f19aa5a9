// Judging gpulease claims, row by row (doc/protocol-gpulease.md, "When a
// lease may be taken over"): offload-lock's three answers, and what
// gpulease's own acquirers and readers do with the same files, from fake
// kernel answers.
#include <catch2/catch.hpp>
#include <map>

#include "gpulease/judge.hpp"

using namespace offload_lock::detail;
using namespace offload_lock::detail::gpulease;

namespace {

constexpr std::int64_t kNow = 1'800'000'000'000;
constexpr std::int64_t kS = 1000;

lease_process_view fake_view() {
  struct proc {
    sys::liveness state;
    std::optional<std::uint64_t> ticks;
  };
  static const std::map<std::int64_t, proc> procs = {
      {100, {sys::liveness::alive, 5000}},
      {101, {sys::liveness::alive, std::nullopt}},  // alive, start unreadable (another user's hidden /proc)
      {200, {sys::liveness::dead, std::nullopt}},
      {300, {sys::liveness::zombie, 6000}},
  };
  lease_process_view pv;
  pv.probe = [](std::int64_t pid) {
    if (!sys::valid_pid(pid)) return sys::liveness::invalid;
    auto it = procs.find(pid);
    return it == procs.end() ? sys::liveness::dead : it->second.state;
  };
  pv.start_ticks = [](std::int64_t pid) -> std::optional<std::uint64_t> {
    auto it = procs.find(pid);
    return it == procs.end() ? std::nullopt : it->second.ticks;
  };
  return pv;
}

// A claim by pid with start ticks, renewed `renewed_ago` ago (0: never),
// its window ending `window_left` from now.
std::string claim(std::int64_t pid, std::int64_t ticks, std::int64_t renewed_ago, std::int64_t window_left) {
  return "{\"epoch\":12,\"class\":\"media\",\"holder\":{\"pid\":" + std::to_string(pid) +
         ",\"start_time_ms\":" + std::to_string(ticks) +
         "},\"reason\":\"r\",\"acquired_at_ms\":" + std::to_string(kNow - 3600 * kS) +
         ",\"expires_at_ms\":" + std::to_string(kNow + window_left) +
         ",\"renewed_at_ms\":" + std::to_string(renewed_ago ? kNow - renewed_ago : 0) + "}";
}

file_read present(const std::string& bytes, std::int64_t age = 60 * kS) {
  file_read f;
  f.st = file_read::state::present;
  f.bytes = bytes;
  f.mtime_ms = kNow - age;
  return f;
}

file_read unreadable() {
  file_read f;
  f.st = file_read::state::unreadable;
  f.error = "open x: Permission denied";
  return f;
}

lease_snapshot snap(std::optional<file_read> c, std::optional<file_read> hb = std::nullopt) {
  lease_snapshot s;
  if (c) s.claim = *c;
  if (hb) s.heartbeat = *hb;
  return s;
}

std::string hb_ago(std::int64_t ago) { return std::to_string(kNow - ago) + "\n"; }

}  // namespace

TEST_CASE("lease judgment: offload-lock's answer and gpulease's, row by row", "[unit][lease]") {
  using st = lease_state;
  struct row {
    const char* name;
    lease_snapshot s;
    st ours;
    bool gpulease_reclaims;
    bool readers_held;
    const char* why_has;
  };
  const std::int64_t stale = 121 * kS, fresh = 5 * kS, over = -kS, open = 600 * kS;
  lease_snapshot no_dir;
  no_dir.dir_present = false;
  std::vector<row> rows = {
      {"no claim", snap(std::nullopt), st::free, false, false, "no claim"},
      {"no lease directory", no_dir, st::free, false, false, "no claim"},
      {"a claim that cannot be read is unknown", snap(unreadable()), st::unknown, false, false, "cannot be read"},
      // Rule 3: the claim grace.
      {"unparseable, 5 s old: being written", snap(present("{\"epo", 5 * kS)), st::alive, false, false,
       "being written"},
      {"empty, 9.999 s old: being written", snap(present("", 9999)), st::alive, false, false, "being written"},
      {"unparseable, exactly 10 s old: dead", snap(present("{", 10 * kS)), st::dead, true, false, "unparseable"},
      {"unparseable, 11 s old: dead", snap(present("garbage", 11 * kS)), st::dead, true, false, "unparseable"},
      {"unparseable, mtime in the future: being written", snap(present("{", -60 * kS)), st::alive, false, false,
       "being written"},
      // Rule 4: no holder pid.
      {"pid 0, window open", snap(present(claim(0, 0, fresh, open))), st::alive, false, true, "no holder pid"},
      {"pid 0, window over", snap(present(claim(0, 0, fresh, over))), st::dead, true, false, "window ended"},
      {"pid -5, window over", snap(present(claim(-5, 0, fresh, over))), st::dead, true, false, "window ended"},
      {"null: all zero, window over", snap(present("null")), st::dead, true, false, "no holder pid"},
      {"a v1 record: no holder pid, no window", snap(present("{\"pid\":100,\"startedAt\":1}")), st::dead, true, false,
       "no holder pid"},
      // Rule 5.
      {"holder gone", snap(present(claim(200, 0, fresh, open))), st::dead, true, false, "gone"},
      {"holder a zombie: dead here, alive to gpulease", snap(present(claim(300, 6000, fresh, open))), st::dead, false,
       true, "zombie"},
      {"holder a zombie, heartbeat stale, window over", snap(present(claim(300, 6000, stale, over))), st::dead, true,
       false, "zombie"},
      // Rule 6.
      {"pid reused (another start)", snap(present(claim(100, 4999, fresh, open))), st::dead, true, false,
       "another process"},
      {"start not recorded: not checked", snap(present(claim(100, 0, fresh, open))), st::alive, false, true,
       "media lease"},
      {"start unreadable now: not checked", snap(present(claim(101, 77, fresh, open))), st::alive, false, true,
       "media lease"},
      // Rule 7: the conjunction.
      {"alive, fresh, window open", snap(present(claim(100, 5000, fresh, open))), st::alive, false, true,
       "media lease"},
      {"alive, fresh, window over", snap(present(claim(100, 5000, fresh, over))), st::alive, false, true,
       "media lease"},
      {"alive, stale, window open", snap(present(claim(100, 5000, stale, open))), st::alive, false, true,
       "media lease"},
      {"alive, stale, window over", snap(present(claim(100, 5000, stale, over))), st::dead, true, false, "heartbeat"},
      {"heartbeat exactly 120 s old is not stale", snap(present(claim(100, 5000, 120 * kS, over))), st::alive, false,
       true, "media lease"},
      {"window ending exactly now is not over", snap(present(claim(100, 5000, stale, 0))), st::alive, false, true,
       "media lease"},
      {"never renewed never goes stale", snap(present(claim(100, 5000, 0, over))), st::alive, false, true,
       "media lease"},
      {"hb.<epoch> fresh keeps a stale stamp alive",
       snap(present(claim(100, 5000, stale, over)), present(hb_ago(fresh))), st::alive, false, true, "media lease"},
      {"hb.<epoch> older than the stamp: the stamp counts",
       snap(present(claim(100, 5000, fresh, over)), present(hb_ago(stale))), st::alive, false, true, "media lease"},
      {"hb.<epoch> unparseable: the stamp counts", snap(present(claim(100, 5000, stale, over)), present("soon")),
       st::dead, true, false, "heartbeat"},
      {"hb.<epoch> with spaces and a sign", snap(present(claim(100, 5000, stale, over)), present(" +" + hb_ago(fresh))),
       st::alive, false, true, "media lease"},
      {"hb.<epoch> unreadable where it decides: unknown", snap(present(claim(100, 5000, stale, over)), unreadable()),
       st::unknown, true, false, "heartbeat file"},
      {"hb.<epoch> unreadable where it does not decide", snap(present(claim(100, 5000, fresh, over)), unreadable()),
       st::alive, false, true, "media lease"},
      {"a pid beyond the kernel's range: rule 7 decides", snap(present(claim(4294967297LL, 1, fresh, over))), st::alive,
       false, true, "media lease"},
      {"a pid beyond the kernel's range, stale and over", snap(present(claim(4294967297LL, 1, stale, over))), st::dead,
       true, false, "heartbeat"},
  };
  const auto pv = fake_view();
  for (const auto& r : rows) {
    INFO(r.name);
    const lease_verdict v = judge_lease(r.s, kNow, pv);
    CHECK(to_string(v.state) == std::string(to_string(r.ours)));
    CHECK(v.gpulease_reclaims == r.gpulease_reclaims);
    CHECK(v.gpulease_readers_held == r.readers_held);
    CHECK_THAT(v.why, Catch::Contains(r.why_has));
  }
}

TEST_CASE("lease judgment: what a waiter waits on", "[unit][lease]") {
  const auto pv = fake_view();
  SECTION("a live holder: its exit, and the moment the conjunction could hold") {
    auto v = judge_lease(snap(present(claim(100, 5000, 5 * kS, 600 * kS))), kNow, pv);
    CHECK(v.holder_pid == 100);
    CHECK(v.changes_at_ms == kNow + 600 * kS + 1);  // the window ends after the heartbeat would go stale
    v = judge_lease(snap(present(claim(100, 5000, 5 * kS, -60 * kS))), kNow, pv);
    CHECK(v.changes_at_ms == kNow - 5 * kS + 120 * kS + 1);
    v = judge_lease(snap(present(claim(100, 5000, 0, -60 * kS))), kNow, pv);
    CHECK(v.changes_at_ms == 0);  // never renewed: only its exit changes it
  }
  SECTION("a claim being written: the end of the grace") {
    auto v = judge_lease(snap(present("{", 3 * kS)), kNow, pv);
    CHECK(v.in_progress);
    CHECK(v.changes_at_ms == kNow - 3 * kS + 10 * kS);
    CHECK(v.holder_pid == 0);
  }
  SECTION("no pid: the end of the window") {
    auto v = judge_lease(snap(present(claim(0, 0, 5 * kS, 60 * kS))), kNow, pv);
    CHECK(v.changes_at_ms == kNow + 60 * kS + 1);
  }
  SECTION("the holder named") {
    auto v = judge_lease(snap(present(claim(100, 5000, 5 * kS, 60 * kS))), kNow, pv);
    REQUIRE(v.rec);
    CHECK(v.rec->epoch == 12);
    CHECK(describe_holder(*v.rec) == "media lease (pid 100, epoch 12, reason \"r\")");
    CHECK(v.renewed_at_ms == kNow - 5 * kS);
  }
}
