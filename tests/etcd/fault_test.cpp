// etcd locks when things go wrong: etcd down at the start, cut off while
// waiting and while holding, one member of three killed, the quorum lost,
// hostile values in the lock's keys, and a "member" that answers garbage.
// Each case: a clear one-line message, and never two holders.
#include <signal.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "etcd/client.hpp"
#include "etcd/cluster.hpp"
#include "os/clock.hpp"

using namespace olt;
using json = nlohmann::json;
namespace etcd = offload_lock::detail::etcd;

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("etcd down at the start: exit 4 at once, naming the endpoint", "[etcd][fault]") {
  const int port = free_port();
  const std::string url = "etcd://127.0.0.1:" + std::to_string(port) + "/gpu";
  for (const auto& cmd : std::vector<std::vector<std::string>>{
           {"run", "--", "true"}, {"acquire"}, {"hold"}, {"status"}, {"wait-free"}, {"release", "--force"}}) {
    std::vector<std::string> args{"--lock", url};
    args.insert(args.end(), cmd.begin(), cmd.end());
    const auto started = std::chrono::steady_clock::now();
    cli_result r;
    if (cmd.front() == "hold") {
      // hold's stdin stays open: its closing would end the wait first.
      child h(cli_exe(), args);
      r.code = h.wait(30s).value_or(-1);
      r.err = h.err_text();
    } else {
      r = run_cli(args, {}, 30s);
    }
    INFO(cmd.front() << ": " << r.err);
    CHECK(r.code == 4);
    CHECK(r.err.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(r.err.find("Connection refused") != std::string::npos);
    CHECK(count_of(r.err, "\n") == 1);
    CHECK(std::chrono::steady_clock::now() - started < 20s);
  }
}

TEST_CASE("etcd cut off while waiting: the waiter says so once, keeps trying, and gets the lock after", "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child h(cli_exe(), etcd_args(c, "gpu", {"hold", "--label", "H"}));
  (void)acquired(h);
  child w(cli_exe(), etcd_args(c, "gpu", {"run", "--label", "W", "--", "true"}));
  REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "gpu") == 1; }, 30s));
  c.stop(0);
  // Its next keep-alive (within a third of the 10 s TTL) finds no answer.
  CHECK(eventually_every_50ms([&] { return w.err_text().find("cannot be reached") != std::string::npos; }, 20s));
  CHECK(!w.exited());
  c.resume(0);
  REQUIRE(c.has_leader(30s));
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(w.wait(30s) == 0);
  INFO(w.err_text());
  CHECK(count_of(w.err_text(), "cannot be reached") == 1);
  CHECK(w.err_text().find("still trying until the wait ends") != std::string::npos);
}

TEST_CASE("etcd cut off while holding: the holder is told within the TTL, before anyone else can hold it",
          "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  child h(cli_exe(), etcd_args(c, "gpu", {"--ttl", "2s", "--json", "hold", "--label", "H"}));
  (void)acquired(h);
  temp_dir d;
  const std::string ran = (d.path / "ran").string();
  child w(cli_exe(), etcd_args(c, "gpu", {"--ttl", "2s", "run", "--label", "W", "--", "touch", ran}));
  REQUIRE(eventually_every_50ms([&] { return waiting_count(c, "gpu") == 1; }, 30s));
  const auto cut = std::chrono::steady_clock::now();
  c.stop(0);
  REQUIRE(eventually_every_50ms([&] { return h.err_text().find("lost its etcd lease") != std::string::npos; }, 20s));
  const auto told = std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - cut);
  INFO("told after " << told.count() << " ms (TTL 2 s)");
  // By its own clock at the latest 2 s after its last renewal was sent
  // (before the cut); the rest is a loaded machine's slack.
  CHECK(told < 6s);
  // Nobody holds it meanwhile: etcd itself is stopped, and the waiter's CMD
  // has not run.
  CHECK(!fs::exists(ran));
  c.resume(0);
  CHECK(w.wait(60s) == 0);
  CHECK(fs::exists(ran));
  h.close_stdin();
  CHECK(h.wait(30s) == 5);
  CHECK(h.err_text().find("{\"event\":\"lost\"") != std::string::npos);
}

