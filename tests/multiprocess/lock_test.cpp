// Real processes contending on a real directory through the library: wait
// and hand over, crash takeover, TTL and grace reclaim, ownership on release,
// liveness rules, heartbeat, and a lock never seen without its meta.json.
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <thread>

#include "meta.hpp"
#include "os/watch.hpp"
#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
namespace olsys = offload_lock::detail::sys;
using namespace olt;

namespace {

std::unique_ptr<child> holder(const temp_dir& d, long wait_ms = -1, long ttl_ms = 3'600'000) {
  return std::make_unique<child>(
      self_exe(), std::vector<std::string>{"--child", "hold", d.lock(), std::to_string(wait_ms), std::to_string(ttl_ms)});
}

std::string meta_of(const temp_dir& d) { return read_file(fs::path(d.lock()) / "meta.json"); }


}  // namespace

TEST_CASE("a second process waits while the first holds, and gets the lock after release", "[multiprocess]") {
  temp_dir d;
  auto first = holder(d);
  auto line = first->read_line();
  REQUIRE(line);
  REQUIRE(line->rfind("acquired " + std::to_string(first->pid()), 0) == 0);

  auto second = holder(d);
  // While the first holds, the second prints nothing and the lock stays the first's.
  CHECK_FALSE(second->read_line(500ms));
  CHECK(ol::inspect(d.lock()).pid == first->pid());

  first->write_line("release");
  CHECK(first->read_line() == std::string("released"));
  auto got = second->read_line();
  REQUIRE(got);
  CHECK(got->rfind("acquired " + std::to_string(second->pid()), 0) == 0);
  CHECK(ol::inspect(d.lock()).pid == second->pid());
}

TEST_CASE("a holder killed with SIGKILL is taken over at once", "[multiprocess]") {
  temp_dir d;
  auto first = holder(d);
  REQUIRE(first->read_line());
  auto second = holder(d);
  CHECK_FALSE(second->read_line(300ms));
  first->kill(SIGKILL);
  REQUIRE(first->wait());
  auto got = second->read_line();
  REQUIRE(got);
  CHECK(got->rfind("acquired", 0) == 0);
}

TEST_CASE("busy and timed out are outcomes, not errors", "[multiprocess]") {
  temp_dir d;
  auto first = holder(d);
  REQUIRE(first->read_line());
  auto r0 = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE_FALSE(r0);
  CHECK(r0.error() == ol::errc::busy);
  auto start = std::chrono::steady_clock::now();
  auto r1 = ol::lock::acquire(d.lock(), 300ms);
  REQUIRE_FALSE(r1);
  CHECK(r1.error() == ol::errc::timed_out);
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
}

TEST_CASE("a meta.json back-dated past the TTL is reclaimed, even with a live pid (a v1 holder)", "[multiprocess]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "30");
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
  SECTION("within the TTL it is held") {
    auto r = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE_FALSE(r);
    CHECK(r.error() == ol::errc::busy);
  }
  SECTION("past the TTL it is reclaimed") {
    set_mtime(fs::path(d.lock()) / "meta.json", now_ms() - 2 * 3600 * 1000);
    auto r = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(r);
    CHECK(ol::inspect(d.lock()).pid == ::getpid());
  }
  sleeper.terminate();
}

