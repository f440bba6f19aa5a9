// The judgment of a lock directory that is gpulease's lease directory too
// (shared_dir.hpp), row by row: what is in the directory, what the kernel
// says of the pids, and offload-lock's answer.
#include <catch2/catch.hpp>
#include <map>

#include "gpulease/record.hpp"
#include "shared_dir.hpp"

using namespace offload_lock::detail;
namespace gl = offload_lock::detail::gpulease;

namespace {

constexpr std::int64_t kNow = 1'800'000'000'000;
constexpr std::int64_t kTtl = 3'600'000;
constexpr std::int64_t kGrace = 2'000;

// 100 lives (started at tick 5000), 200 is gone.
process_view view() {
  process_view pv;
  pv.probe = [](std::int64_t pid) { return pid == 100 ? sys::liveness::alive : sys::liveness::dead; };
  pv.start_of = [](std::int64_t pid) -> std::optional<sys::proc_start> {
    if (pid != 100) return std::nullopt;
    return sys::proc_start{5000, kNow - 3'600'000};
  };
  return pv;
}

gl::lease_process_view lease_view() {
  gl::lease_process_view pv;
  pv.probe = [](std::int64_t pid) { return pid == 100 ? sys::liveness::alive : sys::liveness::dead; };
  pv.start_ticks = [](std::int64_t pid) -> std::optional<std::uint64_t> {
    if (pid != 100) return std::nullopt;
    return 5000;
  };
  return pv;
}

// A directory whose mtime is `dir_age` ms old, born `born_age` ms ago
// (nullopt: the file system keeps no birth time).
shared_observed dir(std::int64_t dir_age, std::optional<std::int64_t> born_age) {
  shared_observed so;
  so.o.snap.present = true;
  so.o.snap.is_dir = true;
  so.o.snap.dir_mode = 0755;
  so.o.snap.dir_mtime_ms = kNow - dir_age;
  if (born_age) so.born_ms = kNow - *born_age;
  return so;
}

// ... holding meta.json `bytes`, written `age` ms ago.
shared_observed with_meta(const std::string& bytes, std::int64_t age) {
  shared_observed so = dir(age, 60'000);
  so.o.snap.meta_exists = true;
  so.o.snap.meta = parse_meta(bytes);
  so.o.snap.meta_mtime_ms = kNow - age;
  so.lease.claim.st = gl::file_read::state::present;
  so.lease.claim.bytes = bytes;
  so.lease.claim.mtime_ms = kNow - age;
  return so;
}

std::string lease_claim(std::int64_t pid, std::int64_t ticks, std::int64_t renewed_age, std::int64_t window_left) {
  gl::record r;
  r.epoch = 7;
  r.lease_class = "media";
  r.pid = pid;
  r.start_ticks = ticks;
  r.acquired_at_ms = r.renewed_at_ms = kNow - renewed_age;
  r.expires_at_ms = kNow + window_left;
  return gl::serialize_record(r);
}

std::string v1(std::int64_t pid) { return "{\"pid\":" + std::to_string(pid) + ",\"startedAt\":" + std::to_string(kNow - 1000) + "}"; }

judgment judged(const shared_observed& so) { return judge_shared(so, kNow, kTtl, kGrace, view(), lease_view()).state; }

}  // namespace

TEST_CASE("a shared lock directory is judged by both protocols' rules", "[unit][lease]") {
  // No claim: gpulease's container, free to claim inside once no v1
  // runner can be between its mkdir and its write, by the birth time.
  CHECK(judged(dir(10, 60'000)) == judgment::absent);       // emptied just now, born a minute ago
  CHECK(judged(dir(10, 500)) == judgment::held);            // born half a second ago: a v1 runner's, maybe
  CHECK(judged(dir(10, std::nullopt)) == judgment::held);   // no birth time: the mtime decides
  CHECK(judged(dir(5'000, std::nullopt)) == judgment::absent);
  {
    // Young, but holding gpulease's files (a dead holder's heartbeat after
    // its takeover): no v1 runner's new directory.
    auto so = dir(10, 500);
    so.lease_files = true;
    CHECK(judged(so) == judgment::absent);
  }
  {
    auto so = dir(10, 500);
    const verdict v = judge_shared(so, kNow, kTtl, kGrace, view(), lease_view());
    CHECK(v.changes_at_ms == kNow + kGrace - 500);
    CHECK(v.watch_contents);
  }
  // What neither side makes there: never a lock, never touched.
  {
    auto so = dir(60'000, 60'000);
    so.o.snap.foreign_entry = "notes.txt";
    CHECK(judged(so) == judgment::not_a_lock);
  }

  // gpulease's own claim: gpulease's rules alone (a v1 reading would call
  // it held for the TTL whatever its holder).
  CHECK(judged(with_meta(lease_claim(100, 5000, 1000, 3'600'000), 1000)) == judgment::held);
  CHECK(judged(with_meta(lease_claim(200, 0, 1000, 3'600'000), 1000)) == judgment::stale);
  CHECK(judged(with_meta(lease_claim(100, 4999, 1000, 3'600'000), 1000)) == judgment::stale);  // pid reused
  CHECK(judged(with_meta(lease_claim(100, 5000, 200'000, -1), 200'000)) == judgment::stale);   // silent, window over
  CHECK(judged(with_meta(lease_claim(0, 0, 1000, 60'000), 1000)) == judgment::held);           // no pid: its window
  {
    // Its heartbeat cannot be read where it would decide: unknown, never stale.
    auto so = with_meta(lease_claim(100, 5000, 200'000, -1), 200'000);
    so.lease.heartbeat.st = gl::file_read::state::unreadable;
    CHECK(judged(so) == judgment::unknown);
  }

  // A v1 record alone: the v1 rules (gpulease would call it dead: no holder pid, no window).
  CHECK(judged(with_meta(v1(100), 1000)) == judgment::held);
  CHECK(judged(with_meta(v1(200), 1000)) == judgment::stale);

  // Both in one record (offload-lock's): held while either side holds it.
  {
    const std::string both = gl::append_record(v1(100), gl::parse_record(lease_claim(100, 5000, 1000, 3'600'000)).value());
    CHECK(judged(with_meta(both, 1000)) == judgment::held);
    // Past the v1 TTL, unrefreshed: its lease still holds it.
    CHECK(judged(with_meta(both, kTtl + 1000)) == judgment::held);
    const std::string dead = gl::append_record(v1(200), gl::parse_record(lease_claim(200, 0, 1000, 3'600'000)).value());
    CHECK(judged(with_meta(dead, 1000)) == judgment::stale);
    // A live offload-lock holder's proof outranks both.
    auto locked = with_meta(dead, 1000);
    locked.o.snap.proof_of_life = true;
    CHECK(judged(locked) == judgment::held);
  }

  // Unparseable: a claim being written, left for gpulease's 10 s, not the
  // 2 s of a v1 lock.
  CHECK(judged(with_meta("", 5'000)) == judgment::held);
  CHECK(judged(with_meta("{\"epoch\":", 9'000)) == judgment::held);
  CHECK(judged(with_meta("", 11'000)) == judgment::stale);
}
