// The lock's history, written by real processes: what each event records
// and who records it, where it is kept and only there, rotation, and what
// a reader trusts (another user's lines are theirs only, junk is skipped
// and counted, a flood stays bounded). Another user is uid 65534 (nobody),
// reached with setpriv as root.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>
#include <set>

#include "history.hpp"
#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

fs::path history_of(const temp_dir& d) { return d.path / ".gpu.lock.history"; }

std::vector<ol::history_entry> entries(const temp_dir& d, ol::history_read* read = nullptr) {
  std::vector<ol::history_entry> out;
  auto r = ol::read_history(d.lock(), 0, [&](const ol::history_entry& e) { out.push_back(e); });
  if (read) *read = r;
  return out;
}

std::vector<ol::history_entry> of_kind(const std::vector<ol::history_entry>& all, const std::string& event,
                                       const std::string& outcome) {
  std::vector<ol::history_entry> out;
  for (const auto& e : all)
    if (e.event == event && (outcome.empty() || e.outcome == outcome)) out.push_back(e);
  return out;
}

// Waits (bounded) until the history holds an entry of that kind: some are
// written by another process just after the event a test waits for.
std::vector<ol::history_entry> wait_for(const temp_dir& d, const std::string& event, const std::string& outcome,
                                        std::size_t n = 1) {
  std::vector<ol::history_entry> found;
  eventually([&] {
    found = of_kind(entries(d), event, outcome);
    return found.size() >= n;
  });
  return found;
}

std::string my_file(const temp_dir& d) { return (history_of(d) / (std::to_string(::geteuid()) + ".jsonl")).string(); }

std::unique_ptr<child> as_nobody(const std::vector<std::string>& cmd) {
  std::vector<std::string> full = {"--reuid=65534", "--regid=65534", "--clear-groups"};
  full.insert(full.end(), cmd.begin(), cmd.end());
  return std::make_unique<child>("/usr/bin/setpriv", full);
}

}  // namespace

TEST_CASE("nothing is recorded where no history is kept", "[multiprocess][history]") {
  temp_dir d;
  CHECK(run_cli(with_lock(d, {"run", "--", "true"})).code == 0);
  {
    auto l = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(l);
  }
  CHECK(fs::directory_iterator(d.path) == fs::directory_iterator());
  ol::history_read r;
  CHECK(entries(d, &r).empty());
  CHECK_FALSE(r.kept);
  auto h = run_cli(with_lock(d, {"history"}));
  CHECK(h.code == 0);
  CHECK_THAT(h.out, Catch::Contains("no history is kept") && Catch::Contains("history --start"));
}