TEST_CASE("a lock directory without meta is left alone for the grace, then reclaimed (B3)", "[multiprocess]") {
  temp_dir d;
  make_lock(d.lock(), std::nullopt);
  SECTION("younger than the grace: busy") {
    ol::lock_options o;
    o.path = d.lock();
    o.wait = 0ms;
    o.grace = 60s;
    auto r = ol::lock::acquire(o);
    REQUIRE_FALSE(r);
    CHECK(r.error() == ol::errc::busy);
    CHECK(fs::is_directory(d.lock()));
  }
  SECTION("empty and already older than the grace when first seen: a directory someone made, refused") {
    // A claim in progress is seen young; an empty directory that was old
    // before anyone looked is no claim (doc/protocol.md B3): never removed.
    set_mtime(d.lock(), now_ms() - 10'000);
    auto r = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE_FALSE(r);
    CHECK(r.error().code() == std::errc::file_exists);
    CHECK_THAT(r.error().message(), Catch::Contains("empty directory") && Catch::Contains("gpu.lock/gpu.lock"));
    CHECK(fs::is_directory(d.lock()));
  }
  SECTION("older than the grace, holding the temporary meta of a crashed mkdir-fallback claim: reclaimed") {
    write_file(fs::path(d.lock()) / ".meta.json.0123456789ab", "{\"pid\":1");
    set_mtime(fs::path(d.lock()) / ".meta.json.0123456789ab", now_ms() - 10'000);
    set_mtime(d.lock(), now_ms() - 10'000);
    auto r = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(r);
    CHECK(meta_of(d) == r->meta_json());
  }
  SECTION("a waiter takes it when the grace runs out, without being told") {
    ol::lock_options o;
    o.path = d.lock();
    o.grace = 300ms;
    auto start = std::chrono::steady_clock::now();
    auto r = ol::lock::acquire(o);
    REQUIRE(r);
    CHECK(std::chrono::steady_clock::now() - start >= 250ms);
  }
  SECTION("a waiter takes it as soon as the Node runner finishes its write and releases") {
    ol::lock_options o;
    o.path = d.lock();
    o.grace = 60s;
    std::atomic<bool> got{false};
    std::thread waiter([&] {
      auto r = ol::lock::acquire(o);
      got = static_cast<bool>(r);
    });
    write_file(fs::path(d.lock()) / "meta.json",
               "{\"pid\":" + std::to_string(::getpid()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
    CHECK_FALSE(eventually([&] { return got.load(); }, 300ms));
    fs::remove_all(d.lock());
    waiter.join();
    CHECK(got);
  }
}

TEST_CASE("a dead holder's lock is reclaimed; a zombie holder counts as dead (B6)", "[multiprocess]") {
  temp_dir d;
  SECTION("dead pid") {
    make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
    REQUIRE(ol::lock::acquire(d.lock(), 0ms));
  }
  SECTION("zombie pid") {
    boost::process::child z("/bin/true");
    // Not reaped: it stays a zombie until this process waits for it.
    REQUIRE(eventually([&] {
      std::string st = read_file("/proc/" + std::to_string(z.id()) + "/stat");
      return st.find(") Z ") != std::string::npos;
    }));
    make_lock(d.lock(), "{\"pid\":" + std::to_string(z.id()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
    REQUIRE(::kill(z.id(), 0) == 0);  // what Node and Go see: alive
    CHECK(ol::inspect(d.lock()).node_stale == false);
    auto r = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(r);
    z.wait();
  }
}

TEST_CASE("a reused pid does not keep a lock held (B6, D4)", "[multiprocess]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "30");
  const std::string pid = std::to_string(sleeper.id());
  SECTION("a process started after the recorded startedAt") {
    make_lock(d.lock(), "{\"pid\":" + pid + ",\"startedAt\":" + std::to_string(now_ms() - 600'000) + "}");
    ol::info i = ol::inspect(d.lock());
    CHECK_FALSE(i.held);
    CHECK_THAT(i.stale.value_or(""), Catch::Contains("reused"));
    CHECK(ol::lock::acquire(d.lock(), 0ms));
  }
  SECTION("another procTicks on this boot") {
    make_lock(d.lock(), "{\"pid\":" + pid + ",\"startedAt\":1,\"bootId\":\"" +
                            read_file("/proc/sys/kernel/random/boot_id").substr(0, 36) + "\",\"procTicks\":1}");
    CHECK_THAT(ol::inspect(d.lock()).stale.value_or(""), Catch::Contains("reused"));
  }
  SECTION("another boot") {
    make_lock(d.lock(), "{\"pid\":" + pid + ",\"startedAt\":1,\"bootId\":\"not-this-boot\"}");
    CHECK_THAT(ol::inspect(d.lock()).stale.value_or(""), Catch::Contains("another boot"));
  }
  SECTION("the same process, recorded by offload-lock, is held") {
    ol::lock_options o;
    o.path = d.lock();
    o.pid = sleeper.id();
    auto l = ol::lock::acquire(o);
    REQUIRE(l);
    l->detach();  // drop this process's own proof of life: only the pid rules remain
    CHECK(ol::inspect(d.lock()).held);
  }
  sleeper.terminate();
}

TEST_CASE("release by a non-owner leaves the lock in place (B5)", "[multiprocess]") {
  temp_dir d;
  auto first = holder(d);
  auto line = first->read_line();
  REQUIRE(line);
  std::string token = line->substr(line->rfind(' ') + 1);
  ol::release_request wrong;
  wrong.token = "someone-else";
  auto r = ol::release_by(d.lock(), wrong);
  REQUIRE(r);
  CHECK(r->status == ol::release_status::not_owner);
  CHECK(r->before.pid == first->pid());
  CHECK(ol::inspect(d.lock()).held);
  ol::release_request by_pid;
  by_pid.pid = ::getpid();
  CHECK(ol::release_by(d.lock(), by_pid)->status == ol::release_status::not_owner);
  CHECK(fs::exists(fs::path(d.lock()) / "meta.json"));

  ol::release_request right;
  right.token = token;
  CHECK(ol::release_by(d.lock(), right)->status == ol::release_status::released);
  CHECK_FALSE(fs::exists(d.lock()));
  // The holder notices on its own, at once (inotify; its heartbeat period is 15 minutes here).
  CHECK(first->read_line() == std::string("on_lost"));
  first->write_line("release");
  CHECK(first->read_line() == std::string("lost"));
}

TEST_CASE("a holder whose lock was replaced reports lost and removes nothing (B5, D2/D3)", "[multiprocess]") {
  temp_dir d;
  auto first = holder(d);
  REQUIRE(first->read_line());
  // What a v1 runner's double reclaim does: rm -rf, then its own mkdir + meta.
  fs::remove_all(d.lock());
  make_lock(d.lock(), "{\"pid\":" + std::to_string(::getpid()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
  // The holder learns of it on its own, at once (inotify on the name in the parent).
  CHECK(first->read_line() == std::string("on_lost"));
  first->write_line("still");
  CHECK(first->read_line() == std::string("not held"));
  first->write_line("release");
  CHECK(first->read_line() == std::string("lost"));
  CHECK(read_file(fs::path(d.lock()) / "meta.json").find(std::to_string(::getpid())) != std::string::npos);
}

TEST_CASE("the heartbeat keeps a live holder fresh past its TTL (B7) and notices loss", "[multiprocess]") {
  temp_dir d;
  // TTL 600 ms: the heartbeat runs every 150 ms.
  auto first = holder(d, -1, 600);
  REQUIRE(first->read_line());
  const auto meta = fs::path(d.lock()) / "meta.json";
  auto initial = fs::last_write_time(meta);
  REQUIRE(eventually([&] { return fs::last_write_time(meta) != initial; }, 5s));
  // Every participant's TTL rule sees a fresh holder, well past one TTL.
  std::this_thread::sleep_for(1200ms);  // let more than one TTL pass; the claim is about elapsed time itself
  ol::info i = ol::inspect(d.lock(), 600ms);
  CHECK(i.held);
  CHECK(i.age < 600ms);
  CHECK_FALSE(i.node_stale);
  auto second = ol::lock::acquire(d.lock(), 0ms);
  CHECK_FALSE(second);
  fs::remove_all(d.lock());
  CHECK(first->read_line() == std::string("on_lost"));
}

TEST_CASE("a stale lock that cannot be removed is a clear error, not a hang", "[multiprocess]") {
  if (running_as_root())
    if (auto why = temp_closed_to(65534)) OLT_NOT_RUN(*why);
  temp_dir d;
  make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
  // root ignores directory modes: as root, contend as an unprivileged user.
  auto contend = [&] {
    std::vector<std::string> args = {"--lock", d.lock(), "acquire", "--wait", "30s"};
    if (!running_as_root()) return std::make_unique<child>(cli_exe(), args);
    std::vector<std::string> full = {"--reuid=65534", "--regid=65534", "--clear-groups", cli_exe()};
    full.insert(full.end(), args.begin(), args.end());
    return std::make_unique<child>("/usr/bin/setpriv", full);
  };
  SECTION("a read-only parent") {
    ::chmod(d.str().c_str(), 0555);
    auto c = contend();
    c->close_stdin();
    CHECK(c->wait(20s) == 4);
    CHECK_THAT(c->err_text(), Catch::Contains(d.lock()) && Catch::Contains("ermission denied"));
  }
  if (running_as_root()) {
    SECTION("another user's stale lock in a sticky, world-writable parent (a shared /tmp)") {
      ::chmod(d.str().c_str(), 01777);
      auto c = contend();
      c->close_stdin();
      CHECK(c->wait(20s) == 4);
      CHECK_THAT(c->err_text(), Catch::Contains("cannot remove stale lock " + d.lock()) &&
                                    Catch::Contains("dead") && Catch::Contains("not permitted"));
      // Nothing of ours is left beside it.
      int entries = 0;
      for (fs::directory_iterator it(d.path), end; it != end; ++it) ++entries;
      CHECK(entries == 1);
    }
  }
  CHECK(fs::exists(fs::path(d.lock()) / "meta.json"));
}

TEST_CASE("meta.json written by the library is byte-compatible with the Node runners' (B2)", "[multiprocess]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  std::string bytes = meta_of(d);
  CHECK(bytes == l->meta_json());
  std::string prefix = "{\"pid\":" + std::to_string(::getpid()) + ",\"startedAt\":";
  REQUIRE(bytes.rfind(prefix, 0) == 0);
  std::size_t i = prefix.size();
  while (i < bytes.size() && std::isdigit(static_cast<unsigned char>(bytes[i]))) ++i;
  CHECK(i - prefix.size() == 13);  // epoch milliseconds
  CHECK(bytes[i] == ',');
  auto started = std::stoll(bytes.substr(prefix.size(), i - prefix.size()));
  CHECK(std::llabs(started - now_ms()) < 60'000);
}

TEST_CASE("a lock is never visible without a complete meta.json (B1)", "[multiprocess]") {
  temp_dir d;
  const int cycles = 300;
  const auto meta = fs::path(d.lock()) / "meta.json";
  long seen = 0, incomplete = 0;
  // Reads meta.json through a descriptor of the directory it found, and
  // counts a violation only if that same directory is still at the path
  // afterwards (a release moves the directory aside before emptying it, so
  // an emptied directory never comes back to the path).
  auto look = [&] {
    int dir = ::open(d.lock().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) return;
    struct stat before {};
    ::fstat(dir, &before);
    std::string m;
    int f = ::openat(dir, "meta.json", O_RDONLY | O_CLOEXEC);
    if (f >= 0) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(f, buf, sizeof buf)) > 0) m.append(buf, static_cast<std::size_t>(n));
      ::close(f);
    }
    struct stat now {};
    bool still_there = ::lstat(d.lock().c_str(), &now) == 0 && now.st_ino == before.st_ino && now.st_dev == before.st_dev;
    ::close(dir);
    if (!still_there) return;
    ++seen;
    if (!offload_lock::detail::parse_meta(m).parsed) ++incomplete;
  };
  auto watch = [&](child& c) {
    for (;;) {
      look();
      if (c.read_line(0ms) || c.wait(0ms)) break;
    }
  };
  SECTION("renameat2 with RENAME_NOREPLACE") {
    child c(self_exe(), {"--child", "cycle", d.lock(), std::to_string(cycles)});
    watch(c);
    CHECK(c.wait() == 0);
    CHECK(seen > 0);
    CHECK(incomplete == 0);
  }
  SECTION("the mkdir fallback still never shows a partial meta.json") {
    child c(self_exe(), {"--child", "cycle", d.lock(), std::to_string(cycles)},
            {{"OFFLOAD_LOCK_NO_RENAMEAT2", std::string("1")}});
    long partial = 0;
    for (;;) {
      boost::system::error_code ec;
      std::string m = read_file(meta);
      if (!m.empty() && !offload_lock::detail::parse_meta(m).parsed) ++partial;
      if (c.read_line(0ms) || c.wait(0ms)) break;
    }
    CHECK(c.wait() == 0);
    CHECK(partial == 0);
  }
  CHECK_FALSE(fs::exists(d.lock()));
  // No staging or moved-aside directory is left behind.
  CHECK(fs::directory_iterator(d.path) == fs::directory_iterator());
}

TEST_CASE("many processes cycling through the lock never hold it together", "[multiprocess]") {
  temp_dir d;
  std::vector<std::unique_ptr<child>> peers;
  for (int i = 0; i < 4; ++i)
    peers.push_back(std::make_unique<child>(self_exe(), std::vector<std::string>{"--child", "cycle", d.lock(), "100"}));
  for (auto& p : peers) {
    CHECK(p->read_line(60s) == std::string("done"));
    CHECK(p->wait() == 0);
  }
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("inspect and wait_free", "[multiprocess]") {
  temp_dir d;
  ol::info free = ol::inspect(d.lock());
  CHECK_FALSE(free.present);
  CHECK_FALSE(free.held);
  CHECK_FALSE(free.stale);

  ol::lock_options o;
  o.path = d.lock();
  o.label = "render-video";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  ol::info i = ol::inspect(d.lock());
  CHECK(i.held);
  CHECK(i.go_held);
  CHECK_FALSE(i.node_stale);
  CHECK(i.pid == ::getpid());
  CHECK(i.label == "render-video");
  CHECK(i.token == l->token());
  CHECK(i.started_at);
  CHECK(i.held_for >= 0ms);
  CHECK(i.held_for < 60s);

  CHECK(ol::wait_free(d.lock(), 200ms).held);
  std::thread releaser([&] { std::this_thread::sleep_for(200ms), (void)l->release(); });
  auto start = std::chrono::steady_clock::now();
  ol::info after = ol::wait_free(d.lock(), 30s);
  releaser.join();
  CHECK_FALSE(after.held);
  CHECK(std::chrono::steady_clock::now() - start < 20s);

  make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
  ol::info stale = ol::inspect(d.lock());
  CHECK(stale.present);
  CHECK_FALSE(stale.held);
  CHECK_THAT(stale.stale.value_or(""), Catch::Contains("dead"));
  CHECK_FALSE(ol::wait_free(d.lock(), 0ms).held);
}

TEST_CASE("a path that is not a directory is refused, never deleted", "[multiprocess]") {
  temp_dir d;
  write_file(d.lock(), "precious");
  auto r = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE_FALSE(r);
  CHECK(r.error().is_system());
  CHECK_THAT(r.error().message(), Catch::Contains("not a directory"));
  CHECK(read_file(d.lock()) == "precious");
  auto missing = ol::lock::acquire((d.path / "no" / "such" / "x.lock").string(), 0ms);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code() == std::errc::no_such_file_or_directory);
}

// The 0.1 names, kept for one release as deprecated aliases, still do what
// the new ones do.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_CASE("the names of 0.1 still work", "[multiprocess]") {
  temp_dir d;
  make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
  ol::info i = ol::inspect(d.lock());
  REQUIRE(i.stale_reason);
  CHECK(i.stale == i.stale_reason);
  auto held = ol::lock::acquire(d.lock(), ol::milliseconds(0));  // reclaims the stale lock
  REQUIRE(held);
  ol::lock_options no_gpus;
  no_gpus.path = d.lock();
  no_gpus.gpus = 0;
  auto bad = ol::lock::acquire(no_gpus);
  REQUIRE_FALSE(bad);
  CHECK(bad.err() == ol::errc::bad_input);
  CHECK(&bad.err() == &bad.error());
  ol::release_request by_token;
  by_token.token = held->token();
  auto r = ol::release_lock(d.lock(), by_token);
  REQUIRE(r);
  CHECK(r->status == ol::release_status::released);
  CHECK(held->release() == ol::errc::lost);
}
#pragma GCC diagnostic pop

TEST_CASE("a child forked after a release keeps every descriptor it was given", "[multiprocess][fork]") {
  // The released lock's descriptors are closed, and the next ones made (a
  // pipe, here) get their numbers: the fork guard must not null them in
  // the child as if they were still the lock's proof of life.
  temp_dir d;
  for (int round = 0; round < 5; ++round) {
    {
      auto l = offload_lock::lock::acquire(d.lock(), offload_lock::milliseconds(0));
      REQUIRE(l);
    }
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    const pid_t kid = ::fork();
    if (kid == 0) {
      const char c = 'x';
      _exit(::write(p[1], &c, 1) == 1 ? 0 : 1);
    }
    ::close(p[1]);
    char got = 0;
    CHECK(::read(p[0], &got, 1) == 1);
    CHECK(got == 'x');
    ::close(p[0]);
    int st = -1;
    ::waitpid(kid, &st, 0);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  }
}

#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, which runs none of the library's fork
// handlers: the child could find a mutex locked by a thread it does not
// have.)
namespace {
int inotify_descriptors() {
  int n = 0;
  for (fs::directory_iterator it("/proc/self/fd"), end; it != end; ++it) {
    boost::system::error_code ec;
    if (fs::read_symlink(it->path(), ec).string() == "anon_inode:inotify") ++n;
  }
  return n;
}
}  // namespace

TEST_CASE("a watcher made before a fork and dropped in the child leaves its inotify instance to the parent",
          "[multiprocess][fork]") {
  // A waiter's watches are let go of after it holds (held_state's
  // waited_with, dropped by the heartbeat thread), so a child forked in
  // between drops a copy of a watcher whose inotify instance is one open
  // file with the parent's. The child closes its descriptor and nothing
  // more: it removes no watch (the parent's too), reads no event, and keeps
  // no instance for waits of its own, where each would read the other's.
  temp_dir d;
  auto w = std::make_unique<olsys::watcher>();
  REQUIRE(w->watch_entries(d.path.string()) >= 0);
  int p[2];
  REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  const pid_t kid = ::fork();
  if (kid == 0) {
    const int before = inotify_descriptors();
    w.reset();
    const int after = inotify_descriptors();
    const char c = after == before - 1 ? 'c' : after == before ? 'k' : 'x';
    _exit(::write(p[1], &c, 1) == 1 ? 0 : 1);
  }
  ::close(p[1]);
  char got = 0;
  CHECK(::read(p[0], &got, 1) == 1);
  ::close(p[0]);
  int st = -1;
  ::waitpid(kid, &st, 0);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(got == 'c');  // 'k': the child kept the instance (for its pool)
  // The parent's watch is still there: a file made in the directory wakes it.
  write_file(d.path / "made", "");
  std::vector<int> fired;
  CHECK(w->wait(5000, {}, &fired) == olsys::watcher::wake::event);
}
#endif
