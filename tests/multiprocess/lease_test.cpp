// gpulease leases among real processes: offload-lock's lease module
// (src/gpulease/) against the gpulease stand-in (tests/interop/gpulease),
// each taking, renewing, releasing and taking over the other's lease in one
// state root, with real SIGKILLs. Every rule named here is one of
// doc/protocol-gpulease.md.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include "gpulease/epoch.hpp"
#include "gpulease/hold.hpp"
#include "gpulease/inherit.hpp"
#include "gpulease/look.hpp"
#include "gpulease/record.hpp"
#include "lease_support.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

using namespace olt;

// ------------------------------------------------------------ child mode

// lease take ROOT CLASS WAIT_MS WINDOW_MS: tries until held or the wait
// ends, printing "waiting busy|unknown WHY" once and then "acquired PID
// EPOCH TOOK_OVER", or "busy WHY" / "unknown WHY" / "error MSG"; then obeys
// lines "renew", "check", "release", "env". lease inherit: the inherited
// lease as "none", "current EPOCH CLASS DIR" or "refused WHY".
int child_lease(int argc, char** argv) {
  namespace sys = offload_lock::detail::sys;
  if (argc >= 1 && std::string(argv[0]) == "inherit") {
    auto in = gl::inheritance_now();
    if (in.k == gl::inheritance::kind::none)
      std::cout << "none" << std::endl;
    else if (in.k == gl::inheritance::kind::current)
      std::cout << "current " << in.lease->epoch << " " << gl::to_string(in.lease->cls) << " " << in.lease->dir
                << std::endl;
    else
      std::cout << "refused " << in.why << std::endl;
    return 0;
  }
  if (argc < 5) return 2;
  const auto loc = location_under(argv[1]);
  gl::take_options o;
  o.cls = *gl::parse_lease_class(argv[2]);
  o.reason = "offload-lock test";
  o.window_ms = std::stoll(argv[4]);
  const std::int64_t deadline = sys::monotonic_ms() + std::stoll(argv[3]);
  bool said = false;
  std::optional<gl::lease_hold> hold;
  bool took_over = false;
  for (;;) {
    auto r = gl::lease_hold::try_take(loc, o);
    took_over = took_over || r.took_over;
    if (r.status == gl::take_status::held) {
      hold = std::move(r.hold);
      break;
    }
    if (r.status == gl::take_status::error) {
      std::cout << "error " << r.err.message() << std::endl;
      return 4;
    }
    const char* what = gl::to_string(r.status);
    if (sys::monotonic_ms() >= deadline) {
      std::cout << what << " " << r.seen.why << std::endl;
      return 1;
    }
    if (!said) std::cout << "waiting " << what << " " << r.seen.why << std::endl;
    said = true;
    // A test's own poll, short so that takeover times measure the rules,
    // not this loop (the acquisition arms a watcher instead).
    ::usleep(20'000);
  }
  std::cout << "acquired " << ::getpid() << " " << hold->epoch() << " " << (took_over ? 1 : 0) << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "renew" || line == "check" || line == "release") {
      offload_lock::error e = line == "renew" ? hold->renew() : line == "check" ? hold->check() : hold->release();
      if (!e)
        std::cout << (line == "renew" ? "renewed" : line == "check" ? "ok" : "released") << std::endl;
      else if (e == offload_lock::errc::lost)
        std::cout << "lost " << e.message() << std::endl;
      else
        std::cout << "error " << e.message() << std::endl;
    } else if (line == "env") {
      std::string s = "env";
      for (const auto& [k, v] : hold->child_environment()) s += " " + k + "=" + v;
      std::cout << s << std::endl;
    }
  }
  return 0;
}

// ------------------------------------------------------------ tests

