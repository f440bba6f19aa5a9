// The HTTP side of `offload-lock serve`, over Boost.Beast. See
// http_server.hpp. One thread (the io_context's) runs every connection;
// Beast parses every request, within the limits set here.
#include "cli/http_server.hpp"

#include <algorithm>
#include <utility>  // before Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <optional>
#include <vector>

namespace offload_lock::cli {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

class session;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

struct http_server::impl {
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer ping{ioc};
  http_routes routes;
  http_limits limits;
  std::string where;
  std::vector<std::string> hosts;  // the Host values accepted (check_host)
  std::size_t clients = 0;
  std::vector<std::shared_ptr<session>> streams;  // held here while they stream
  std::shared_ptr<const std::string> last_event;

  void accept();
  void schedule_ping();
  void broadcast(const std::shared_ptr<const std::string>& msg);
};

namespace {

std::shared_ptr<const std::string> event_of(const std::string& json) {
  return std::make_shared<const std::string>("event: board\ndata: " + json + "\n\n");
}

// Each step of a session (read, answer, write the next event) starts the
// next one asynchronously: the io_context calls it later, from its own loop,
// so the stack never grows. clang-tidy sees the calls as a recursion.
// NOLINTBEGIN(misc-no-recursion)
class session : public std::enable_shared_from_this<session> {
 public:
  session(http_server::impl& srv, tcp::socket s)
      : srv_(srv), stream_(std::move(s)), buffer_(srv.limits.max_header_bytes + 1024) {
    ++srv_.clients;
  }
  ~session() { --srv_.clients; }

  void start() { read(); }

  // Over the limit of clients: one answer, then the connection closes.
  void refuse() {
    auto res = std::make_shared<http::response<http::string_body>>(http::status::service_unavailable, 11);
    res->set(http::field::content_type, "text/plain; charset=utf-8");
    res->set(http::field::retry_after, "5");
    res->body() = "too many clients\n";
    res->keep_alive(false);
    res->prepare_payload();
    stream_.expires_after(std::chrono::seconds(srv_.limits.request_timeout_s));
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code, std::size_t) { self->close(); });
  }

  // An event stream's next message; one that has fallen this far behind
  // (a client that reads nothing) is closed.
  void send(const std::shared_ptr<const std::string>& msg) {
    if (!streaming_) return;
    if (queue_.size() >= srv_.limits.max_queued_events) {
      close();
      return;
    }
    queue_.push_back(msg);
    if (!writing_) write_next();
  }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(srv_.limits.max_header_bytes));
    parser_->body_limit(0);
    stream_.expires_after(std::chrono::seconds(srv_.limits.request_timeout_s));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->handle(self->parser_->release());
    });
  }

  template <class Body>
  void finish(std::shared_ptr<http::response<Body>> res) {
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
      if (ec || res->need_eof()) return self->close();
      self->read();
    });
  }

  void answer(const http::request<http::empty_body>& req, http::status status, const char* type, std::string body,
              bool page = false) {
    auto res = std::make_shared<http::response<http::string_body>>(status, req.version());
    res->set(http::field::server, "offload-lock");
    res->set(http::field::content_type, type);
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    res->set("Referrer-Policy", "no-referrer");
    if (page)
      res->set("Content-Security-Policy",
               "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; base-uri 'none'; "
               "form-action 'none'; frame-ancestors 'none'");
    if (status == http::status::method_not_allowed) res->set(http::field::allow, "GET, HEAD");
    res->keep_alive(req.keep_alive());
    res->body() = std::move(body);
    res->prepare_payload();
    if (req.method() == http::verb::head) res->body().clear();  // the length stays the body's
    finish(res);
  }

  bool host_ok(const http::request<http::empty_body>& req) const {
    if (!srv_.limits.check_host) return true;
    const auto field = req[http::field::host];
    const std::string_view host(field.data(), field.size());
    return std::any_of(srv_.hosts.begin(), srv_.hosts.end(), [&](const std::string& h) { return iequals(host, h); });
  }

  void handle(const http::request<http::empty_body>& req) {
    const bool get = req.method() == http::verb::get, head = req.method() == http::verb::head;
    if (!get && !head) return answer(req, http::status::method_not_allowed, "text/plain; charset=utf-8", "read-only: GET and HEAD\n");
    if (!host_ok(req)) return answer(req, http::status::misdirected_request, "text/plain; charset=utf-8", "unexpected Host\n");
    std::string_view target(req.target().data(), req.target().size());
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const auto& r = srv_.routes;
    if (target == "/" || target == "/index.html") return answer(req, http::status::ok, "text/html; charset=utf-8", r.page(), true);
    if (target == "/app.js") return answer(req, http::status::ok, "text/javascript; charset=utf-8", r.script());
    if (target == "/style.css") return answer(req, http::status::ok, "text/css; charset=utf-8", r.style());
    if (target == "/status.json") return answer(req, http::status::ok, "application/json", r.status_json() + "\n");
    if (target == "/history.json") return answer(req, http::status::ok, "application/json", r.history_json() + "\n");
    if (target == "/metrics") return answer(req, http::status::ok, "text/plain; version=0.0.4; charset=utf-8", r.metrics());
    if (target == "/events" && get) return stream(req);
    answer(req, http::status::not_found, "text/plain; charset=utf-8", "not found\n");
  }

  // Server-Sent Events: the header, then "event: board" messages for as
  // long as the client stays; the body ends when the connection does.
  void stream(const http::request<http::empty_body>& req) {
    auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, req.version());
    res->set(http::field::server, "offload-lock");
    res->set(http::field::content_type, "text/event-stream");
    res->set(http::field::cache_control, "no-store");
    res->set("X-Content-Type-Options", "nosniff");
    res->keep_alive(false);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    http::async_write_header(stream_, *sr, [self = shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->stream_.expires_never();
      self->streaming_ = true;
      self->srv_.streams.push_back(self);
      if (self->srv_.routes.first_event) self->send(event_of(self->srv_.routes.first_event()));
      else if (self->srv_.last_event) self->send(self->srv_.last_event);
    });
  }

  void write_next() {
    if (queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    auto msg = queue_.front();
    net::async_write(stream_, net::buffer(*msg), [self = shared_from_this(), msg](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->queue_.pop_front();
      self->write_next();
    });
  }

  void close() {
    // The list may hold the last reference: keep this alive to the end.
    const auto self = shared_from_this();
    if (streaming_) {
      auto& v = srv_.streams;
      v.erase(std::remove(v.begin(), v.end(), self), v.end());
    }
    streaming_ = false;
    queue_.clear();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  http_server::impl& srv_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> parser_;
  std::deque<std::shared_ptr<const std::string>> queue_;
  bool streaming_ = false, writing_ = false;
};
// NOLINTEND(misc-no-recursion)

}  // namespace

