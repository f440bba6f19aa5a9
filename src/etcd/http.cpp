// HTTP/1.1 to one etcd member (http.hpp). The request is written by hand
// (a POST with a JSON body is a few fixed lines); the reply is Beast's
// parser's, fed with what the seam received, so chunked streams, trailers
// and every malformed reply are Beast's to judge.
#include "etcd/http.hpp"

#include <limits>
#include <utility>  // before Beast: 1.74's Asio uses std::exchange without it

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>

namespace offload_lock::detail::etcd {

namespace http = boost::beast::http;

namespace {

std::error_code sys_code(std::errc e) { return std::make_error_code(e); }

}  // namespace

struct connection::impl {
  endpoint ep;
  std::string shown;  // "HOST:PORT"
  sys::fd sock;
  std::string in;     // received, not yet parsed
  std::optional<http::response_parser<http::buffer_body>> parser;
  // A stream: its body so far not split into messages.
  std::string pending;
  bool streaming = false;
  bool ended = false;  // the stream's reply is complete (the member ended it)

  error fail(std::error_code code, const std::string& what) {
    close();
    return error(code, what + " " + shown);
  }
  void close() {
    sock.reset();
    in.clear();
    parser.reset();
    pending.clear();
    streaming = false;
    ended = false;
  }

  error ensure_open(const sys::net_bounds& b) {
    if (sock.valid()) return {};
    auto s = sys::tcp_connect(ep.host, ep.port, b);
    if (!s) return s.error();
    sock = std::move(*s);
    return {};
  }

  // `limit`: the most body a reply may have. A stream's body has no end
  // known in advance: its messages are bounded one by one instead (and an
  // explicit limit, not boost::none: Beast 1.74 compares a Content-Length
  // against a disabled limit as if it were exceeded).
  void new_parser(std::uint64_t limit) {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(max_head_bytes));
    parser->body_limit(limit);
    parser->eager(true);
  }

  // Receives once more into `in`: 0 when more came; an error (a closed
  // connection is ECONNRESET, unless the reply ends at the close).
  error receive_more(const sys::net_bounds& b) {
    char buf[16384];
    auto n = sys::tcp_receive(sock.get(), buf, sizeof buf, b, shown);
    if (!n) return n.error();
    if (*n == 0) {
      // A reply whose length is its connection's end.
      boost::system::error_code ec;
      if (parser && parser->is_header_done() && !parser->is_done()) parser->put_eof(ec);
      if (parser && parser->is_done()) return {};
      return error(sys_code(std::errc::connection_reset), "connection closed by " + shown);
    }
    in.append(buf, *n);
    return {};
  }

  // Feeds `in` to the parser, appending body bytes to `body`. false with
  // `e` set on a malformed reply.
  bool parse(std::string& body, std::size_t limit, error& e) {
    for (;;) {
      char out[16384];
      parser->get().body().data = out;
      parser->get().body().size = sizeof out;
      boost::system::error_code ec;
      const std::size_t used = parser->put(boost::asio::buffer(in.data(), in.size()), ec);
      in.erase(0, used);
      const std::size_t got = sizeof out - parser->get().body().size;
      if (body.size() + got > limit) {
        e = fail(sys_code(std::errc::message_size), "a reply of more than " + std::to_string(limit) + " bytes from");
        return false;
      }
      body.append(out, got);
      if (ec == http::error::need_buffer) continue;  // the body buffer filled: more to come out
      if (ec == http::error::need_more || !ec) return true;
      if (ec == http::error::body_limit) {
        e = fail(sys_code(std::errc::message_size), "a reply of more than " + std::to_string(limit) + " bytes from");
        return false;
      }
      e = fail(sys_code(std::errc::protocol_error), "a malformed HTTP reply (" + ec.message() + ") from");
      return false;
    }
  }

  error send_request(std::string_view target, std::string_view body, const sys::net_bounds& b) {
    std::string req;
    req.reserve(160 + body.size());
    req.append("POST ").append(target).append(" HTTP/1.1\r\nHost: ").append(shown);
    req.append("\r\nContent-Type: application/json\r\nContent-Length: ").append(std::to_string(body.size()));
    req.append("\r\n\r\n").append(body);
    return sys::tcp_send(sock.get(), req, b, shown);
  }

