// Staleness, row by row: offload-lock's judgment (A3 + B3 + B6), the Node
// runners' isStale() (A3, quirks included) and the Go readers' Inspect()
// (A5), each from the same snapshot and the same (fake) kernel answers.
#include <catch2/catch.hpp>
#include <cerrno>
#include <climits>
#include <map>

#include "judge.hpp"

using namespace offload_lock::detail;

namespace {

constexpr std::int64_t kNow = 1'800'000'000'000;
constexpr std::int64_t kTtl = 3'600'000;
constexpr std::int64_t kGrace = 2'000;
constexpr std::int64_t kHour = 3'600'000;

struct fake_proc {
  sys::liveness state;
  std::int64_t start_epoch_ms;
  std::uint64_t ticks;
};

process_view fake_view() {
  static const std::map<std::int64_t, fake_proc> procs = {
      {100, {sys::liveness::alive, kNow - kHour, 5000}},
      {200, {sys::liveness::dead, 0, 0}},
      {300, {sys::liveness::zombie, kNow - kHour, 6000}},
      {500, {sys::liveness::alive, kNow - 1000, 9999}},
      {600, {sys::liveness::unknown, 0, 0}},
  };
  process_view pv;
  pv.probe = [](std::int64_t pid) {
    auto it = procs.find(pid);
    return it == procs.end() ? sys::liveness::dead : it->second.state;
  };
  pv.start_of = [](std::int64_t pid) -> std::optional<sys::proc_start> {
    auto it = procs.find(pid);
    if (it == procs.end() || it->second.state == sys::liveness::dead) return std::nullopt;
    return sys::proc_start{it->second.ticks, it->second.start_epoch_ms};
  };
  pv.boot_id = "boot-A";
  pv.host = "gpu1";
  pv.pid_ns = 77;
  return pv;
}

snapshot snap(const std::optional<std::string>& meta, std::int64_t meta_age, std::int64_t dir_age = 10'000,
              bool locked = false) {
  snapshot s;
  s.present = true;
  s.is_dir = true;
  s.dir_mtime_ms = kNow - dir_age;
  s.meta_exists = meta.has_value();
  if (meta) {
    s.meta = parse_meta(*meta);
    s.meta_mtime_ms = kNow - meta_age;
  }
  s.proof_of_life = locked;
  return s;
}

std::string node_meta(const std::string& pid) { return "{\"pid\":" + pid + ",\"startedAt\":" + std::to_string(kNow - 5000) + "}"; }

}  // namespace

