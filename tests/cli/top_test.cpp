// `offload-lock top` in a real terminal: tmux runs it in a shell, the test
// reads the screen with capture-pane and types with send-keys. It redraws
// on a new holder, a new waiter and a new history entry without polling,
// its keys act on the user's own processes only, and every way it ends
// gives the terminal back as it was (the shell's stty settings, the main
// screen, the cursor). Every wait is for the screen to show something,
// with a generous bound.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "multiprocess/lease_support.hpp"
#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

// Runs a command to its end; its standard output.
std::string output_of(const std::string& exe, const std::vector<std::string>& args) {
  child c(exe, args);
  c.close_stdin();
  std::string out;
  while (auto l = c.read_line()) out += *l + "\n";
  c.wait();
  return out;
}

// One tmux server of the test's own (its own socket), one window, a shell.
class terminal {
 public:
  terminal(int cols, int rows) {
    static std::atomic<int> n{0};
    socket_ = "offload-lock-top-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
    tmux({"-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", std::to_string(cols), "-y", std::to_string(rows),
          "env PS1='$ ' bash --norc --noprofile"});
  }
  ~terminal() { tmux({"kill-server"}); }
  terminal(const terminal&) = delete;
  terminal& operator=(const terminal&) = delete;

  std::string tmux(std::vector<std::string> args) {
    args.insert(args.begin(), {"-L", socket_});
    return output_of("/usr/bin/tmux", args);
  }
  void type(const std::string& line) {
    tmux({"send-keys", "-t", "t", "-l", line});
    tmux({"send-keys", "-t", "t", "Enter"});
  }
  void key(const std::string& k) { tmux({"send-keys", "-t", "t", k}); }
  std::string screen() { return tmux({"capture-pane", "-p", "-t", "t"}); }
  std::string screen_with_attributes() { return tmux({"capture-pane", "-p", "-e", "-t", "t"}); }
  std::string format(const std::string& f) {
    std::string s = tmux({"display-message", "-p", "-t", "t", f});
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  bool shows(const std::string& text, ms timeout = kPrompt) {
    return eventually([&] { return screen().find(text) != std::string::npos; }, timeout);
  }
  // The pid of the command the shell runs now (top).
  int foreground() {
    const std::string shell = format("#{pane_pid}");
    std::ifstream f("/proc/" + shell + "/task/" + shell + "/children");
    int pid = 0;
    f >> pid;
    return pid;
  }

 private:
  std::string socket_;
};

// top in the terminal's shell, between two records of the shell's terminal
// settings, and its exit status after it.
void start_top(terminal& t, const temp_dir& d) {
  t.type("stty -g > " + d.str() + "/before; " + cli_exe() + " --lock " + d.lock() + " top; echo \"EXIT=$?\"; stty -g > " +
         d.str() + "/after");
  REQUIRE(t.shows("offload-lock top: " + d.lock()));
  REQUIRE(eventually([&] { return t.format("#{alternate_on}") == "1"; }));
}

// top ended with `code`, and the terminal is as it was.
void check_given_back(terminal& t, const temp_dir& d, int code) {
  REQUIRE(t.shows("EXIT=" + std::to_string(code)));
  REQUIRE(eventually([&] { return fs::exists(d.path / "after") && fs::file_size(d.path / "after") > 0; }));
  CHECK(read_file(d.path / "after") == read_file(d.path / "before"));
  CHECK(t.format("#{alternate_on}") == "0");
  CHECK(t.format("#{cursor_flag}") == "1");
}

long voluntary_switches(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
  return -1;
}

}  // namespace

TEST_CASE("top redraws on a new holder, waiter and history entry, and q gives the terminal back", "[cli][top]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  terminal t(120, 30);
  start_top(t, d);
  REQUIRE(t.shows("gpu0  free"));
  CHECK(t.screen().find("QUEUE: nobody waits") != std::string::npos);

  // Idle with nothing on screen that moves: nothing wakes it (no polling;
  // a few wakeups allowed for the terminal's own traffic).
  const int pid = t.foreground();
  REQUIRE(pid > 0);
  const long before = voluntary_switches(pid);
  ::usleep(1500 * 1000);
  CHECK(voluntary_switches(pid) - before <= 3);

  child holder(cli_exe(), with_lock(d, {"hold", "--label", "fresh-holder", "--expect", "20m"}));
  REQUIRE(holder.read_line());
  CHECK(t.shows("fresh-holder (pid " + std::to_string(holder.pid())));
  CHECK(t.shows("in ~19m"));
  CHECK(t.shows("acquired it after waiting"));
  child waiter(cli_exe(), with_lock(d, {"hold", "--label", "next-in-line", "--priority", "-10"}));
  CHECK(t.shows("next-in-line (pid " + std::to_string(waiter.pid())));
  CHECK(t.shows("#1"));
  holder.close_stdin();
  CHECK(holder.wait() == 0);
  // The waiter holds it now; the history has the first one's release.
  CHECK(t.shows("released it after"));
  CHECK(t.shows("QUEUE: nobody waits"));
  waiter.close_stdin();
  CHECK(waiter.wait() == 0);

  t.key("q");
  check_given_back(t, d, 0);
}