TEST_CASE("lease: a stand-in holder makes offload-lock wait, and its release lets it in", "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string g_epoch = field(got, 2);
  child ours(self_exe(), lease_child(r.root, "text", 60'000));
  const std::string waiting = line_starting(ours, "waiting");
  CHECK_THAT(waiting, Catch::Contains("busy") && Catch::Contains("pid " + std::to_string(g.pid())) &&
                          Catch::Contains("epoch " + g_epoch) && Catch::Contains("stand-in"));
  g.close_stdin();
  CHECK(line_starting(g, "released") == "released " + g_epoch);
  const std::string mine = line_starting(ours, "acquired");
  REQUIRE(!mine.empty());
  // One counter for both: the next epoch (PROTOCOL "The fencing epoch").
  CHECK(std::stoull(field(mine, 2)) == std::stoull(g_epoch) + 1);
  CHECK(field(mine, 3) == "0");  // nothing was taken over: it was released
  CHECK_THAT(r.standin_view(), Catch::Contains("\"held\":true") && Catch::Contains("\"class\":\"text\"") &&
                                   Catch::Contains("\"pid\":" + std::to_string(ours.pid())));
  ours.close_stdin();
  CHECK(ours.wait() == 0);
  CHECK_FALSE(fs::exists(r.claim));
  CHECK(fs::is_directory(r.lease));  // the container is gpulease's: never removed
}

TEST_CASE("lease: an offload-lock holder makes the stand-in wait, and its release lets it in",
          "[multiprocess][lease]") {
  lease_root r;
  child ours(self_exe(), lease_child(r.root, "media", 0));
  const std::string mine = line_starting(ours, "acquired");
  REQUIRE(!mine.empty());
  {
    child once(standin_exe(), standin_hold(r.root));
    CHECK_THAT(line_starting(once, "timeout"), Catch::Contains("pid " + std::to_string(ours.pid())));
    CHECK(once.wait() == 1);
  }
  child g(standin_exe(), standin_hold(r.root, "60s"));
  CHECK_THAT(line_starting(g, "busy"), Catch::Contains("media"));
  ours.write_line("release");
  CHECK(line_starting(ours, "released") == "released");
  // Within the stand-in's own poll (1 s); 10 s is the bound of a loaded machine.
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  CHECK(std::stoull(field(got, 2)) == std::stoull(field(mine, 2)) + 1);
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: a SIGKILLed stand-in holder is taken over, and only its claim is removed", "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string e = field(got, 2);
  // gpulease's files of that lease and of earlier ones, and the counter's.
  write_file(r.lease / ("hb." + e), std::to_string(now_ms()));
  write_file(r.lease / ("unloaded." + e), "123");
  write_file(r.lease / "hb.1", "1");
  child ours(self_exe(), lease_child(r.root, "media", 60'000));
  REQUIRE(!line_starting(ours, "waiting").empty());
  const auto killed = std::chrono::steady_clock::now();
  g.kill(SIGKILL);
  g.wait();
  const std::string mine = line_starting(ours, "acquired");
  const auto took = std::chrono::steady_clock::now() - killed;
  REQUIRE(!mine.empty());
  CHECK(field(mine, 3) == "1");
  WARN("takeover of a SIGKILLed stand-in by a 20 ms poll: " << std::chrono::duration_cast<ms>(took).count() << " ms");
  for (const char* n : {"hb.1", "unloaded.", "hb."}) {
    const std::string name = std::string(n) == "hb.1" ? n : n + e;
    INFO(name);
    CHECK(fs::exists(r.lease / name));
  }
  CHECK(fs::exists(r.d.path / "gpu" / "epoch"));
  ours.close_stdin();
  CHECK(ours.wait() == 0);
  // Our release removed our epoch's markers only.
  CHECK(fs::exists(r.lease / ("hb." + e)));
  CHECK(fs::exists(r.lease / "hb.1"));
}

TEST_CASE("lease: a SIGKILLed offload-lock holder is taken over by the stand-in within its poll",
          "[multiprocess][lease]") {
  lease_root r;
  child ours(self_exe(), lease_child(r.root, "text", 0));
  REQUIRE(!line_starting(ours, "acquired").empty());
  child g(standin_exe(), standin_hold(r.root, "60s"));
  REQUIRE(!line_starting(g, "busy").empty());
  ours.kill(SIGKILL);
  ours.wait();
  CHECK(!line_starting(g, "acquired").empty());
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: both sides take over by the same rules", "[multiprocess][lease]") {
  lease_root r;
  const std::int64_t now = now_ms();
  const std::int64_t ticks = own_ticks();
  struct row {
    const char* name;
    std::string claim;
    std::optional<std::string> heartbeat;
    bool takeable;
  };
  const std::int64_t self = ::getpid();
  std::vector<row> rows = {
      {"alive, renewed now", forged(40, self, ticks, now, now + 3'600'000), std::nullopt, false},
      {"pid reused: another start", forged(41, self, ticks + 1, now, now + 3'600'000), std::nullopt, true},
      {"holder gone", forged(42, dead_pid(), 0, now, now + 3'600'000), std::nullopt, true},
      {"stale heartbeat, window open", forged(43, self, ticks, now - 130'000, now + 60'000), std::nullopt, false},
      {"stale heartbeat, window over", forged(44, self, ticks, now - 130'000, now - 1'000), std::nullopt, true},
      {"fresh hb.<epoch>, window over", forged(45, self, ticks, now - 130'000, now - 1'000), std::to_string(now),
       false},
      {"no pid, window open", forged(46, 0, 0, now, now + 60'000), std::nullopt, false},
      {"no pid, window over", forged(47, 0, 0, now, now - 1), std::nullopt, true},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    fs::remove_all(r.lease);
    fs::create_directories(r.lease);
    write_file(r.claim, row.claim);
    const std::uint64_t e = gl::parse_record(row.claim)->epoch;
    if (row.heartbeat) write_file(r.lease / ("hb." + std::to_string(e)), *row.heartbeat);
    // gpulease's readers, through the stand-in, call it free exactly when it is takeable.
    CHECK_THAT(r.standin_view(), Catch::Contains(row.takeable ? "\"held\":false" : "\"held\":true"));
    const auto v = gl::look_lease(r.lease.string());
    CHECK((v.state == gl::lease_state::dead) == row.takeable);
    CHECK((v.state == gl::lease_state::alive) == !row.takeable);
    // And offload-lock takes it over exactly then.
    child ours(self_exe(), lease_child(r.root, "media", 0));
    const std::string out = line_starting(ours, row.takeable ? "acquired" : "busy");
    CHECK(!out.empty());
    ours.close_stdin();
    ours.wait();
    if (!row.takeable) CHECK(read_file(r.claim) == row.claim);  // left exactly as it was
  }
}

TEST_CASE("lease: a claim being written is left for gpulease's grace, then taken over", "[multiprocess][lease]") {
  lease_root r;
  write_file(r.claim, "");
  child early(self_exe(), lease_child(r.root, "media", 0));
  CHECK_THAT(line_starting(early, "busy"), Catch::Contains("being written"));
  early.wait();
  CHECK(fs::exists(r.claim));
  set_mtime(r.claim, now_ms() - 11'000);
  child late(self_exe(), lease_child(r.root, "media", 0));
  CHECK(field(line_starting(late, "acquired"), 3) == "1");
  late.close_stdin();
  late.wait();
}

TEST_CASE("lease: a claim that cannot be read is never taken over", "[multiprocess][lease]") {
  lease_root r;
  write_file(r.d.path / "elsewhere.json", "garbage");
  fs::create_symlink(r.d.path / "elsewhere.json", r.claim);
  set_mtime(r.claim, now_ms() - 60'000);
  child ours(self_exe(), lease_child(r.root, "media", 300));
  CHECK_THAT(line_starting(ours, "unknown"), Catch::Contains("cannot be read"));
  CHECK(ours.wait() == 1);
  CHECK(fs::is_symlink(r.claim));
  CHECK(read_file(r.d.path / "elsewhere.json") == "garbage");
}

TEST_CASE("lease: renewing writes the heartbeat gpulease reads, and a replaced claim is lost", "[multiprocess][lease]") {
  lease_root r;
  child ours(self_exe(), lease_child(r.root, "media", 0));
  const std::string mine = line_starting(ours, "acquired");
  REQUIRE(!mine.empty());
  const std::string e = field(mine, 2);
  const std::int64_t before = now_ms();
  ours.write_line("renew");
  CHECK(line_starting(ours, "renewed") == "renewed");
  const auto hb = gl::parse_go_int(read_file(r.lease / ("hb." + e)));
  REQUIRE(hb);
  CHECK(*hb >= before);
  CHECK_THAT(r.standin_view(), Catch::Contains("\"renewedAt\":" + std::to_string(*hb)));
  ours.write_line("env");
  CHECK(line_starting(ours, "env") ==
        "env GPU_LEASE_DIR=" + r.lease.string() + " GPU_LEASE_EPOCH=" + e + " GPU_LEASE_CLASS=media");
  // Another holder's claim in its place (gpulease's own takeover of it).
  const std::string other = forged(std::stoull(e) + 5, ::getpid(), own_ticks(), now_ms(), now_ms() + 60'000);
  fs::remove(r.claim);
  write_file(r.claim, other);
  ours.write_line("check");
  CHECK_THAT(line_starting(ours, "lost"), Catch::Contains("another holder"));
  ours.write_line("renew");
  CHECK(!line_starting(ours, "lost").empty());
  ours.write_line("release");
  CHECK(!line_starting(ours, "lost").empty());
  CHECK(read_file(r.claim) == other);  // never removed
  ours.close_stdin();
  ours.wait();
  CHECK(read_file(r.claim) == other);
}

TEST_CASE("lease: the counter's lock is waited for, and its debris cleared as gpulease clears it",
          "[multiprocess][lease]") {
  lease_root r;
  const fs::path lock = r.d.path / "gpu" / "epoch.lock";
  write_file(r.d.path / "gpu" / "epoch", "41\n");
  write_file(lock, "");
  set_mtime(lock, now_ms() - 31'000);
  auto e = gl::issue_epoch((r.d.path / "gpu").string());
  REQUIRE(e);
  CHECK(*e == 42);
  CHECK_FALSE(fs::exists(lock));
  CHECK(read_file(r.d.path / "gpu" / "epoch") == "42");
  // A young lock: someone is inside; wait for it to go.
  write_file(lock, "");
  std::thread remover([&] {
    std::this_thread::sleep_for(300ms);
    fs::remove(lock);
  });
  e = gl::issue_epoch((r.d.path / "gpu").string());
  remover.join();
  REQUIRE(e);
  CHECK(*e == 43);
  // A young lock an offload-lock process left when it was killed inside:
  // its maker is dead, so it is debris at once (no 30 s stall); one whose
  // maker lives is waited for (2 s, then EAGAIN).
  const std::string ns = " ns " + std::to_string(offload_lock::detail::sys::pid_namespace().value_or(0)) + "\n";
  // Another pid namespace's pid says nothing here: waited for.
  write_file(lock, "offload-lock pid " + std::to_string(dead_pid()) + " ns 1\n");
  REQUIRE_FALSE(gl::issue_epoch((r.d.path / "gpu").string()));
  write_file(lock, "offload-lock pid " + std::to_string(dead_pid()) + ns);
  e = gl::issue_epoch((r.d.path / "gpu").string());
  REQUIRE(e);
  CHECK(*e == 44);
  CHECK_FALSE(fs::exists(lock));
  write_file(lock, "offload-lock pid " + std::to_string(::getpid()) + ns);
  e = gl::issue_epoch((r.d.path / "gpu").string());
  REQUIRE_FALSE(e);
  CHECK(fs::exists(lock));
  fs::remove(lock);
  // An unparseable counter is never restarted from zero.
  write_file(r.d.path / "gpu" / "epoch", "forty-three");
  e = gl::issue_epoch((r.d.path / "gpu").string());
  REQUIRE_FALSE(e);
  CHECK_THAT(e.error().message(), Catch::Contains("refusing to restart"));
  CHECK(read_file(r.d.path / "gpu" / "epoch") == "forty-three");
}

TEST_CASE("lease: a child started under a stand-in lease holds through it", "[multiprocess][lease]") {
  lease_root r;
  child g(standin_exe(),
          {"exec", "-state-dir", r.root, "-class", "text", "--", self_exe(), "--child", "lease", "inherit"});
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  CHECK(line_starting(g, "current") == "current " + field(got, 2) + " text " + r.lease.string());
  CHECK(g.wait() == 0);
  // Outside any lease: nothing inherited.
  child none(self_exe(), {"--child", "lease", "inherit"}, {{"GPU_LEASE_DIR", std::nullopt}});
  CHECK(none.read_line() == "none");
  // Half of it, a bad epoch, a bad class, a lease no longer current: refused.
  const std::vector<env_changes> bad = {
      {{"GPU_LEASE_DIR", r.lease.string()}, {"GPU_LEASE_EPOCH", "3"}, {"GPU_LEASE_CLASS", std::nullopt}},
      {{"GPU_LEASE_DIR", r.lease.string()}, {"GPU_LEASE_EPOCH", "0"}, {"GPU_LEASE_CLASS", "media"}},
      {{"GPU_LEASE_DIR", r.lease.string()}, {"GPU_LEASE_EPOCH", "3"}, {"GPU_LEASE_CLASS", "video"}},
      {{"GPU_LEASE_DIR", r.lease.string()}, {"GPU_LEASE_EPOCH", field(got, 2)}, {"GPU_LEASE_CLASS", "text"}},
  };
  for (const auto& env : bad) {
    child c(self_exe(), {"--child", "lease", "inherit"}, env);
    CHECK_THAT(c.read_line().value_or(""), Catch::StartsWith("refused"));
    c.wait();
  }
}

TEST_CASE("lease: epochs are never shared among offload-lock and stand-in acquirers", "[multiprocess][lease]") {
  lease_root r;
  const fs::path cs = r.d.path / "cs";
  fs::create_directories(cs);
  // Three stand-ins loop with the contention suite's critical section;
  // offload-lock takes and releases beside them in this process.
  std::vector<std::unique_ptr<child>> loops;
  for (int k = 0; k < 3; ++k)
    loops.push_back(std::make_unique<child>(
        standin_exe(), std::vector<std::string>{"loop", "-state-dir", r.root, "-cs-dir", cs.string(), "-tag",
                                                "g" + std::to_string(k), "-wait", "20s", "-poll", "20ms"}));
  std::set<std::uint64_t> ours;
  const auto loc = location_under(r.root);
  for (int taken = 0; taken < 20;) {
    auto t = gl::lease_hold::try_take(loc, {});
    REQUIRE(t.status != gl::take_status::error);
    if (t.status != gl::take_status::held) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    CHECK(ours.insert(t.hold->epoch()).second);
    CHECK_FALSE(fs::exists(cs / "in-cs"));  // nobody in the critical section while we hold
    std::this_thread::sleep_for(2ms);
    CHECK_FALSE(t.hold->release());
    ++taken;
  }
  write_file(cs / "stop", "");
  std::set<std::uint64_t> theirs;
  for (auto& l : loops) {
    while (auto line = l->read_line()) {
      CHECK(line->rfind("O ", 0) != 0);  // no overlap among the stand-ins
      CHECK(line->rfind("E ", 0) != 0);
      if (line->rfind("A ", 0) == 0) CHECK(theirs.insert(std::stoull(field(*line, 6).substr(1))).second);
    }
    CHECK(l->wait() == 0);
  }
  CHECK(theirs.size() > 0);
  for (auto e : ours) CHECK(theirs.count(e) == 0);
}

TEST_CASE("lease: directories it makes are as open as the root", "[multiprocess][lease]") {
  temp_dir d;
  ::chmod(d.str().c_str(), 0777);
  const mode_t old = ::umask(022);
  child ours(self_exe(), lease_child(d.str(), "media", 0));
  ::umask(old);
  REQUIRE(!line_starting(ours, "acquired").empty());
  struct stat gpu {
  }, lease{};
  REQUIRE(::stat((d.path / "gpu").c_str(), &gpu) == 0);
  REQUIRE(::stat((d.path / "gpu" / "lease").c_str(), &lease) == 0);
  // Another user's gpulease participant can claim and count there too.
  CHECK((gpu.st_mode & 0777) == 0777);
  CHECK((lease.st_mode & 0777) == 0777);
  ours.close_stdin();
  CHECK(ours.wait() == 0);
}

TEST_CASE("lease: a forked child neither renews nor releases its parent's lease", "[multiprocess][lease]") {
  lease_root r;
  auto t = gl::lease_hold::try_take(location_under(r.root), {});
  REQUIRE(t.status == gl::take_status::held);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool renew_lost = t.hold->renew() == offload_lock::errc::lost;
    const bool release_quiet = !t.hold->release();
    ::_exit(renew_lost && release_quiet && fs::exists(r.claim) ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fs::exists(r.claim));
  CHECK_FALSE(t.hold->check());
  CHECK_FALSE(t.hold->release());
  CHECK_FALSE(fs::exists(r.claim));
}