void http_server::impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec == net::error::operation_aborted) return;
    if (!ec) {
      s.set_option(tcp::no_delay(true), ec);
      auto c = std::make_shared<session>(*this, std::move(s));
      if (clients > limits.max_clients) c->refuse();
      else c->start();
    }
    accept();
  });
}

void http_server::impl::broadcast(const std::shared_ptr<const std::string>& msg) {
  // A copy: a stream that falls behind leaves the list as it is sent to.
  for (const auto& s : std::vector<std::shared_ptr<session>>(streams)) s->send(msg);
}

void http_server::impl::schedule_ping() {
  ping.expires_after(std::chrono::seconds(limits.ping_s));
  ping.async_wait([this](beast::error_code ec) {
    if (ec) return;
    // A comment line: keeps proxies from timing the stream out, and finds
    // clients that went away without a word.
    static const auto comment = std::make_shared<const std::string>(": ping\n\n");
    broadcast(comment);
    schedule_ping();
  });
}

bool is_loopback_address(const std::string& address) {
  if (address == "localhost") return true;
  beast::error_code ec;
  const auto a = net::ip::make_address(address, ec);
  return !ec && a.is_loopback();
}

http_server::http_server(std::unique_ptr<impl> p) : p_(std::move(p)) {}
http_server::~http_server() = default;

std::unique_ptr<http_server> http_server::listen(const std::string& address, int port, http_routes routes,
                                                 const http_limits& limits, std::string& error) {
  auto p = std::make_unique<impl>();
  p->routes = std::move(routes);
  p->limits = limits;
  beast::error_code ec;
  const auto addr = net::ip::make_address(address == "localhost" ? "127.0.0.1" : address, ec);
  if (ec) {
    error = "not an IP address: '" + address + "'";
    return nullptr;
  }
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  p->acceptor.open(ep.protocol(), ec);
  if (!ec) p->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) p->acceptor.bind(ep, ec);
  if (!ec) p->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error = "cannot listen on " + address + ":" + std::to_string(port) + ": " + ec.message();
    return nullptr;
  }
  const auto bound = p->acceptor.local_endpoint(ec);
  const std::string port_text = std::to_string(bound.port());
  const std::string host = bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  p->where = host + ":" + port_text;
  p->hosts = {p->where, "localhost:" + port_text, "127.0.0.1:" + port_text, "[::1]:" + port_text};
  p->accept();
  p->schedule_ping();
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

std::string http_server::where() const { return p_->where; }

void http_server::run() { p_->ioc.run(); }

void http_server::stop() { p_->ioc.stop(); }

void http_server::publish(const std::string& json) {
  auto msg = event_of(json);
  net::post(p_->ioc, [this, msg] {
    p_->last_event = msg;
    p_->broadcast(msg);
  });
}

}  // namespace offload_lock::cli