TEST_CASE("etcd: one member of three killed leaves holders and new acquisitions unaffected", "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c(3);
  // A TTL that a new leader's election (about a second here, more on a
  // loaded machine) fits in well: renewals wait for it.
  child h(cli_exe(), etcd_args(c, "gpu", {"--ttl", "5s", "hold", "--label", "H"}));
  (void)acquired(h);
  // Member 0 is the one every client asks first: the others must take over.
  c.kill(0);
  REQUIRE(c.has_leader(30s));
  // The same TTL as the holder's: a shorter one can lapse by the client's
  // own clock while a loaded machine's fresh leader is slow to answer,
  // which is a loss (exit 5) the client must report, not this case's point.
  auto other = etcd_cli(c, "other", {"--ttl", "5s", "run", "--wait", "30s", "--", "true"});
  INFO(other.err);
  CHECK(other.code == 0);
  auto busy = etcd_cli(c, "gpu", {"run", "--wait", "0", "--", "true"});
  CHECK(busy.code == 1);
  // More than the TTL: the holder's renewals went to the other members.
  CHECK(!eventually([&] { return h.err_text().find("WARNING") != std::string::npos; }, 6s));
  c.start(0);
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(etcd_cli(c, "gpu", {"status"}).code == 1);
}

TEST_CASE("etcd: a holder keeps its lease while the member it asks first stops answering (TTL 3 s)",
          "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c(3);
  // A follower, stopped: alive to TCP, answering nothing, and no election.
  int follower = -1;
  for (int k = 0; k < c.size() && follower < 0; ++k) {
    offload_lock::detail::etcd::client one(
        {{"127.0.0.1", static_cast<std::uint16_t>(std::stoi(c.endpoint(k).substr(std::string("127.0.0.1:").size())))}});
    auto st = one.status(soon());
    REQUIRE(st);
    if (st->leader != st->member) follower = k;
  }
  REQUIRE(follower >= 0);
  std::string eps = c.endpoint(follower);
  for (int k = 0; k < c.size(); ++k)
    if (k != follower) eps += "," + c.endpoint(k);
  // The follower first: every call of the holder's goes to it first.
  child h(cli_exe(), {"--lock", "etcd://" + eps + "/stuck", "--ttl", "3s", "hold", "--label", "H"});
  (void)acquired(h);
  c.stop(follower);
  // Longer than the TTL: each renewal gives the stopped member its share
  // of the time left and asks the others in time.
  CHECK(!eventually([&] { return h.err_text().find("WARNING") != std::string::npos; }, 5s));
  c.resume(follower);
  h.close_stdin();
  CHECK(h.wait(30s) == 0);
  CHECK(h.err_text().find("WARNING") == std::string::npos);
}

TEST_CASE("etcd: the quorum lost stops new acquisitions and tells holders within the TTL", "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c(3);
  child h(cli_exe(), etcd_args(c, "gpu", {"--ttl", "2s", "hold", "--label", "H"}));
  (void)acquired(h);
  const auto cut = std::chrono::steady_clock::now();
  c.kill(1);
  c.kill(2);
  REQUIRE(eventually_every_50ms([&] { return h.err_text().find("lost its etcd lease") != std::string::npos; }, 20s));
  const auto told = std::chrono::duration_cast<ms>(std::chrono::steady_clock::now() - cut);
  INFO("told after " << told.count() << " ms (TTL 2 s)");
  CHECK(told < 6s);
  // No new acquisition: the member left answers nothing, the others are gone.
  auto r = etcd_cli(c, "other", {"run", "--wait", "1s", "--", "true"});
  CHECK(r.code == 4);
  CHECK(count_of(r.err, "\n") == 1);
  INFO(r.err);
  CHECK(r.err.find("no etcd endpoint answered") != std::string::npos);
  c.start(1);
  c.start(2);
  REQUIRE(c.has_leader(30s));
  CHECK(etcd_cli(c, "other", {"run", "--wait", "30s", "--", "true"}).code == 0);
  h.close_stdin();
  CHECK(h.wait(30s) == 5);
}