TEST_CASE("history --start makes the directory as open as the lock's parent, sticky where others write",
          "[multiprocess][history]") {
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);
  auto r = run_cli(with_lock(d, {"history", "--start"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains(history_of(d).string()));
  struct stat st {};
  REQUIRE(::stat(history_of(d).c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 01777);
  CHECK(run_cli(with_lock(d, {"history", "--start"})).code == 0);  // already kept

  temp_dir p;
  ::chmod(p.str().c_str(), 0755);
  REQUIRE_FALSE(ol::start_history(p.lock()));
  REQUIRE(::stat((p.path / ".gpu.lock.history").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);

  // Something else at the name: an error, and it is left alone.
  temp_dir f;
  write_file(f.path / ".gpu.lock.history", "mine");
  auto e = run_cli(with_lock(f, {"history", "--start"}));
  CHECK(e.code == 4);
  CHECK(read_file(f.path / ".gpu.lock.history") == "mine");
}

TEST_CASE("an acquisition and its release are recorded with the wait, the hold and who", "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  ol::lock_options o;
  o.path = d.lock();
  o.label = "unit job";
  o.priority = 5;
  o.expected = 90s;
  std::string token;
  {
    auto l = ol::lock::acquire(o);
    REQUIRE(l);
    token = l->token();
    // Nested and repeated acquisitions on this thread record nothing more.
    auto nested = ol::lock::acquire(o);
    REQUIRE(nested);
    CHECK(nested->nested());
    REQUIRE_FALSE(l->release());
  }
  const auto all = entries(d);
  REQUIRE(all.size() == 2);
  const auto& a = all[0];
  CHECK(a.event == "acquire");
  CHECK(a.outcome == "acquired");
  CHECK(a.uid == ::geteuid());
  CHECK(a.pid == ::getpid());
  CHECK(a.label == "unit job");
  CHECK(a.priority == 5);
  CHECK(a.expect_ms == 90000);
  CHECK(a.gpu == 0);
  CHECK(a.token == token);
  CHECK(a.waited_ms >= 0);
  CHECK(a.since > 0);
  const auto& h = all[1];
  CHECK(h.event == "hold");
  CHECK(h.outcome == "released");
  CHECK(h.token == token);
  CHECK(h.label == "unit job");
  CHECK(h.priority == 5);
  CHECK(h.held_ms >= 0);
  CHECK(h.at >= a.at);
  // The author's own file, readable by everyone who reads the history.
  struct stat st {};
  REQUIRE(::stat(my_file(d).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  CHECK(st.st_uid == ::geteuid());

  SECTION("a single try that finds the lock busy records nothing") {
    auto l = ol::lock::acquire(o);
    REQUIRE(l);
    CHECK(run_cli(with_lock(d, {"acquire", "--wait", "0"})).code == 1);
    REQUIRE_FALSE(l->release());
    CHECK(of_kind(entries(d), "acquire", "").size() == 2);
  }
}

TEST_CASE("run records CMD as the holder; a wait that times out or is cancelled is recorded",
          "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  auto r = run_cli(with_lock(d, {"run", "--label", "render", "--", "sh", "-c", "echo $$"}));
  REQUIRE(r.code == 0);
  const long cmd_pid = std::stol(r.out);
  auto acq = of_kind(entries(d), "acquire", "acquired");
  auto rel = of_kind(entries(d), "hold", "released");
  REQUIRE(acq.size() == 1);
  REQUIRE(rel.size() == 1);
  CHECK(acq[0].pid == cmd_pid);
  CHECK(acq[0].label == "render");
  CHECK(rel[0].pid == cmd_pid);
  CHECK(rel[0].token == acq[0].token);

  auto holder = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(holder);
  // Timed out after --wait.
  auto t = run_cli(with_lock(d, {"acquire", "--label", "impatient", "--wait", "300ms"}));
  CHECK(t.code == 1);
  auto timed = of_kind(entries(d), "acquire", "timed-out");
  REQUIRE(timed.size() == 1);
  CHECK(timed[0].label == "impatient");
  CHECK(timed[0].waited_ms >= 300);
  // Cancelled: hold's requester went away (its stdin closed) while it waited.
  child h(cli_exe(), with_lock(d, {"hold", "--label", "abandoned"}));
  REQUIRE(eventually([&] { return !ol::waiters(d.lock()).empty(); }));
  h.close_stdin();
  CHECK(h.wait() == 1);
  auto cancelled = of_kind(entries(d), "acquire", "cancelled");
  REQUIRE(cancelled.size() == 1);
  CHECK(cancelled[0].label == "abandoned");
  CHECK(cancelled[0].pid == h.pid());
}

TEST_CASE("the takeover of a dead holder's lock is recorded by the process that took it over",
          "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  child c(self_exe(), {"--child", "hold", d.lock(), "0"});
  auto line = c.read_line();
  REQUIRE(line);
  REQUIRE(line->rfind("acquired ", 0) == 0);
  const std::string token = line->substr(line->rfind(' ') + 1);
  c.kill(SIGKILL);
  REQUIRE(c.wait() == 128 + SIGKILL);
  {
    auto l = ol::lock::acquire(d.lock(), 10s);
    REQUIRE(l);
  }
  auto crashed = of_kind(entries(d), "hold", "crashed");
  REQUIRE(crashed.size() == 1);
  CHECK(crashed[0].pid == c.pid());
  CHECK(crashed[0].token == token);
  CHECK(crashed[0].label == "test-child");
  CHECK(crashed[0].other_pid == ::getpid());
  CHECK(crashed[0].holder_uid == ::geteuid());
  CHECK_FALSE(crashed[0].reason.empty());
  CHECK(crashed[0].held_ms >= 0);
  // The dead holder recorded its own acquisition; no end of its own.
  auto acquired = of_kind(entries(d), "acquire", "acquired");
  REQUIRE(acquired.size() == 2);
  CHECK(acquired[0].pid == c.pid());
  CHECK(of_kind(entries(d), "hold", "released").size() == 1);  // this process's own
}

TEST_CASE("a release from another process and a lost lock are recorded", "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  child sleeper("/bin/sleep", {"60"});
  auto a = run_cli(with_lock(d, {"acquire", "--pid", std::to_string(sleeper.pid()), "--label", "kept"}));
  REQUIRE(a.code == 0);
  const std::string token = a.out.substr(0, a.out.find('\n'));
  REQUIRE(run_cli(with_lock(d, {"release", "--token", token})).code == 0);
  auto by = wait_for(d, "hold", "released");
  REQUIRE(by.size() == 1);
  CHECK(by[0].by == "token");
  CHECK(by[0].token == token);
  CHECK(by[0].label == "kept");
  CHECK(by[0].pid == sleeper.pid());

  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  const std::string mine = l->token();
  // Someone else takes it away: moved aside, then gone.
  fs::rename(d.lock(), d.path / "elsewhere");
  CHECK(l->release() == ol::errc::lost);
  auto lost = of_kind(entries(d), "hold", "lost");
  REQUIRE(lost.size() == 1);
  CHECK(lost[0].token == mine);
}

TEST_CASE("every GPU slot records into slot 0's history, naming the slot", "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  auto zero = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(zero);
  auto r = run_cli(with_lock(d, {"run", "--gpus", "2", "--wait", "0", "--", "true"}));
  REQUIRE(r.code == 0);
  auto acq = of_kind(entries(d), "acquire", "acquired");
  REQUIRE(acq.size() == 2);
  CHECK(acq[1].gpu == 1);
  auto rel = of_kind(entries(d), "hold", "released");
  REQUIRE(rel.size() == 1);
  CHECK(rel[0].gpu == 1);
  CHECK_FALSE(fs::exists(d.path / ".gpu.lock.gpu1.history"));
}

TEST_CASE("a holder asked to make way, and a waiter passed over, are recorded", "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  const fs::path mark = d.path / "yielded";
  child holder(cli_exe(), with_lock(d, {"run", "--label", "batch", "--yield-signal", "USR1", "--", "sh", "-c",
                                        "trap 'touch " + mark.string() + "; exit 0' USR1; echo started; "
                                        "while :; do sleep 0.05; done"}));
  REQUIRE(holder.read_line() == std::string("started"));
  auto urgent = run_cli(with_lock(d, {"run", "--label", "urgent", "--priority", "10", "--wait", "30s", "--", "true"}));
  CHECK(urgent.code == 0);
  CHECK(fs::exists(mark));
  CHECK(holder.wait() == 0);
  auto asked = wait_for(d, "yield-asked", "");
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].label == "batch");
  CHECK(asked[0].other_label == "urgent");
  CHECK(asked[0].other_priority == 10);
  auto rel = wait_for(d, "hold", "released", 2);
  REQUIRE(rel.size() == 2);
  for (const auto& e : rel) CHECK(e.yield_asked == (e.label == "batch"));

  SECTION("passed over: the head of the queue is stopped when the lock frees") {
    auto l = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(l);
    child stuck(cli_exe(), with_lock(d, {"run", "--label", "stuck", "--", "true"}));
    REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == 1; }));
    child next(cli_exe(), with_lock(d, {"run", "--label", "next", "--", "true"}));
    REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == 2; }));
    REQUIRE(stop_process(stuck.pid()));
    REQUIRE_FALSE(l->release());
    CHECK(next.wait(20s) == 0);
    auto passed = wait_for(d, "passed-over", "");
    REQUIRE(passed.size() == 1);
    CHECK(passed[0].label == "next");
    CHECK(passed[0].other_pid == stuck.pid());
    stuck.kill(SIGCONT);
    CHECK(stuck.wait(20s) == 0);
  }
}