TEST_CASE("top shows a gpulease holder on the GPU it keeps while the lock is free, and sees it go", "[cli][top][lease]") {
  temp_dir d;
  const std::string root = d.str() + "/lease-root";
  fs::create_directories(root);
  terminal t(140, 30);
  t.type("export OFFLOAD_LOCK_LEASE_ROOT=" + root + "; unset GPU_LOCK");
  start_top(t, d);
  REQUIRE(t.shows("gpu0  free"));
  // The lease directory is made by this first lease: top sees it made.
  child g(standin_exe(), standin_hold(root, "0s", "text"));
  REQUIRE(!line_starting(g, "acquired").empty());
  CHECK(t.shows("gpu0  gpulease: text lease (pid " + std::to_string(g.pid())));
  g.close_stdin();
  CHECK(g.wait() == 0);
  CHECK(t.shows("gpu0  free"));
  t.key("q");
  check_given_back(t, d, 0);
}

TEST_CASE("Ctrl-C, SIGTERM and SIGHUP end top and give the terminal back; a resize redraws", "[cli][top]") {
  temp_dir d;
  terminal t(100, 24);
  SECTION("Ctrl-C") {
    start_top(t, d);
    t.key("C-c");
    check_given_back(t, d, 128 + SIGINT);
  }
  SECTION("SIGTERM") {
    start_top(t, d);
    ::kill(t.foreground(), SIGTERM);
    check_given_back(t, d, 128 + SIGTERM);
  }
  SECTION("SIGHUP") {
    start_top(t, d);
    ::kill(t.foreground(), SIGHUP);
    check_given_back(t, d, 128 + SIGHUP);
  }
  SECTION("a resize redraws at the new size") {
    start_top(t, d);
    REQUIRE(t.shows("y ask a holder of yours to make way"));
    t.tmux({"resize-window", "-t", "t", "-x", "50", "-y", "20"});
    // The key line no longer fits: it is cut at the new width.
    CHECK(t.shows("q quit   up/down select   w cancel a wait of yours\n"));
    CHECK(t.screen().find("y ask") == std::string::npos);
    CHECK(t.screen().find("gpu0  free") != std::string::npos);
    t.key("q");
    check_given_back(t, d, 0);
  }
}

TEST_CASE("top shows a hostile label as text; off a terminal it refuses", "[cli][top]") {
  temp_dir d;
  terminal t(160, 24);
  start_top(t, d);
  child holder(cli_exe(), with_lock(d, {"hold", "--label", "evil\x1b[2J\x1b]0;pwned\x07\xe2\x80\xae!"}));
  REQUIRE(holder.read_line());
  CHECK(t.shows("evil\\x1b[2J\\x1b]0;pwned\\x07\\u202e! (pid"));
  CHECK(t.format("#{pane_title}").find("pwned") == std::string::npos);
  t.key("q");
  check_given_back(t, d, 0);

  auto r = run_cli(with_lock(d, {"top"}));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("top needs a terminal"));
}

