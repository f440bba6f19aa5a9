// A crash at every step of acquire, reclaim, heartbeat and release: a real
// process stopped with SIGKILL at that step (OFFLOAD_LOCK_TEST_CRASH_AT, see
// sys::crash_point), then two fresh participants contend. One of them must
// get the lock within its wait (by the dead-pid rule or the grace), the
// other must not get it while the first holds it, and no staging or
// moved-aside directory the crash left may survive the first acquisition
// after it.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <set>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

enum class before { nothing, stale_lock, leftover };
enum class then { nothing, release, close_stdin };

struct crash_row {
  std::string step;
  before setup;
  then action;
  bool renameat2;  // the point is reached with RENAME_NOREPLACE
  bool fallback;   // ... and with the mkdir fallback (OFFLOAD_LOCK_NO_RENAMEAT2=1)
  bool cli;        // the crashing process is `offload-lock hold` / `run`, not the library child
  std::vector<std::string> cli_args = {};
  long ttl_ms = 3'600'000;
};

std::vector<crash_row> rows() {
  return {
      {"acquire.stage-made", before::nothing, then::nothing, true, true, false},
      {"acquire.stage-locked", before::nothing, then::nothing, true, true, false},
      {"acquire.meta-written", before::nothing, then::nothing, true, true, false},
      {"acquire.renamed", before::nothing, then::nothing, true, false, false},
      {"acquire.mkdir-made", before::nothing, then::nothing, false, true, false},
      {"acquire.mkdir-locked", before::nothing, then::nothing, false, true, false},
      {"acquire.mkdir-meta-staged", before::nothing, then::nothing, false, true, false},
      {"acquire.mkdir-meta-renamed", before::nothing, then::nothing, false, true, false},
      {"cleanup.leftover", before::leftover, then::nothing, true, true, false},
      {"reclaim.flocked", before::stale_lock, then::nothing, true, true, false},
      {"reclaim.moved-aside", before::stale_lock, then::nothing, true, true, false},
      {"reclaim.meta-removed", before::stale_lock, then::nothing, true, true, false},
      // TTL 400 ms: the heartbeat runs every 100 ms.
      {"heartbeat.touch", before::nothing, then::nothing, true, true, false, {}, 400},
      {"heartbeat.touched", before::nothing, then::nothing, true, true, false, {}, 400},
      {"release.checked", before::nothing, then::release, true, true, false},
      {"release.moved-aside", before::nothing, then::release, true, true, false},
      {"release.meta-removed", before::nothing, then::release, true, true, false},
      // The command: `run` records CMD (held back until the lock is taken,
      // and let go when offload-lock dies); `hold` records itself.
      {"acquire.meta-written", before::nothing, then::nothing, true, true, true, {"run", "--", "sleep", "60"}},
      {"acquire.renamed", before::nothing, then::nothing, true, false, true, {"run", "--", "sleep", "60"}},
      {"acquire.mkdir-meta-renamed", before::nothing, then::nothing, false, true, true, {"run", "--", "sleep", "60"}},
      {"release.moved-aside", before::nothing, then::nothing, true, true, true, {"run", "--", "true"}},
      {"reclaim.moved-aside", before::stale_lock, then::nothing, true, true, true, {"hold"}},
      {"heartbeat.touch", before::nothing, then::nothing, true, true, true, {"--ttl", "400ms", "hold"}},
      {"release.meta-removed", before::nothing, then::close_stdin, true, true, true, {"hold"}},
  };
}

// Our own staging and moved-aside names beside the lock.
std::set<std::string> leftovers(const temp_dir& d) {
  std::set<std::string> out;
  for (fs::directory_iterator it(d.path), end; it != end; ++it) {
    std::string n = it->path().filename().string();
    if (n.rfind(".gpu.lock.stage-", 0) == 0 || n.rfind(".gpu.lock.aside-", 0) == 0) out.insert(n);
  }
  return out;
}

std::unique_ptr<child> contender(const temp_dir& d, const env_changes& env) {
  return std::make_unique<child>(self_exe(), std::vector<std::string>{"--child", "hold", d.lock(), "60000"}, env);
}

bool acquired_line(const std::optional<std::string>& l, int pid) {
  return l && l->rfind("acquired " + std::to_string(pid), 0) == 0;
}

}  // namespace