TEST_CASE("a release that hands the lock to a staged waiter is recorded as the end of the hold",
          "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  ol::lock_options o;
  o.path = d.lock();
  o.label = "first";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  const std::string token = l->token();
  child next(cli_exe(), with_lock(d, {"run", "--label", "next", "--wait", "60s", "--", "true"}));
  // Released only once the waiter has staged its lock, so that the release
  // is a handoff (the swap), not a removal.
  REQUIRE(eventually([&] {
    for (auto it = fs::directory_iterator(d.path); it != fs::directory_iterator(); ++it)
      if (it->path().filename().string().find(".next-") != std::string::npos) return true;
    return false;
  }));
  REQUIRE_FALSE(l->release());
  CHECK(next.wait(20s) == 0);
  auto rel = wait_for(d, "hold", "released", 2);
  REQUIRE(rel.size() == 2);
  std::set<std::string> labels;
  for (const auto& e : rel) labels.insert(e.label);
  CHECK(labels == std::set<std::string>{"first", "next"});
  CHECK(std::any_of(rel.begin(), rel.end(), [&](const ol::history_entry& e) { return e.token == token; }));
}

TEST_CASE("the history never fails or blocks an acquisition", "[multiprocess][history]") {
  SECTION("a file where the history would be") {
    temp_dir d;
    write_file(history_of(d), "not a directory");
    CHECK(run_cli(with_lock(d, {"run", "--", "true"})).code == 0);
    CHECK(read_file(history_of(d)) == "not a directory");
  }
  SECTION("a symlink where the history would be is not followed") {
    temp_dir d, target;
    fs::create_symlink(target.path, history_of(d));
    CHECK(run_cli(with_lock(d, {"run", "--", "true"})).code == 0);
    CHECK(fs::directory_iterator(target.path) == fs::directory_iterator());
  }
  SECTION("a file of ours that someone else made") {
    temp_dir d;
    ::chmod(d.str().c_str(), 01777);
    REQUIRE_FALSE(ol::start_history(d.lock()));
    write_file(my_file(d), "");
    ::chmod(my_file(d).c_str(), 0666);
    if (running_as_root()) REQUIRE(::chown(my_file(d).c_str(), 65534, 65534) == 0);
    else ::unlink(my_file(d).c_str());
    CHECK(run_cli(with_lock(d, {"run", "--", "true"})).code == 0);
    if (running_as_root()) CHECK(read_file(my_file(d)).empty());  // not ours: nothing written in it
  }
}