TEST_CASE("y asks a holder of one's own that offered to make way; w cancels a wait of one's own once confirmed",
          "[cli][top]") {
  temp_dir d;
  terminal t(160, 30);
  const fs::path mark = d.path / "asked";
  child holder(cli_exe(), with_lock(d, {"run", "--label", "batch-job", "--yield-signal", "USR1", "--", "sh", "-c",
                                        "trap 'touch " + mark.string() + "; exit 0' USR1; echo started; "
                                        "while :; do sleep 0.05; done"}));
  REQUIRE(holder.read_line() == std::string("started"));
  child first(cli_exe(), with_lock(d, {"hold", "--label", "first-waiting"}));
  start_top(t, d);
  REQUIRE(t.shows("first-waiting (pid " + std::to_string(first.pid())));

  // Each key says which row it needs.
  t.key("w");
  CHECK(t.shows("w cancels a wait: select a waiter first"));
  t.key("Down");
  t.key("y");
  CHECK(t.shows("y asks a holder to make way: select a holder first"));
  // The selected row is drawn in reverse video.
  CHECK(eventually([&] {
    const std::string s = t.screen_with_attributes();
    const auto at = s.find("first-waiting");
    return at != std::string::npos && s.rfind("\x1b[7m", at) != std::string::npos &&
           s.rfind("\x1b[7m", at) > s.rfind('\n', at);
  }));

  // y: the holder is asked the way it asked to be (its yield signal), and
  // makes way; the request passes the lock on to the queue.
  t.key("Up");
  t.key("y");
  // ("asking batch-job ..." on the message line, until it has made way.)
  CHECK(eventually([&] { return fs::exists(mark); }));
  CHECK(holder.wait() == 0);
  CHECK(t.shows("made way"));
  REQUIRE(first.read_line());  // it holds the lock now
  CHECK(t.shows("first-waiting (pid " + std::to_string(first.pid()) + ", host"));

  SECTION("a holder that did not offer to make way is not asked") {
    t.key("y");
    CHECK(t.shows("did not offer to make way"));
    CHECK(ol::waiters(d.lock()).empty());
  }
  SECTION("w asks first, then sends the waiter SIGTERM") {
    child second(cli_exe(), with_lock(d, {"hold", "--label", "second-waiting"}));
    REQUIRE(t.shows("second-waiting (pid " + std::to_string(second.pid())));
    t.key("Down");
    t.key("w");
    CHECK(t.shows("cancel the wait of second-waiting (pid " + std::to_string(second.pid()) + ")? w again"));
    t.key("x");  // any other key keeps it
    CHECK(t.shows("kept waiting"));
    CHECK_FALSE(second.wait(0ms));
    t.key("w");
    t.key("w");
    CHECK(t.shows("sent SIGTERM to second-waiting"));
    CHECK(second.wait() == 128 + SIGTERM);
  }
  first.close_stdin();
  CHECK(first.wait() == 0);
  t.key("q");
  check_given_back(t, d, 0);
}

TEST_CASE("y asks a holder to make way only when the site policy lets the user wait above it", "[cli][top][policy]") {
  temp_dir d;
  // The site caps everyone at priority 0: nobody can wait above a holder at 0.
  write_file(d.path / "gpu.lock.policy.json", R"({"maxPriority": 0})");
  fs::permissions(d.path / "gpu.lock.policy.json", fs::perms(0644));
  const fs::path mark = d.path / "asked";
  child holder(cli_exe(), with_lock(d, {"run", "--label", "capped-job", "--yield-signal", "USR1", "--", "sh", "-c",
                                        "trap 'touch " + mark.string() + "; exit 0' USR1; echo started; "
                                        "while :; do sleep 0.05; done"}));
  REQUIRE(holder.read_line() == std::string("started"));
  terminal t(200, 30);
  start_top(t, d);
  REQUIRE(t.shows("capped-job (pid "));
  t.key("y");
  CHECK(t.shows("holds at priority 0, and the site policy lets you wait at 0 at most"));
  CHECK(ol::waiters(d.lock()).empty());
  CHECK_FALSE(fs::exists(mark));
  t.key("q");
  check_given_back(t, d, 0);
  holder.kill(SIGTERM);
  holder.wait();
}

TEST_CASE("top's keys never touch another user's processes", "[cli][top]") {
  if (!running_as_root()) {
    WARN("needs root to act as another user; not run");
    return;
  }
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);
  auto as_nobody = [&](const std::vector<std::string>& args) {
    std::vector<std::string> full = {"--reuid=65534", "--regid=65534", "--clear-groups", cli_exe(), "--lock", d.lock()};
    full.insert(full.end(), args.begin(), args.end());
    return std::make_unique<child>("/usr/bin/setpriv", full);
  };
  auto holder = as_nobody({"run", "--label", "theirs-holding", "--yield-signal", "USR1", "--", "sleep", "60"});
  REQUIRE(eventually([&] { return ol::inspect(d.lock()).held; }));
  auto waiter = as_nobody({"hold", "--label", "theirs-waiting"});
  REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == 1; }));
  terminal t(160, 30);
  start_top(t, d);
  REQUIRE(t.shows("theirs-waiting"));
  t.key("y");
  CHECK(t.shows("is another user's: top asks only holders of your own to make way"));
  t.key("Down");
  t.key("w");
  CHECK(t.shows("is not a process of yours"));
  t.key("w");
  CHECK(t.shows("is not a process of yours"));
  CHECK_FALSE(waiter->wait(500ms));
  CHECK_FALSE(holder->wait(0ms));
  CHECK(ol::waiters(d.lock()).size() == 1);
  t.key("q");
  check_given_back(t, d, 0);
}
