// The HTTP side of `offload-lock serve`, over Boost.Beast: read-only
// routes, bounded clients and requests, and one stream of Server-Sent
// Events. What each route answers is the command's (serve.cpp); this file
// knows HTTP, not the lock.
#ifndef OFFLOAD_LOCK_SRC_CLI_HTTP_SERVER_HPP
#define OFFLOAD_LOCK_SRC_CLI_HTTP_SERVER_HPP

#include <functional>
#include <memory>
#include <string>

namespace offload_lock::cli {

struct http_limits {
  std::size_t max_clients = 64;        // connections at once, event streams included
  std::size_t max_header_bytes = 8192;  // a request's headers; no request may have a body
  int request_timeout_s = 10;          // to send a whole request (and between requests)
  std::size_t max_queued_events = 32;  // an event stream further behind is closed
  int ping_s = 15;                     // an event stream's keep-alive comment
  // Host headers other than the listening address (or localhost) are
  // refused (421), so that a web page elsewhere cannot reach a loopback
  // server through a name it points at 127.0.0.1 (DNS rebinding).
  bool check_host = true;
};

// What the routes answer, called on the server's thread. Each returns the
// body; the server sets the headers.
struct http_routes {
  std::function<std::string()> page, script, style;  // /, /app.js, /style.css
  std::function<std::string()> status_json;         // /status.json
  std::function<std::string()> metrics;             // /metrics
  std::function<std::string()> history_json;        // /history.json
  // The first event of a new /events client (JSON); unset: the last one
  // published.
  std::function<std::string()> first_event;
};

// Whether `address` is "localhost" or an IPv4 or IPv6 loopback literal.
bool is_loopback_address(const std::string& address);

class http_server {
 public:
  // Binds `address` (an IPv4 or IPv6 literal, or "localhost") and `port`
  // (0: any free one). nullptr and `error` on failure.
  static std::unique_ptr<http_server> listen(const std::string& address, int port, http_routes routes,
                                             const http_limits& limits, std::string& error);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // "127.0.0.1:9479" (the port bound).
  std::string where() const;
  // Serves until stop(). On the calling thread.
  void run();
  // Thread-safe.
  void stop();
  // Sends `json` as one event ("event: board") to every /events client,
  // and to every client that connects later, first. Thread-safe.
  void publish(const std::string& json);

  struct impl;  // http_server.cpp's

 private:
  explicit http_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_HTTP_SERVER_HPP