TEST_CASE("etcd: hostile values in the lock's keys are held as they are, shown escaped, never trusted",
          "[etcd][fault]") {
  ETCD_OR_SKIP();
  etcd_cluster c;
  auto cl = client_of(c);
  const std::string holder = "/offload-lock/lock/gpu/holder";
  auto put = [&](const std::string& key, const std::string& value) {
    REQUIRE(cl.txn({}, {{etcd::txn_op::kind::put, key, value, 0, false}}, {}, soon()));
  };
  // Not JSON, with a terminal escape in it: held all the same.
  put(holder, "\x1b]0;pwned\x07 not json");
  auto st = etcd_cli(c, "gpu", {"status"});
  CHECK(st.code == 0);
  CHECK(st.out.find("unreadable holder record (not a JSON object)") != std::string::npos);
  CHECK(st.out.find('\x1b') == std::string::npos);
  CHECK(etcd_cli(c, "gpu", {"run", "--wait", "0", "--", "true"}).code == 1);
  // A record whose label would drive the terminal: escaped when shown.
  put(holder, "{\"pid\":1,\"startedAt\":1,\"label\":\"\\u001b[2J\\u001b]0;x\\u0007evil\",\"host\":\"h\\r\\nx\"}");
  st = etcd_cli(c, "gpu", {"status"});
  CHECK(st.code == 0);
  CHECK(st.out.find('\x1b') == std::string::npos);
  CHECK(st.out.find('\r') == std::string::npos);
  CHECK(st.out.find("evil") != std::string::npos);
  auto js = etcd_cli(c, "gpu", {"--json", "status"});
  CHECK(json::parse(js.out)["label"].get<std::string>().find("evil") != std::string::npos);
  CHECK(js.out.find('\x1b') == std::string::npos);
  // Too big, out of range: unreadable.
  put(holder, "{\"pid\":-5}");
  CHECK(etcd_cli(c, "gpu", {"status"}).out.find("pid out of range") != std::string::npos);
  put(holder, std::string(100'000, '{'));
  CHECK(etcd_cli(c, "gpu", {"status"}).out.find("unreadable holder record") != std::string::npos);
  // Junk in the queue (no lease): no waiter, and doctor says so.
  put("/offload-lock/lock/gpu/queue/0000000000000001", "{\"priority\":100}");
  put("/offload-lock/lock/gpu/queue/zzz", "junk");
  auto doc = etcd_cli(c, "gpu", {"doctor"});
  CHECK(doc.code == 1);
  CHECK(doc.out.find("2 key(s) under /offload-lock/lock/gpu/queue/ are no waiter's entry") != std::string::npos);
  CHECK(waiting_count(c, "gpu") == 0);
  // Once the holder key is gone, the junk blocks nobody.
  REQUIRE(cl.txn({}, {{etcd::txn_op::kind::del, holder, "", 0, false}}, {}, soon()));
  CHECK(etcd_cli(c, "gpu", {"run", "--wait", "10s", "--", "true"}).code == 0);
}

TEST_CASE("etcd: a member that answers garbage is an error naming it, never a crash or a hang", "[etcd][fault]") {
  // A stand-in that speaks broken HTTP, one way per mode.
  const std::string server = R"PY(
import socket, sys, time
mode, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(65536)
    try:
        if mode == "notjson":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{{{{{")
        elif mode == "nothttp":
            c.sendall(b"\x00\xff garbage \x1b[2J\r\n\r\n")
        elif mode == "huge":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n")
            chunk = b"x" * 65536
            for _ in range(400):
                c.sendall(chunk)
        elif mode == "silent":
            time.sleep(30)
        elif mode == "wrongtypes":
            c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n{"ID":{"a":1},"TTL":"ten"}')
    except OSError:
        pass
    c.close()
)PY";
  for (const char* mode : {"notjson", "nothttp", "huge", "silent", "wrongtypes"}) {
    const int port = free_port();
    child stand_in("/usr/bin/python3", {"-c", server, mode, std::to_string(port)});
    REQUIRE(stand_in.read_line(30s) == std::optional<std::string>("ready"));
    const auto started = std::chrono::steady_clock::now();
    auto r = run_cli({"--lock", "etcd://127.0.0.1:" + std::to_string(port) + "/gpu", "run", "--", "true"}, {}, 60s);
    INFO(mode << ": " << r.err);
    CHECK(r.code == 4);
    CHECK(count_of(r.err, "\n") == 1);
    CHECK(r.err.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(r.err.find('\x1b') == std::string::npos);
    CHECK(std::chrono::steady_clock::now() - started < 30s);
    // Read no further than the bound, whatever the member claims to send.
    if (std::string(mode) == "huge") CHECK(r.err.find("a reply of more than 16777216 bytes") != std::string::npos);
    if (std::string(mode) == "silent") CHECK(r.err.find("Connection timed out") != std::string::npos);
    stand_in.kill(SIGKILL);
    (void)stand_in.wait();
  }
}
