// offload-lock against the other participants, for real: the v1 Node runner
// stand-in (tests/interop/reference, doc/protocol.md A2-A4 with its defects) run by
// node, and the Go reader (compat/go) built with go. One lock directory,
// real processes, real signals.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

const std::string kRunner = std::string(OFFLOAD_LOCK_SOURCE_DIR) + "/tests/interop/reference/runner.mjs";

std::unique_ptr<child> node_holder(const temp_dir& d, long wait_ms, const env_changes& env = {}) {
  return std::make_unique<child>(OFFLOAD_LOCK_NODE, std::vector<std::string>{kRunner, "hold", "--lock", d.lock(),
                                                                             "--wait-ms", std::to_string(wait_ms)},
                                 env);
}

json go_inspect(const temp_dir& d) {
  child c(OFFLOAD_LOCK_GPULOCK_INSPECT, {d.lock()});
  auto line = c.read_line();
  REQUIRE(line);
  c.wait();
  return json::parse(*line);
}

json node_inspect(const temp_dir& d) {
  child c(OFFLOAD_LOCK_NODE, {kRunner, "inspect", "--lock", d.lock()});
  auto line = c.read_line();
  REQUIRE(line);
  c.wait();
  return json::parse(*line);
}

// `offload-lock run -- sh` that prints its pid and waits for a line on a FIFO.
struct cli_run_holder {
  temp_dir& d;
  std::unique_ptr<child> c;
  fs::path fifo;
  int cmd_pid = 0;
  explicit cli_run_holder(temp_dir& dir) : d(dir), fifo(dir.path / "release") {
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    c = std::make_unique<child>(cli_exe(), std::vector<std::string>{"--lock", d.lock(), "run", "--label", "cli-run",
                                                                    "--", "sh", "-c", "echo $$; read x < " + fifo.string()});
    auto line = c->read_line();
    REQUIRE(line);
    cmd_pid = std::stoi(*line);
  }
  int release() {
    write_file(fifo, "x\n");
    auto code = c->wait();
    return code ? *code : -1;
  }
};

}  // namespace

TEST_CASE("interop: offload-lock run blocks a v1 Node runner, and the Go reader sees the holder", "[interop]") {
  temp_dir d;
  cli_run_holder h(d);
  // The Node runner polls once a second; it must still be busy after 1.5 s.
  auto node = node_holder(d, 1500);
  CHECK(node->read_line(20s) == std::string("busy"));
  CHECK(node->wait() == 1);

  json g = go_inspect(d);
  CHECK(g["held"] == true);
  CHECK(g["pid"] == h.cmd_pid);
  CHECK(g["label"] == "cli-run");
  json n = node_inspect(d);
  CHECK(n["stale"] == false);
  CHECK(n["meta"]["pid"] == h.cmd_pid);

  CHECK(h.release() == 0);
  CHECK(go_inspect(d)["held"] == false);
  // Free again: the Node runner takes it.
  auto node2 = node_holder(d, 5000);
  CHECK(node2->read_line(20s) == "acquired " + std::to_string(node2->pid()));
  node2->close_stdin();
  CHECK(node2->read_line(20s) == std::string("released"));
}

TEST_CASE("interop: a v1 Node runner's lock blocks offload-lock until it releases", "[interop]") {
  temp_dir d;
  auto node = node_holder(d, 5000);
  REQUIRE(node->read_line(20s) == "acquired " + std::to_string(node->pid()));
  auto r = run_cli({"--lock", d.lock(), "acquire", "--wait", "300ms"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains(std::to_string(node->pid())));
  ol::info i = ol::inspect(d.lock());
  CHECK(i.held);
  CHECK(i.pid == node->pid());
  CHECK(go_inspect(d)["pid"] == node->pid());

  child waiter(cli_exe(), {"--lock", d.lock(), "--quiet", "run", "--", "echo", "got it"});
  CHECK_FALSE(waiter.read_line(500ms));
  node->close_stdin();
  CHECK(waiter.read_line() == std::string("got it"));
  CHECK(waiter.wait() == 0);
}

TEST_CASE("interop: a v1 Node runner killed with SIGKILL is taken over at once", "[interop]") {
  temp_dir d;
  auto node = node_holder(d, 5000);
  REQUIRE(node->read_line(20s));
  child waiter(cli_exe(), {"--lock", d.lock(), "--quiet", "run", "--", "echo", "took over"});
  CHECK_FALSE(waiter.read_line(300ms));
  auto killed = std::chrono::steady_clock::now();
  node->kill(SIGKILL);
  CHECK(waiter.read_line() == std::string("took over"));
  // pidfd wakes the waiter at once rather than at a one-second poll; how soon
  // is the benchmark's crash-takeover figure (a loaded machine can take a
  // second to start `echo` alone), so it is reported here, not asserted.
  WARN("took over " << std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - killed).count()
                    << " ms after the SIGKILL");
}

TEST_CASE("interop: a Node runner inside its mkdir->write window is not robbed (B3, D1)", "[interop]") {
  temp_dir d;
  auto node = node_holder(d, 5000, {{"GPU_LOCK_V1_WRITE_DELAY_MS", std::string("1500")}});
  REQUIRE(eventually([&] { return fs::is_directory(d.lock()); }, 20s));
  REQUIRE_FALSE(fs::exists(fs::path(d.lock()) / "meta.json"));
  // The window is open: offload-lock must wait, not reclaim.
  auto r = run_cli({"--lock", d.lock(), "acquire", "--wait", "0"});
  CHECK(r.code == 1);
  CHECK(node->read_line(20s) == "acquired " + std::to_string(node->pid()));
  CHECK(ol::inspect(d.lock()).pid == node->pid());
  node->close_stdin();
  CHECK(node->read_line(20s) == std::string("released"));
}

TEST_CASE("interop: meta.json from offload-lock reads the same to Node and Go (B2)", "[interop]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  json n = node_inspect(d);
  CHECK(n["stale"] == false);
  CHECK(n["meta"]["pid"] == ::getpid());
  CHECK(n["meta"]["startedAt"].is_number_integer());
  json g = go_inspect(d);
  CHECK(g["held"] == true);
  CHECK(g["pid"] == ::getpid());
  CHECK(g["startedAt"] == n["meta"]["startedAt"]);
}
