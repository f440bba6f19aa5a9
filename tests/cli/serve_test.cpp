// `offload-lock serve` over real sockets on loopback: each route, read-only,
// the event stream on a change, the bounds on clients and requests, where
// it may listen, and how it ends. The client side is Boost.Beast too.
#include <signal.h>

#include <utility>  // before Asio (1.74's awaitable.hpp needs std::exchange)

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using namespace olt;
using nlohmann::json;

namespace {

// A serve process on a free loopback port.
struct server {
  std::unique_ptr<child> proc;
  int port = 0;
  explicit server(const temp_dir& d, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--lock", d.lock(), "serve", "--listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    proc = std::make_unique<child>(cli_exe(), args);
    auto line = proc->read_line();
    REQUIRE(line);
    std::smatch m;
    REQUIRE(std::regex_search(*line, m, std::regex("on http://127\\.0\\.0\\.1:([0-9]+)/")));
    port = std::stoi(m[1]);
  }
};

struct reply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

tcp::socket connect(net::io_context& ioc, int port) {
  tcp::socket s(ioc);
  s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  return s;
}

reply request(int port, const std::string& target, http::verb method = http::verb::get,
              const std::string& host = "") {
  net::io_context ioc;
  auto s = connect(ioc, port);
  http::request<http::string_body> req(method, target, 11);
  req.set(http::field::host, host.empty() ? "127.0.0.1:" + std::to_string(port) : host);
  req.prepare_payload();
  http::write(s, req);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> p;
  p.body_limit(64 * 1024 * 1024);
  if (method == http::verb::head) p.skip(true);
  http::read(s, buf, p);
  reply r;
  r.status = static_cast<int>(p.get().result_int());
  r.body = p.get().body();
  for (const auto& f : p.get()) r.headers[std::string(f.name_string())] = std::string(f.value());
  return r;
}

// The bytes the server sends until it closes the connection (or `timeout`).
std::string read_until_closed(tcp::socket& s, ms timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  s.non_blocking(true);
  char buf[4096];
  for (;;) {
    beast::error_code ec;
    const std::size_t n = s.read_some(net::buffer(buf), ec);
    if (!ec) {
      out.append(buf, n);
      continue;
    }
    if (ec != net::error::would_block) return out;  // closed
    if (std::chrono::steady_clock::now() > deadline) return out + "<still open>";
    std::this_thread::sleep_for(20ms);
  }
}

// The next "event: board" of an event stream, as JSON.
std::optional<json> next_event(tcp::socket& s, std::string& pending, ms timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  s.non_blocking(true);
  char buf[65536];
  for (;;) {
    const auto at = pending.find("event: board\ndata: ");
    if (at != std::string::npos) {
      const auto end = pending.find("\n\n", at);
      if (end != std::string::npos) {
        const std::string data = pending.substr(at + 19, end - at - 19);
        pending.erase(0, end + 2);
        return json::parse(data);
      }
    }
    beast::error_code ec;
    const std::size_t n = s.read_some(net::buffer(buf), ec);
    if (!ec) {
      pending.append(buf, n);
      continue;
    }
    if (ec != net::error::would_block || std::chrono::steady_clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(5ms);
  }
}

std::set<std::string> keys_of(const json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

}  // namespace

TEST_CASE("serve answers the page, status.json, metrics and history.json, and nothing but reads",
          "[cli][serve]") {
  temp_dir d;
  REQUIRE_FALSE(ol::start_history(d.lock()));
  REQUIRE(run_cli(with_lock(d, {"run", "--label", "done-job", "--", "true"})).code == 0);
  ol::lock_options o;
  o.path = d.lock();
  o.label = "web <i>holder</i>";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  server srv(d);

  auto st = request(srv.port, "/status.json");
  CHECK(st.status == 200);
  CHECK(st.headers["Content-Type"] == "application/json");
  CHECK(st.headers["Cache-Control"] == "no-store");
  const json j = json::parse(st.body);
  CHECK(j["held"] == true);
  CHECK(j["label"] == "web <i>holder</i>");
  // The same object as `status --json`.
  const json cli = json::parse(run_cli(with_lock(d, {"--json", "status"})).out);
  CHECK(keys_of(j) == keys_of(cli));
  CHECK(j["token"] == cli["token"]);
  // Answers are kept while the board and its age in ms stay the same: the
  // next one, later, has the holder's time moved on, and a change of holder
  // shows at once.
  std::int64_t last = j["heldForMs"];
  for (int k = 0; k < 10; ++k) {
    std::this_thread::sleep_for(5ms);
    const std::int64_t now = json::parse(request(srv.port, "/status.json").body)["heldForMs"];
    CHECK(now >= last + 5);
    last = now;
  }
  const std::string before = j["token"];
  REQUIRE_FALSE(l->release());
  auto l2 = ol::lock::acquire(o);
  REQUIRE(l2);
  CHECK(eventually([&] { return json::parse(request(srv.port, "/status.json").body)["token"] == l2->token(); }));
  CHECK(l2->token() != before);

  // The history's sums follow the board: the watching thread sums them
  // after it has seen the change, so the third acquisition is counted a
  // moment after the new holder shows.
  const std::string counted =
      "offload_lock_acquisitions_total{lock=\"" + d.lock() + "\",gpu=\"0\",outcome=\"acquired\"} 3";
  CHECK(eventually([&] { return request(srv.port, "/metrics").body.find(counted) != std::string::npos; }));
  auto m = request(srv.port, "/metrics");
  const std::string again = request(srv.port, "/metrics").body;  // from the kept answer, or made again: the same
  CHECK(m.status == 200);
  CHECK(again.find("offload_lock_held{") != std::string::npos);
  CHECK_THAT(m.headers["Content-Type"], Catch::StartsWith("text/plain; version=0.0.4"));
  CHECK_THAT(m.body, Catch::Contains("offload_lock_held{lock=\"" + d.lock() + "\",gpu=\"0\"} 1") &&
                         Catch::Contains(counted));

  auto h = request(srv.port, "/history.json");
  CHECK(h.status == 200);
  const json hj = json::parse(h.body);
  CHECK(hj["kept"] == true);
  CHECK(hj["totals"]["acquisitions"] == 3);

  auto page = request(srv.port, "/");
  CHECK(page.status == 200);
  CHECK_THAT(page.headers["Content-Type"], Catch::StartsWith("text/html"));
  CHECK_THAT(page.headers["Content-Security-Policy"], Catch::Contains("script-src 'self'") && Catch::Contains("default-src 'none'"));
  CHECK_THAT(page.body, Catch::Contains("<script src=\"/app.js\"></script>"));
  auto js = request(srv.port, "/app.js");
  CHECK(js.status == 200);
  CHECK_THAT(js.body, Catch::Contains("textContent") && !Catch::Contains("innerHTML") && Catch::Contains("EventSource"));
  CHECK(request(srv.port, "/style.css").status == 200);

  auto head = request(srv.port, "/status.json", http::verb::head);
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(std::stoul(head.headers["Content-Length"]) > 10);

  for (auto verb : {http::verb::post, http::verb::put, http::verb::delete_, http::verb::patch}) {
    auto r = request(srv.port, "/status.json", verb);
    CHECK(r.status == 405);
    CHECK(r.headers["Allow"] == "GET, HEAD");
  }
  CHECK(request(srv.port, "/meta.json").status == 404);
  CHECK(request(srv.port, "/../../etc/passwd").status == 404);
  // A page elsewhere reaching it through a name pointed at 127.0.0.1.
  CHECK(request(srv.port, "/status.json", http::verb::get, "attacker.example:" + std::to_string(srv.port)).status == 421);
  CHECK(request(srv.port, "/status.json", http::verb::get, "localhost:" + std::to_string(srv.port)).status == 200);

  srv.proc->kill(SIGTERM);
  CHECK(srv.proc->wait() == 128 + SIGTERM);
}

TEST_CASE("serve's event stream sends the board at once and on every change", "[cli][serve]") {
  temp_dir d;
  server srv(d);
  net::io_context ioc;
  auto s = connect(ioc, srv.port);
  const std::string req = "GET /events HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(srv.port) + "\r\n\r\n";
  net::write(s, net::buffer(req));
  std::string pending;
  auto first = next_event(s, pending, kPrompt);
  REQUIRE(first);
  // The server's watching thread may publish its first look just after the
  // connection's own: the same board again, never a different one.
  while (pending.find("\n\n") != std::string::npos) {
    auto again = next_event(s, pending, kPrompt);
    REQUIRE(again);
    CHECK((*again)["status"]["held"] == (*first)["status"]["held"]);
  }
  CHECK((*first)["status"]["held"] == false);
  CHECK((*first)["lock"] == d.lock());

  ol::lock_options o;
  o.path = d.lock();
  o.label = "streamed";
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  std::optional<json> e;
  REQUIRE(eventually([&] {
    e = next_event(s, pending, 100ms);
    return e && (*e)["status"]["held"] == true;
  }));
  CHECK((*e)["status"]["label"] == "streamed");
  REQUIRE_FALSE(l->release());
  REQUIRE(eventually([&] {
    e = next_event(s, pending, 100ms);
    return e && (*e)["status"]["held"] == false;
  }));

  srv.proc->kill(SIGINT);
  CHECK(srv.proc->wait() == 128 + SIGINT);
}

TEST_CASE("serve bounds its clients and its requests", "[cli][serve]") {
  temp_dir d;
  server srv(d);
  net::io_context ioc;

  SECTION("headers over 8 KiB: the connection is closed unanswered") {
    auto s = connect(ioc, srv.port);
    const std::string req = "GET /status.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n";
    beast::error_code ec;
    net::write(s, net::buffer(req), ec);
    CHECK(read_until_closed(s, kPrompt).empty());
  }
  SECTION("a request with a body: closed unanswered") {
    auto s = connect(ioc, srv.port);
    const std::string req = "GET /status.json HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(srv.port) +
                            "\r\nContent-Length: 5\r\n\r\nhello";
    net::write(s, net::buffer(req));
    CHECK(read_until_closed(s, kPrompt).find("200 OK") == std::string::npos);
  }
  SECTION("junk instead of a request: closed unanswered") {
    auto s = connect(ioc, srv.port);
    const std::string junk = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http\r\n\r\n";
    net::write(s, net::buffer(junk));
    CHECK(read_until_closed(s, kPrompt).empty());
  }
  SECTION("a client that sends nothing is let go after the request time limit (10 s)") {
    auto s = connect(ioc, srv.port);
    CHECK(read_until_closed(s, 30s).empty());
  }
  SECTION("beyond 64 clients at once, one more is told to come back later") {
    std::vector<tcp::socket> held;
    for (int k = 0; k < 64; ++k) held.push_back(connect(ioc, srv.port));
    // The server has taken them all in: the next one is one too many.
    REQUIRE(eventually([&] {
      auto s = connect(ioc, srv.port);
      const std::string out = read_until_closed(s, 2s);
      return out.find("503 Service Unavailable") != std::string::npos;
    }));
    held.clear();
    // Once they are gone, requests are served again.
    REQUIRE(eventually([&] { return request(srv.port, "/status.json").status == 200; }));
  }
  CHECK_FALSE(srv.proc->exited());
  srv.proc->kill(SIGTERM);
  CHECK(srv.proc->wait() == 128 + SIGTERM);
}

TEST_CASE("serve listens on loopback unless told otherwise", "[cli][serve]") {
  temp_dir d;
  auto r = run_cli(with_lock(d, {"serve", "--listen", "0.0.0.0:0"}));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("not a loopback address") && Catch::Contains("--allow-remote"));
  CHECK(r.out.empty());
  for (const char* bad : {"nonsense", "127.0.0.1:99999", "127.0.0.1:", ":80", "[::1"}) {
    auto b = run_cli(with_lock(d, {"serve", "--listen", bad}));
    CHECK(b.code == 2);
    CHECK_THAT(b.err, Catch::Contains("--listen"));
  }
  child remote(cli_exe(), with_lock(d, {"serve", "--listen", "0.0.0.0:0", "--allow-remote"}));
  auto line = remote.read_line();
  REQUIRE(line);
  CHECK_THAT(*line, Catch::Contains("on http://0.0.0.0:"));
  remote.kill(SIGHUP);
  CHECK(remote.wait() == 128 + SIGHUP);
  // A port in use: a system error naming it.
  server first(d);
  auto busy = run_cli(with_lock(d, {"serve", "--listen", "127.0.0.1:" + std::to_string(first.port)}));
  CHECK(busy.code == 4);
  CHECK_THAT(busy.err, Catch::Contains("cannot listen on 127.0.0.1:" + std::to_string(first.port)));
}