TEST_CASE("one author's file rotates and stays bounded", "[multiprocess][history]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  ol::history_entry e;
  e.event = "acquire";
  e.outcome = "acquired";
  e.label = std::string(1000, 'x');
  // About 1.1 KB a line: three rotations' worth.
  const std::size_t n = static_cast<std::size_t>(ol::history_rotate_bytes) / 1000 * 3;
  for (std::size_t k = 0; k < n; ++k) offload_lock::detail::history::record(d.lock(), e);
  const fs::path cur = my_file(d), old = cur.string() + ".1";
  REQUIRE(fs::exists(old));
  CHECK(fs::file_size(cur) <= static_cast<std::uintmax_t>(ol::history_rotate_bytes));
  CHECK(fs::file_size(old) <= static_cast<std::uintmax_t>(ol::history_rotate_bytes));
  ol::history_read r;
  const auto all = entries(d, &r);
  CHECK(r.malformed == 0);
  CHECK(r.files == 2);
  CHECK(all.size() > n / 3);
  CHECK(all.size() < n);
}

TEST_CASE("another user's history is theirs only; junk is skipped and counted", "[multiprocess][history]") {
  if (!running_as_root()) {
    WARN("needs root to act as another user; not run");
    return;
  }
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);
  REQUIRE_FALSE(ol::start_history(d.lock()));
  const std::string me = std::to_string(::geteuid());
  const std::string dir = history_of(d).string();
  // nobody writes, in its own file: one entry of its own, one claiming to
  // be ours, junk; and a file named for our uid.
  const std::string own = R"({"v":1,"at":5,"event":"acquire","outcome":"acquired","uid":65534,"pid":9,"label":"nobody's"})";
  const std::string forged = R"({"v":1,"at":6,"event":"acquire","outcome":"acquired","uid":)" + me + R"(,"pid":9,"label":"forged"})";
  write_file(d.path / "lines", own + "\n" + forged + "\njunk\n{\"v\":1}\n");
  write_file(d.path / "forged", forged + "\n");
  auto w = as_nobody({"/bin/sh", "-c", "cat " + (d.path / "lines").string() + " >> " + dir + "/65534.jsonl && cat " +
                                           (d.path / "forged").string() + " > " + dir + "/" + me + ".jsonl.1"});
  REQUIRE(w->wait() == 0);
  REQUIRE(fs::exists(dir + "/" + me + ".jsonl.1"));
  ol::history_read r;
  const auto all = entries(d, &r);
  REQUIRE(all.size() == 1);
  CHECK(all[0].uid == 65534u);
  CHECK(all[0].label == "nobody's");
  CHECK(r.untrusted == 1);
  CHECK(r.malformed == 2);
  CHECK(r.foreign_files == 1);  // ours by name, nobody's by owner
  // The command says so, and never shows a skipped line.
  auto h = run_cli(with_lock(d, {"history"}));
  CHECK(h.code == 0);
  CHECK_THAT(h.out, Catch::Contains("nobody's") && !Catch::Contains("forged") && !Catch::Contains("junk") &&
                        Catch::Contains("2 lines that are not entries") &&
                        Catch::Contains("1 line claiming another user than its file's owner"));

  SECTION("a flood of junk lines is read only up to its cap") {
    auto flood = as_nobody({"/bin/sh", "-c",
                            "head -c 40000000 /dev/zero | tr '\\0' 'x' | fold -w 100 >> " + dir + "/65534.jsonl"});
    REQUIRE(flood->wait(60s) == 0);
    const auto began = std::chrono::steady_clock::now();
    ol::history_read fr;
    entries(d, &fr);
    // Bounded by the cap, whatever the file's size (generous: a loaded machine).
    CHECK(std::chrono::steady_clock::now() - began < 20s);
    CHECK(fr.unread_bytes > 0);
    CHECK(fr.malformed > 100000);
    CHECK(fr.malformed < 400000);
  }
}
