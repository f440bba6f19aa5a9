// The offload-lock command, as other programs call it: every command and
// every exit code of the table in src/cli/args.hpp.
#include <signal.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

json only_json(const std::string& out) {
  REQUIRE(std::count(out.begin(), out.end(), '\n') == 1);
  return json::parse(out);
}

// The CMD of a waiting `run`: forked first and held back until the lock is
// free. Returned once run says that it waits.
int held_back_cmd(child& c) {
  const std::string children_file =
      "/proc/" + std::to_string(c.pid()) + "/task/" + std::to_string(c.pid()) + "/children";
  REQUIRE(eventually([&] { return !read_file(children_file).empty(); }));
  const int cmd = std::stoi(read_file(children_file));
  REQUIRE(eventually([&] { return c.err_text().find("waiting for") != std::string::npos; }));
  return cmd;
}

void one_line_error(const cli_result& r) {
  INFO(r.err);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.rfind("offload-lock: ", 0) == 0);
}

}  // namespace

TEST_CASE("cli: path and path --explain", "[cli]") {
  env_changes clear = {{"GPU_LOCK", std::nullopt}, {"TMPDIR", std::nullopt}, {"TMP", std::nullopt},
                       {"TEMP", std::nullopt}};
  auto r = run_cli({"path"}, clear);
  CHECK(r.code == 0);
  CHECK(r.out == "/tmp/local-offload-gpu.lock\n");

  env_changes tmp_only = clear;
  tmp_only["TMP"] = "/var/tmp";
  r = run_cli({"path", "--explain"}, tmp_only);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("/var/tmp/local-offload-gpu.lock\nrule: TMP\n"));
  CHECK_THAT(r.out, Catch::Contains("go: /tmp/local-offload-gpu.lock"));

  env_changes tmpdir = clear;
  tmpdir["TMPDIR"] = "/var/tmp/";
  r = run_cli({"path", "--explain"}, tmpdir);
  CHECK(r.out == "/var/tmp/local-offload-gpu.lock\nrule: TMPDIR\ngo: same path\n");

  env_changes gpu = clear;
  gpu["GPU_LOCK"] = "/srv/gpu.lock";
  CHECK(run_cli({"path"}, gpu).out == "/srv/gpu.lock\n");
  CHECK(run_cli({"--lock", "/o/x.lock", "path"}, gpu).out == "/o/x.lock\n");

  r = run_cli({"--json", "path"}, tmp_only);
  json j = only_json(r.out);
  CHECK(j["rule"] == "TMP");
  CHECK(j["goDisagrees"] == true);
  CHECK(j["goPath"] == "/tmp/local-offload-gpu.lock");
}