  // Reads until the head (and, with `whole`, the whole reply) is in.
  result<http_reply> read_reply(const sys::net_bounds& b, bool whole) {
    http_reply r;
    std::string body;
    for (;;) {
      error e;
      if (!in.empty() && !parse(body, max_reply_bytes, e)) return e;
      if (parser->is_done() || (!whole && parser->is_header_done())) break;
      if (error got = receive_more(b)) {
        close();  // a reply cut short leaves the connection unusable
        return got;
      }
      if (parser->is_done()) break;
    }
    r.status = static_cast<int>(parser->get().result_int());
    r.body = std::move(body);
    if (!whole) pending = std::move(r.body), r.body.clear();
    return r;
  }
};

connection::connection(endpoint ep) : p_(std::make_unique<impl>()) {
  p_->shown = ep.text();
  p_->ep = std::move(ep);
}
connection::~connection() = default;

const endpoint& connection::where() const { return p_->ep; }
bool connection::is_open() const { return p_->sock.valid(); }
void connection::close() { p_->close(); }

result<http_reply> connection::post(std::string_view target, std::string_view body, const sys::net_bounds& b) {
  impl& c = *p_;
  if (c.streaming) c.close();
  // A kept connection the member has closed meanwhile fails at once: the
  // request goes again, once, on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = c.sock.valid();
    if (error e = c.ensure_open(b)) return e;
    c.new_parser(max_reply_bytes);
    c.in.clear();
    error e = c.send_request(target, body, b);
    if (!e) {
      auto r = c.read_reply(b, true);
      if (r) {
        if (!c.parser->keep_alive()) c.close();
        return r;
      }
      e = r.error();
    }
    c.close();
    const bool stale = reused && (e.code() == std::errc::connection_reset || e.code() == std::errc::broken_pipe);
    if (!stale) return e;
  }
  return error(sys_code(std::errc::connection_reset), "connection closed by " + c.shown);
}

result<http_reply> connection::start_stream(std::string_view target, std::string_view body, const sys::net_bounds& b) {
  impl& c = *p_;
  c.close();
  if (error e = c.ensure_open(b)) return e;
  c.new_parser(std::numeric_limits<std::uint64_t>::max());
  if (error e = c.send_request(target, body, b)) {
    c.close();
    return e;
  }
  auto head = c.read_reply(b, false);
  if (!head) return head;
  if (head->status != 200) {
    // An error reply: read it whole, for its message.
    std::string rest = std::move(c.pending);
    while (!c.parser->is_done()) {
      error e;
      if (!c.in.empty() && !c.parse(rest, max_reply_bytes, e)) return e;
      if (c.parser->is_done()) break;
      if (error got = c.receive_more(b)) {
        c.close();
        return got;
      }
    }
    http_reply r{head->status, std::move(rest)};
    c.close();
    return r;
  }
  c.streaming = true;
  return http_reply{200, {}};
}

result<std::optional<std::string>> connection::next_message(const sys::net_bounds& b) {
  impl& c = *p_;
  if (!c.streaming) return error(sys_code(std::errc::not_connected), "no stream open to " + c.shown);
  for (;;) {
    const auto nl = c.pending.find('\n');
    if (nl != std::string::npos) {
      std::string msg = c.pending.substr(0, nl);
      c.pending.erase(0, nl + 1);
      if (msg.find_first_not_of(" \r\t") == std::string::npos) continue;
      return std::optional<std::string>(std::move(msg));
    }
    if (c.pending.size() > max_message_bytes)
      return c.fail(sys_code(std::errc::message_size),
                    "a stream message of more than " + std::to_string(max_message_bytes) + " bytes from");
    if (c.parser->is_done()) {
      // The member ended the stream; a last message without its newline
      // still counts.
      if (!c.pending.empty()) {
        std::string msg = std::move(c.pending);
        c.pending.clear();
        return std::optional<std::string>(std::move(msg));
      }
      return c.fail(sys_code(std::errc::connection_reset), "stream ended by");
    }
    error e;
    if (!c.in.empty()) {
      if (!c.parse(c.pending, max_message_bytes * 2, e)) return e;
      if (c.pending.find('\n') != std::string::npos || c.parser->is_done()) continue;
    }
    if (error got = c.receive_more(b)) {
      if (got == errc::cancelled) return got;
      if (got.code() == std::errc::timed_out) return std::optional<std::string>();
      c.close();
      return got;
    }
  }
}

}  // namespace offload_lock::detail::etcd