TEST_CASE("a crash at every step of acquire, reclaim, heartbeat and release is recovered from", "[multiprocess][crash]") {
  for (const auto& r : rows()) {
    for (bool fallback : {false, true}) {
      if (fallback ? !r.fallback : !r.renameat2) continue;
      std::string name = std::string(r.cli ? "cli " + r.cli_args.back() + " " : "library ") + r.step +
                         (fallback ? " (mkdir fallback)" : " (renameat2)");
      DYNAMIC_SECTION(name) {
        temp_dir d;
        env_changes env = {{"OFFLOAD_LOCK_NO_RENAMEAT2", fallback ? std::optional<std::string>("1") : std::nullopt},
                           {"OFFLOAD_LOCK_TEST_CRASH_AT", std::nullopt},
                           {"OFFLOAD_LOCK_PATH", std::nullopt},
                           {"OFFLOAD_LOCK_TOKEN", std::nullopt}};
        if (r.setup == before::stale_lock)
          make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
        if (r.setup == before::leftover) {
          fs::path stage = d.path / (".gpu.lock.stage-" + std::to_string(dead_pid()) + "-0badc0ffee00");
          fs::create_directory(stage);
          write_file(stage / "meta.json", "{\"pid\":1,\"startedAt\":1}");
        }

        // The process that crashes.
        env_changes crash_env = env;
        crash_env["OFFLOAD_LOCK_TEST_CRASH_AT"] = r.step;
        std::unique_ptr<child> victim;
        if (r.cli) {
          std::vector<std::string> args = {"--lock", d.lock(), "--quiet"};
          args.insert(args.end(), r.cli_args.begin(), r.cli_args.end());
          victim = std::make_unique<child>(cli_exe(), args, crash_env);
        } else {
          victim = std::make_unique<child>(
              self_exe(), std::vector<std::string>{"--child", "hold", d.lock(), "-1", std::to_string(r.ttl_ms)},
              crash_env);
        }
        if (r.action == then::release) {
          auto line = victim->read_line(30s);
          REQUIRE(acquired_line(line, victim->pid()));
          victim->write_line("release");
        }
        if (r.action == then::close_stdin) {
          auto line = victim->read_line(30s);
          REQUIRE(line);
          REQUIRE(line->rfind("acquired ", 0) == 0);
          victim->close_stdin();
        }
        INFO("victim stderr: " << victim->err_text());
        REQUIRE(victim->wait(30s) == 128 + SIGKILL);
        // `run`'s CMD, held back at its gate, ends when offload-lock dies.
        const std::set<std::string> left_by_crash = leftovers(d);
        // A claim that died between its mkdir and its meta.json is reclaimed
        // by those who first saw it inside the grace; one first seen older
        // was made by hand and is refused (doc/protocol.md). The contenders
        // stand for waiters that were there when the crash happened, but on
        // a loaded machine their first look can come later than the grace
        // after it: the directory's age counts from their start.
        if (fs::is_directory(d.lock()) && !fs::exists(fs::path(d.lock()) / "meta.json"))
          fs::last_write_time(d.lock(), std::time(nullptr));

        // Two fresh participants: one gets the lock, the other waits for it.
        auto a = contender(d, env), b = contender(d, env);
        child* winner = nullptr;
        child* loser = nullptr;
        auto deadline = std::chrono::steady_clock::now() + 30s;
        while (!winner && std::chrono::steady_clock::now() < deadline) {
          for (auto* c : {a.get(), b.get()}) {
            if (auto line = c->read_line(20ms)) {
              INFO("contender said: " << *line << "; stderr: " << c->err_text());
              REQUIRE(acquired_line(line, c->pid()));
              winner = c;
              loser = c == a.get() ? b.get() : a.get();
              break;
            }
          }
        }
        REQUIRE(winner);
        CHECK(ol::inspect(d.lock()).pid == winner->pid());
        // Nothing the crash left survives that first acquisition.
        for (const auto& n : leftovers(d)) CHECK(left_by_crash.count(n) == 0);
        // Never two holders: the other one waits until the first releases.
        CHECK_FALSE(loser->read_line(300ms));
        winner->write_line("release");
        CHECK(winner->read_line() == std::string("released"));
        CHECK(acquired_line(loser->read_line(30s), loser->pid()));
        loser->write_line("release");
        CHECK(loser->read_line() == std::string("released"));
        // The lock and every name of ours beside it are gone.
        CHECK(leftovers(d).empty());
        CHECK_FALSE(fs::exists(d.lock()));
      }
    }
  }
}

TEST_CASE("the crash seam is inert without its variable, and counts with STEP@N", "[multiprocess][crash]") {
  temp_dir d;
  // Three leftovers of dead processes: an acquisition cleans them up one by one.
  const int dead = dead_pid();
  for (const char* suffix : {"-aaaaaaaaaaaa", "-bbbbbbbbbbbb", "-cccccccccccc"}) {
    fs::path stage = d.path / (".gpu.lock.stage-" + std::to_string(dead) + suffix);
    fs::create_directory(stage);
    write_file(stage / "meta.json", "{}");
  }
  // Killed at the second of the three: the first is gone, two are left.
  child second(self_exe(), {"--child", "cycle", d.lock(), "1"},
               {{"OFFLOAD_LOCK_TEST_CRASH_AT", std::string("cleanup.leftover@2")}});
  CHECK(second.wait(30s) == 128 + SIGKILL);
  CHECK(leftovers(d).size() == 2);
  // Without the variable: an ordinary acquisition, which cleans up the rest.
  child plain(self_exe(), {"--child", "cycle", d.lock(), "3"}, {{"OFFLOAD_LOCK_TEST_CRASH_AT", std::nullopt}});
  CHECK(plain.read_line(30s) == std::string("done"));
  CHECK(plain.wait() == 0);
  CHECK(leftovers(d).empty());
}