TEST_CASE("cli: status exit codes and --json keys", "[cli]") {
  temp_dir d;
  auto r = run_cli(with_lock(d, {"status"}));
  CHECK(r.code == 1);
  CHECK(r.out == "free\nlock: " + d.lock() + "\n");  // the path it looked at

  r = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(r.code == 1);
  json j = only_json(r.out);
  for (const char* k : {"path", "held", "pid", "startedAt", "heldForMs", "label", "host", "token", "stale"}) {
    INFO(k);
    CHECK(j.contains(k));
  }
  CHECK(j["held"] == false);
  CHECK(j["pid"].is_null());
  CHECK(j["stale"].is_null());

  ol::lock_options o;
  o.path = d.lock();
  o.label = "render-video";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  r = run_cli(with_lock(d, {"status"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::StartsWith("held by render-video (pid " + std::to_string(::getpid())));
  r = run_cli(with_lock(d, {"--json", "status"}));
  j = only_json(r.out);
  CHECK(j["held"] == true);
  CHECK(j["pid"] == ::getpid());
  CHECK(j["label"] == "render-video");
  CHECK(j["token"] == l->token());
  CHECK(j["heldForMs"].is_number());
  CHECK(j["stale"].is_null());
  REQUIRE(!l->release());

  make_lock(d.lock(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
  r = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(r.code == 1);
  j = only_json(r.out);
  CHECK(j["held"] == false);
  CHECK_THAT(j["stale"].get<std::string>(), Catch::Contains("dead"));
}

TEST_CASE("cli: acquire records the caller's parent, release checks ownership", "[cli]") {
  temp_dir d;
  // run_cli starts offload-lock directly, so its parent is this test process.
  auto r = run_cli(with_lock(d, {"--quiet", "acquire", "--label", "scripted"}));
  REQUIRE(r.code == 0);
  std::string token = r.out.substr(0, r.out.size() - 1);
  CHECK(token.size() == 32);
  ol::info i = ol::inspect(d.lock());
  CHECK(i.held);
  CHECK(i.pid == ::getpid());
  CHECK(i.label == "scripted");
  CHECK(i.token == token);

  r = run_cli(with_lock(d, {"acquire", "--wait", "0"}));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy") && Catch::Contains("scripted"));
  auto start = std::chrono::steady_clock::now();
  r = run_cli(with_lock(d, {"--quiet", "acquire", "--wait", "300ms"}));
  CHECK(r.code == 1);
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  CHECK(r.err.empty());

  r = run_cli(with_lock(d, {"release", "--token", "0123"}));
  CHECK(r.code == 3);
  one_line_error(r);
  CHECK(ol::inspect(d.lock()).held);
  r = run_cli(with_lock(d, {"release", "--pid", "1"}));
  CHECK(r.code == 3);
  CHECK(ol::inspect(d.lock()).held);

  r = run_cli(with_lock(d, {"release", "--token", token}));
  CHECK(r.code == 0);
  CHECK_FALSE(fs::exists(d.lock()));
  r = run_cli(with_lock(d, {"release", "--token", token}));
  CHECK(r.code == 0);  // already free

  // Default release: the caller's parent, which is the recorded default holder.
  REQUIRE(run_cli(with_lock(d, {"acquire"})).code == 0);
  CHECK(run_cli(with_lock(d, {"release"})).code == 0);
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("cli: release --force removes another holder's lock and says whose", "[cli]") {
  temp_dir d;
  ol::lock_options o;
  o.path = d.lock();
  o.label = "someone";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  auto r = run_cli(with_lock(d, {"release", "--force"}));
  CHECK(r.code == 0);
  CHECK_THAT(r.err, Catch::Contains("someone") && Catch::Contains(std::to_string(::getpid())));
  CHECK_FALSE(fs::exists(d.lock()));
  CHECK(l->release() == ol::errc::lost);
}

TEST_CASE("cli: acquire --pid, and the keeper releases when that process exits", "[cli]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "30");
  auto r = run_cli(with_lock(d, {"acquire", "--pid", std::to_string(sleeper.id())}));
  REQUIRE(r.code == 0);
  CHECK(ol::inspect(d.lock()).pid == sleeper.id());
  CHECK(run_cli(with_lock(d, {"acquire", "--wait", "0"})).code == 1);
  sleeper.terminate();
  sleeper.wait();
  CHECK(eventually([&] { return !fs::exists(d.lock()); }));

  r = run_cli(with_lock(d, {"acquire", "--pid", std::to_string(dead_pid())}));
  CHECK(r.code == 4);
  one_line_error(r);
}

TEST_CASE("cli: acquire --pid keeps the lock while that process's main thread has ended but another works",
          "[cli]") {
  temp_dir d;
  child half(self_exe(), {"--child", "main-exits", "60"});
  REQUIRE(half.read_line(30s) == std::optional<std::string>("ready"));
  REQUIRE(eventually([&] { return process_state(half.pid()) == 'Z'; }, 10s));
  REQUIRE(run_cli(with_lock(d, {"acquire", "--pid", std::to_string(half.pid())})).code == 0);
  // A zombie to /proc, but still at work: the keeper keeps the lock.
  for (int k = 0; k < 6; ++k) {
    std::this_thread::sleep_for(500ms);
    CHECK(run_cli(with_lock(d, {"acquire", "--wait", "0"})).code == 1);
  }
  half.kill(SIGKILL);
  (void)half.wait();
  CHECK(eventually([&] { return !fs::exists(d.lock()); }, 30s));
}

TEST_CASE("cli: run holds the lock for CMD and exits with CMD's status", "[cli]") {
  temp_dir d;
  auto r = run_cli(with_lock(d, {"run", "--label", "demo", "--", "sh", "-c",
                                 "cat \"$OFFLOAD_LOCK_PATH/meta.json\"; echo; echo \"pid=$$\"; exit 7"}));
  CHECK(r.code == 7);
  auto nl = r.out.find('\n');
  REQUIRE(nl != std::string::npos);
  json meta = json::parse(r.out.substr(0, nl));
  CHECK(meta["label"] == "demo");
  // CMD's pid is the recorded holder.
  CHECK(r.out.substr(nl + 1) == "pid=" + std::to_string(meta["pid"].get<long>()) + "\n");
  CHECK_FALSE(fs::exists(d.lock()));

  CHECK(run_cli(with_lock(d, {"run", "--", "sh", "-c", "kill -TERM $$"})).code == 128 + SIGTERM);
  r = run_cli(with_lock(d, {"run", "--", "/no/such/program"}));
  CHECK(r.code == 127);
  one_line_error(r);
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("cli: run when busy exits 1, or --busy-exit N", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  auto r = run_cli(with_lock(d, {"run", "--wait", "0", "--", "sh", "-c", "echo ran"}));
  CHECK(r.code == 1);
  CHECK(r.out.empty());
  CHECK(run_cli(with_lock(d, {"--quiet", "run", "--wait", "0", "--busy-exit", "75", "--", "true"})).code == 75);
  // While it waits, it says on stderr whom it waits for.
  r = run_cli(with_lock(d, {"run", "--wait", "200ms", "--", "true"}));
  CHECK_THAT(r.err, Catch::Contains("waiting for") && Catch::Contains(std::to_string(::getpid())));
}

TEST_CASE("cli: run forwards SIGTERM to CMD", "[cli]") {
  temp_dir d;
  child c(cli_exe(), with_lock(d, {"run", "--", "sh", "-c", "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done"}));
  REQUIRE(c.read_line() == std::string("ready"));
  c.kill(SIGTERM);
  CHECK(c.wait() == 42);
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("cli: the lock stays held while CMD lives after offload-lock is SIGKILLed", "[cli]") {
  temp_dir d;
  fs::path fifo = d.path / "go";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  child c(cli_exe(), with_lock(d, {"run", "--", "sh", "-c", "echo $$; read x < " + fifo.string()}));
  auto pid_line = c.read_line();
  REQUIRE(pid_line);
  int cmd_pid = std::stoi(*pid_line);
  c.kill(SIGKILL);
  REQUIRE(c.wait() == 128 + SIGKILL);
  ol::info i = ol::inspect(d.lock());
  CHECK(i.held);
  CHECK(i.pid == cmd_pid);
  CHECK(run_cli(with_lock(d, {"acquire", "--wait", "0"})).code == 1);
  // CMD ends: the lock is stale at once and the next acquirer takes it.
  write_file(fifo, "x\n");
  CHECK(eventually([&] { return !ol::inspect(d.lock()).held; }));
  auto r = run_cli(with_lock(d, {"run", "--wait", "10s", "--", "true"}));
  CHECK(r.code == 0);
}

TEST_CASE("cli: hold prints acquired {json} and releases at EOF or SIGTERM", "[cli]") {
  temp_dir d;
  for (bool by_signal : {false, true}) {
    child c(cli_exe(), with_lock(d, {"hold", "--label", "held-by-node"}));
    auto line = c.read_line();
    REQUIRE(line);
    REQUIRE(line->rfind("acquired ", 0) == 0);
    json j = json::parse(line->substr(9));
    CHECK(j["held"] == true);
    CHECK(j["pid"] == c.pid());
    CHECK(j["label"] == "held-by-node");
    CHECK(j["token"].get<std::string>().size() == 32);
    CHECK(ol::inspect(d.lock()).held);
    if (by_signal) c.kill(SIGTERM);
    else c.close_stdin();
    CHECK(c.wait() == 0);
    CHECK_FALSE(fs::exists(d.lock()));
  }
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  auto r = run_cli(with_lock(d, {"hold", "--wait", "0"}));
  CHECK(r.code == 1);
  CHECK(r.out.empty());
}

TEST_CASE("cli: hold exits 5 when its lock was taken over", "[cli]") {
  temp_dir d;
  child c(cli_exe(), with_lock(d, {"--ttl", "1h", "hold"}));
  REQUIRE(c.read_line());
  fs::remove_all(d.lock());
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  c.close_stdin();
  CHECK(c.wait() == 5);
  CHECK(l->still_held());
}

TEST_CASE("cli: hold exits 5 whenever its lock was removed during the hold, even if the path is free again", "[cli]") {
  temp_dir d;
  for (const std::string how : {"force", "token", "rm"}) {
    INFO(how);
    child c(cli_exe(), with_lock(d, {"hold"}));
    auto line = c.read_line();
    REQUIRE(line);
    const std::string token = json::parse(line->substr(9))["token"];
    if (how == "force") CHECK(run_cli(with_lock(d, {"release", "--force"})).code == 0);
    else if (how == "token") CHECK(run_cli(with_lock(d, {"release", "--token", token})).code == 0);
    else fs::remove_all(d.lock());
    CHECK_FALSE(fs::exists(d.lock()));
    c.close_stdin();
    CHECK(c.wait() == 5);
    CHECK_THAT(c.err_text(), Catch::Contains("had been removed by someone else during the hold"));
  }
}

TEST_CASE("cli: hold exits 5 when a v1 runner replaced its lock", "[cli]") {
  temp_dir d;
  child c(cli_exe(), with_lock(d, {"--quiet", "hold"}));
  REQUIRE(c.read_line());
  // A v1 runner's double reclaim: rm -rf, then its own mkdir and meta.json.
  fs::remove_all(d.lock());
  make_lock(d.lock(), "{\"pid\":" + std::to_string(::getpid()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
  c.close_stdin();
  CHECK(c.wait() == 5);
  CHECK(ol::inspect(d.lock()).pid == ::getpid());
}

TEST_CASE("cli: a waiting hold whose stdin closes gives up instead of taking the lock later", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  child c(cli_exe(), with_lock(d, {"hold"}));
  CHECK_FALSE(c.read_line(300ms));
  c.close_stdin();  // the Node runner that asked for it died
  CHECK(c.wait() == 1);
  CHECK(c.read_line(0ms) == std::nullopt);
  REQUIRE(!l->release());
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("cli: a signal while waiting abandons the wait and does not run CMD", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  child c(cli_exe(), with_lock(d, {"run", "--", "echo", "ran"}));
  REQUIRE(eventually([&] { return c.err_text().find("waiting for") != std::string::npos; }));
  c.kill(SIGTERM);
  CHECK(c.wait() == 128 + SIGTERM);
  CHECK(c.read_line(0ms) == std::nullopt);
  CHECK(l->still_held());
}

TEST_CASE("cli: a CMD killed while run waits makes run exit with CMD's status", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  child c(cli_exe(), with_lock(d, {"run", "--busy-exit", "75", "--", "echo", "ran"}));
  int cmd = held_back_cmd(c);
  ::kill(cmd, SIGKILL);
  CHECK(c.wait() == 128 + SIGKILL);
  CHECK(c.read_line(0ms) == std::nullopt);
  CHECK(l->still_held());
}

TEST_CASE("cli: a CMD stopped and continued while run waits (Ctrl-Z then fg) leaves the wait going", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  child c(cli_exe(), with_lock(d, {"run", "--wait", "60", "--", "echo", "ran"}));
  int cmd = held_back_cmd(c);
  // What a terminal's Ctrl-Z and fg do to the job's process group, CMD
  // included: a child that stops or continues has not ended. (SIGSTOP:
  // a SIGTSTP to an orphaned process group, as under ctest, is discarded.)
  ::kill(cmd, SIGSTOP);
  REQUIRE(eventually([&] { return read_file("/proc/" + std::to_string(cmd) + "/stat").find(") T ") != std::string::npos; }));
  ::kill(cmd, SIGCONT);
  REQUIRE(eventually([&] { return read_file("/proc/" + std::to_string(cmd) + "/stat").find(") T ") == std::string::npos; }));
  // Still waiting: the lock is held, and run neither gave up nor ran CMD.
  CHECK(c.err_text().find("gave up") == std::string::npos);
  CHECK(c.read_line(0ms) == std::nullopt);
  REQUIRE(!l->release());
  CHECK(c.read_line() == std::optional<std::string>("ran"));
  CHECK(c.wait() == 0);
}

TEST_CASE("cli: a waiter short of descriptors fails or times out and leaves nothing of its own", "[cli]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  const fs::path queue = d.path / ".gpu.lock.queue";
  // Each limit runs out at another call: joining the queue, staging, the
  // watches. Whatever it reached, a waiter that leaves without the lock
  // takes its place in the queue with it, directories included.
  for (int n = 9; n <= 24; ++n) {
    INFO("ulimit -n " << n);
    child c("/bin/sh", {"-c", "ulimit -n " + std::to_string(n) + " && exec \"$0\" --lock \"$1\" run --wait 1s -- true",
                        cli_exe(), d.lock()});
    c.close_stdin();
    auto code = c.wait(60s);
    INFO(c.err_text());
    // Busy (1) or the failure (4); an instrumented build may need more
    // descriptors than it has to start at all.
    REQUIRE(code);
    CHECK(*code != 0);
    CHECK_FALSE(fs::exists(queue));
    CHECK(l->still_held());
  }
  REQUIRE(!l->release());
}

TEST_CASE("cli: wait-free", "[cli]") {
  temp_dir d;
  CHECK(run_cli(with_lock(d, {"wait-free", "--wait", "0"})).code == 0);
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  CHECK(run_cli(with_lock(d, {"wait-free", "--wait", "200ms"})).code == 1);
  child c(cli_exe(), with_lock(d, {"wait-free", "--wait", "60s"}));
  CHECK_FALSE(c.wait(300ms));
  REQUIRE(!l->release());
  CHECK(c.wait() == 0);
}

TEST_CASE("cli: usage errors exit 2 with one line, system errors exit 4 naming the path", "[cli]") {
  temp_dir d;
  for (const auto& args : std::vector<std::vector<std::string>>{
           {}, {"nope"}, {"acquire", "--wait", "soon"}, {"--ttl", "-1", "status"}, {"release", "--pid", "x"},
           {"run", "--wait", "1"}, {"hold", "--poll", "1s"}, {"acquire", "--pid"}}) {
    auto r = run_cli(args);
    CHECK(r.code == 2);
    one_line_error(r);
  }
  std::string missing = (d.path / "no" / "parent" / "gpu.lock").string();
  auto r = run_cli({"--lock", missing, "acquire", "--wait", "0"});
  CHECK(r.code == 4);
  one_line_error(r);
  CHECK_THAT(r.err, Catch::Contains((d.path / "no" / "parent").string()) && Catch::Contains("No such file"));
  CHECK(run_cli({"--help"}).code == 0);
  CHECK_THAT(run_cli({"run", "--help"}).out, Catch::Contains("CMD's status"));
}

TEST_CASE("cli: what is surprising is said: a holder that exits at once, v1 holders, owners, the path, Go's path",
          "[cli]") {
  temp_dir d;
  // The pipeline pattern records its short-lived subshell: the keeper says so
  // on the terminal. (Each script runs in a pseudo-terminal from script(1).)
  const std::string bin = "'" + cli_exe() + "' --lock '" + d.lock() + "'";
  auto on_terminal = [&](const std::string& name, const std::string& body) {
    write_file(d.path / name, body);
    boost::process::ipstream out;
    boost::process::child term("/usr/bin/script",
                               std::vector<std::string>{"-qfec", "sh " + (d.path / name).string(), "/dev/null"},
                               boost::process::std_out > out);
    std::string all, line;
    while (std::getline(out, line)) all += line + "\n";
    term.wait();
    return all;
  };
  std::string all = on_terminal("pipeline.sh", "tok=$(" + bin + " acquire | tr -d ' '); echo \"tok=$tok\"; sleep 2\n");
  CHECK(std::regex_search(all, std::regex("tok=[0-9a-f]{32}")));
  CHECK_THAT(all, Catch::Contains("WARNING: the recorded holder, pid "));
  CHECK_THAT(all, Catch::Contains("exited within a second of acquire"));
  CHECK_FALSE(ol::inspect(d.lock()).held);
  // The safe pattern: the script records itself and stays; no warning.
  all = on_terminal("safe.sh", "tok=$(" + bin + " acquire --pid $$); sleep 2; " + bin +
                                   " release --token $tok && echo released\n");
  CHECK_THAT(all, Catch::Contains("released"));
  CHECK(all.find("WARNING") == std::string::npos);

  // A v1 holder without a label is named by its process's name.
  boost::process::child sleeper("/bin/sleep", std::vector<std::string>{"30"});
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms()) + "}");
  auto r = run_cli(with_lock(d, {"status"}));
  CHECK_THAT(r.out, Catch::StartsWith("held by sleep (pid " + std::to_string(sleeper.id()) + ")"));
  if (running_as_root()) {
    REQUIRE(::chown(d.lock().c_str(), 65534, 65534) == 0);
    CHECK_THAT(run_cli(with_lock(d, {"status"})).out, Catch::Contains("owned by uid 65534 (nobody)"));
  }
  sleeper.terminate();
  fs::remove_all(d.lock());

  // Go readers would look elsewhere: run, acquire and status say so once.
  env_changes split = {{"GPU_LOCK", std::nullopt}, {"TMPDIR", std::nullopt}, {"TMP", d.str()}, {"TEMP", std::nullopt}};
  r = run_cli({"status"}, split);
  CHECK(r.out == "free\nlock: " + d.str() + "/local-offload-gpu.lock\n");
  CHECK(r.err == "offload-lock: note: Go readers (gpulock) look at /tmp/local-offload-gpu.lock, not " + d.str() +
                     "/local-offload-gpu.lock: Go reads only $TMPDIR; set TMPDIR or GPU_LOCK for both (offload-lock "
                     "path --explain)\n");
  r = run_cli({"run", "--", "true"}, split);
  CHECK(r.code == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(run_cli({"--quiet", "status"}, split).err.empty());
  CHECK(run_cli(with_lock(d, {"status"}), split).err.empty());  // an explicit path is everyone's
}