TEST_CASE("staleness: offload-lock, Node and Go, row by row", "[unit][judge]") {
  struct row {
    const char* name;
    snapshot s;
    bool ours_stale;
    const char* reason_has;  // a word the reason must contain
    bool node_stale;
    bool go_held;
    std::int64_t go_pid;
  };
  const std::string ago10m = std::to_string(kNow - 600'000);
  const std::string ago10s = std::to_string(kNow - 10'000);
  std::vector<row> rows = {
      // B3: a Node runner between mkdir and write is left alone for the grace.
      {"no meta, directory younger than the grace", snap(std::nullopt, 0, 500), false, "grace", true, false, 0},
      {"no meta, directory older than the grace", snap(std::nullopt, 0, 5000), true, "missing", true, false, 0},
      {"empty meta within the grace", snap("", 100, 100), false, "grace", true, false, 0},
      {"half-written meta past the grace", snap("{\"pid\":1", 5000, 5000), true, "not valid JSON", true, false, 0},
      {"null meta: Node stale, Go held pid 0", snap("null", 5000, 5000), true, "falsy", true, true, 0},
      {"[] within the TTL: Node held (no pid), Go free", snap("[]", 1000), false, "held", false, false, 0},
      {"[] past the TTL", snap("[]", 2 * kHour), true, "TTL", true, false, 0},
      {"live pid, fresh", snap(node_meta("100"), 1000), false, "held", false, true, 100},
      {"dead pid", snap(node_meta("200"), 1000), true, "dead", true, false, 0},
      // B6: a zombie still answers kill(pid, 0): Node and Go think it alive.
      {"zombie pid", snap(node_meta("300"), 1000), true, "zombie", false, true, 300},
      {"pid as a string: TTL only for Node and us, Go free", snap(node_meta("\"100\""), 1000), false, "held", false,
       false, 0},
      {"pid as a string past the TTL", snap(node_meta("\"100\""), 2 * kHour), true, "TTL", true, false, 0},
      {"pid 1.5: Node's kill throws (dead)", snap(node_meta("1.5"), 1000), true, "valid process id", true, false, 0},
      {"pid 100.0 is pid 100 for Node; Go cannot decode it", snap(node_meta("100.0"), 1000), false, "held", false,
       false, 0},
      {"pid 0 is never signalled", snap(node_meta("0"), 1000), false, "held", false, true, 0},
      {"negative pid is never signalled", snap(node_meta("-5"), 1000), false, "held", false, true, -5},
      {"negative pid past the TTL", snap(node_meta("-5"), 2 * kHour), true, "TTL", true, false, 0},
      {"pid above 2^31", snap(node_meta("2147483648"), 1000), true, "valid process id", true, false, 0},
      // D5 for Node holders: nothing refreshes their mtime.
      {"live pid past the TTL", snap(node_meta("100"), 2 * kHour), true, "TTL", true, false, 0},
      // A live offload-lock process keeps its OFD write lock: held whatever the clock says.
      {"live offload-lock process past the TTL", snap(node_meta("100"), 2 * kHour, 10'000, true), false, "live",
       true, false, 0},
      // The proof of life outranks the recorded pid: no forked child keeps
      // the lock (guard_from_fork), so a held one is its holder's (or its
      // keeper's, which releases at once when the recorded pid dies).
      {"dead pid although the write lock is still held", snap(node_meta("200"), 1000, 10'000, true), false, "live",
       true, false, 0},
      // ... while a zombie is the CMD of a `run` about to release and reap it.
      {"zombie pid with the write lock held", snap(node_meta("300"), 1000, 10'000, true), false, "live", false, true,
       300},
      // pid namespaces: a pid recorded in another namespace is never judged by
      // its number here (200 is dead here, 100 alive: neither says anything).
      {"another pid namespace, with its proof of life",
       snap("{\"pid\":200,\"startedAt\":1,\"pidNs\":99}", 1000, 10'000, true), false, "another pid namespace",
       true, false, 0},
      {"another pid namespace, proof of life gone",
       snap("{\"pid\":100,\"startedAt\":1,\"pidNs\":99}", 1000), true, "another pid namespace", false, true,
       100},
      {"this pid namespace, recorded",
       snap("{\"pid\":100,\"startedAt\":" + std::to_string(kNow - kHour) + ",\"pidNs\":77}", 1000), false, "held",
       false, true, 100},
      // D4 / B6: a pid whose process started after the lock was taken.
      {"pid reused: process started 10 min after startedAt",
       snap("{\"pid\":500,\"startedAt\":" + ago10m + "}", 1000), true, "reused", false, true, 500},
      {"process start within the slack of startedAt", snap("{\"pid\":500,\"startedAt\":" + ago10s + "}", 1000), false,
       "held", false, true, 500},
      {"procTicks differ on the same boot",
       snap("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-A\",\"procTicks\":4999}", 1000), true, "reused", false,
       true, 100},
      {"procTicks match on the same boot",
       snap("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-A\",\"procTicks\":5000}", 1000), false, "held", false,
       true, 100},
      {"procStart later than the process start allows",
       snap("{\"pid\":500,\"startedAt\":1,\"procStart\":" + ago10m + "}", 1000), true, "reused", false, true, 500},
      {"another boot", snap("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-B\"}", 1000), true, "boot", false, true,
       100},
      {"another host: its pid cannot be checked here",
       snap("{\"pid\":200,\"startedAt\":1,\"host\":\"gpu9\"}", 1000), false, "held", true, false, 0},
      {"mtime in the future", snap(node_meta("100"), -kHour), false, "held", false, true, 100},
  };
  const process_view pv = fake_view();
  for (const auto& r : rows) {
    SECTION(r.name) {
      verdict v = judge(r.s, kNow, kTtl, kGrace, pv);
      CHECK(v.stale() == r.ours_stale);
      CHECK_THAT(v.reason, Catch::Contains(r.reason_has));
      CHECK(node_is_stale(r.s, kNow, kTtl, pv) == r.node_stale);
      go_view g = go_inspect(r.s, kNow, kTtl, pv);
      CHECK(g.held == r.go_held);
      if (r.go_held) CHECK(g.pid == r.go_pid);
    }
  }
}

TEST_CASE("the verdict names when and on what it may change", "[unit][judge]") {
  const process_view pv = fake_view();
  SECTION("incomplete meta: at the end of the grace, and on a write") {
    verdict v = judge(snap(std::nullopt, 0, 500), kNow, kTtl, kGrace, pv);
    CHECK(v.incomplete);
    CHECK(v.changes_at_ms == kNow - 500 + kGrace);
  }
  SECTION("a live holder: on its death, or at TTL expiry") {
    verdict v = judge(snap(node_meta("100"), 1000), kNow, kTtl, kGrace, pv);
    CHECK(v.holder_pid == 100);
    CHECK_FALSE(v.incomplete);
    CHECK(v.changes_at_ms == kNow - 1000 + kTtl + 1);
  }
  SECTION("no pid: only the TTL") {
    verdict v = judge(snap("[]", 1000), kNow, kTtl, kGrace, pv);
    CHECK(v.holder_pid == 0);
  }
}

TEST_CASE("Go: a path that is not a directory or has no meta is free", "[unit][judge]") {
  const process_view pv = fake_view();
  snapshot file;
  file.present = true;
  file.is_dir = false;
  CHECK_FALSE(go_inspect(file, kNow, kTtl, pv).held);
  CHECK_FALSE(go_inspect(snapshot{}, kNow, kTtl, pv).held);
  CHECK(node_is_stale(snap(std::nullopt, 0), kNow, kTtl, pv));
}

TEST_CASE("an mtime in the future: held, until the observer has watched it unchanged for the TTL or grace", "[unit][judge]") {
  const process_view pv = fake_view();
  SECTION("a v1 holder's meta.json dated a day ahead") {
    snapshot s = snap(node_meta("100"), -24 * kHour);
    verdict v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK_FALSE(v.stale());
    CHECK_FALSE(node_is_stale(s, kNow, kTtl, pv));  // what Node concludes, for a day
    s.unchanged_for_ms = kTtl - 10;
    v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK_FALSE(v.stale());
    CHECK(v.changes_at_ms == kNow + 11);  // re-judged when the watched time passes the TTL
    s.unchanged_for_ms = kTtl + 1;
    v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK(v.stale());
    CHECK_THAT(v.reason, Catch::Contains("not refreshed"));
  }
  SECTION("a directory without meta.json dated a day ahead") {
    snapshot s = snap(std::nullopt, 0, -24 * kHour);
    CHECK_FALSE(judge(s, kNow, kTtl, kGrace, pv).stale());
    s.unchanged_for_ms = kGrace - 100;
    verdict v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK_FALSE(v.stale());
    CHECK(v.changes_at_ms == kNow + 100);
    s.unchanged_for_ms = kGrace;
    CHECK(judge(s, kNow, kTtl, kGrace, pv).stale());
  }
  SECTION("a live offload-lock process's lock is held whatever the time watched") {
    snapshot s = snap(node_meta("100"), -24 * kHour, 10'000, true);
    s.unchanged_for_ms = 10 * kTtl;
    CHECK_FALSE(judge(s, kNow, kTtl, kGrace, pv).stale());
  }
}

TEST_CASE("unknown is not dead: a failed look never reclaims", "[unit][judge]") {
  const process_view pv = fake_view();
  SECTION("meta.json that cannot be read (EACCES, EMFILE, EIO) is unknown, not missing") {
    for (int err : {EACCES, EMFILE, ENFILE, ENOMEM, EIO}) {
      snapshot s = snap(std::nullopt, 0, 10 * kHour);
      s.look_errno = err;
      s.look_failed = "reading meta.json";
      verdict v = judge(s, kNow, kTtl, kGrace, pv);
      CHECK(v.unknown());
      CHECK_FALSE(v.free());
      CHECK(v.error == err);
      CHECK_THAT(v.reason, Catch::Contains("reading meta.json"));
    }
  }
  SECTION("a probe of the proof of life that failed is unknown") {
    snapshot s = snap(node_meta("200"), 2 * kHour);
    s.proof_unknown = true;
    CHECK(judge(s, kNow, kTtl, kGrace, pv).unknown());
  }
  SECTION("kill() failing otherwise than ESRCH or EPERM is unknown") {
    CHECK(judge(snap(node_meta("600"), 1000), kNow, kTtl, kGrace, pv).unknown());
  }
}

TEST_CASE("the proof of life outranks every other sign", "[unit][judge][trust]") {
  const process_view pv = fake_view();
  auto held = [&](const std::string& meta) {
    return judge(snap(meta, 1000, 10'000, true), kNow, kTtl, kGrace, pv).state == judgment::held;
  };
  // A time namespace shifts the start ticks /proc reports; a sandbox shows
  // another boot id; hidepid hides the process; none of it is evidence of
  // death while the write lock is held.
  CHECK(held("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-A\",\"procTicks\":123456}"));
  CHECK(held("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-B\"}"));
  CHECK(held("{\"pid\":500,\"startedAt\":" + std::to_string(kNow - 3 * kHour) + "}"));
  CHECK(held(node_meta("300")));  // a zombie CMD of `run`, about to be reaped after the release
  // Without the proof, the same signs free it.
  CHECK(judge(snap("{\"pid\":100,\"startedAt\":1,\"bootId\":\"boot-A\",\"procTicks\":123456}", 1000), kNow, kTtl,
              kGrace, pv)
            .stale());
}

TEST_CASE("a directory without meta.json: a claim in progress, or a directory someone made", "[unit][judge]") {
  const process_view pv = fake_view();
  SECTION("empty, and already older than the grace when first seen: not a lock") {
    snapshot s = snap(std::nullopt, 0, 60'000);
    s.listed_empty = true;
    s.first_seen_age_ms = 60'000;
    verdict v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK(v.not_a_lock());
    CHECK_THAT(v.reason, Catch::Contains("empty directory"));
  }
  SECTION("empty, first seen young (a crashed mkdir seen as it happened): reclaimed after the grace") {
    snapshot s = snap(std::nullopt, 0, 60'000);
    s.listed_empty = true;
    s.first_seen_age_ms = 100;
    CHECK(judge(s, kNow, kTtl, kGrace, pv).stale());
    s.dir_mtime_ms = kNow - 500;
    s.first_seen_age_ms = 500;
    CHECK(judge(s, kNow, kTtl, kGrace, pv).state == judgment::held);
  }
  SECTION("holding a file that is no part of a lock: not a lock") {
    snapshot s = snap(std::nullopt, 0, 500);
    s.foreign_entry = "notes.txt";
    verdict v = judge(s, kNow, kTtl, kGrace, pv);
    CHECK(v.not_a_lock());
    CHECK_THAT(v.reason, Catch::Contains("notes.txt"));
  }
}

TEST_CASE("times from a file never overflow the judgment", "[unit][judge]") {
  const process_view pv = fake_view();
  for (std::int64_t t : {INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1}) {
    snapshot s = snap("{\"pid\":100,\"startedAt\":" + std::to_string(t) + ",\"procStart\":" + std::to_string(t) + "}", 0);
    s.meta_mtime_ms = t;
    s.dir_mtime_ms = t;
    verdict v = judge(s, kNow, kTtl, kGrace, pv);
    INFO(t);
    // An mtime far in the past is past the TTL; far in the future, not yet.
    CHECK(v.stale() == (t < 0));
  }
  CHECK(sat_sub(INT64_MIN, 1) == INT64_MIN);
  CHECK(sat_sub(INT64_MAX, -1) == INT64_MAX);
  CHECK(sat_add(INT64_MAX, 1) == INT64_MAX);
}
