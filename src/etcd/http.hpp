// HTTP/1.1 to one etcd member, as its JSON gateway speaks it: a POST and
// its whole reply, or a POST whose reply is a stream of JSON messages, one
// per line (watch, lease keep-alive). Boost.Beast parses every reply within
// the limits below; the bytes travel through the seam (os/net.hpp), so each
// wait ends at its deadline or on a cancel descriptor.
// Not thread-safe: one owner thread per connection.
#ifndef OFFLOAD_LOCK_SRC_ETCD_HTTP_HPP
#define OFFLOAD_LOCK_SRC_ETCD_HTTP_HPP

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "etcd/address.hpp"
#include "offload_lock/error.hpp"
#include "os/net.hpp"

namespace offload_lock::detail::etcd {

// What a member may send, at most: a reply's head, a whole reply (a range
// over many hosts' fleet records fits), and one message of a stream. More
// is an error (EMSGSIZE), never a larger allocation.
inline constexpr std::size_t max_head_bytes = std::size_t{16} * 1024;
inline constexpr std::size_t max_reply_bytes = std::size_t{16} * 1024 * 1024;
inline constexpr std::size_t max_message_bytes = std::size_t{4} * 1024 * 1024;

struct http_reply {
  int status = 0;
  std::string body;
};

class connection {
 public:
  explicit connection(endpoint ep);
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  const endpoint& where() const;

  // POSTs `body` (JSON) to `target` and reads the whole reply. The
  // connection is made when there is none, and kept for the next request.
  // Errors name the endpoint: a system error (ECONNREFUSED, ETIMEDOUT at
  // the deadline, ECONNRESET, EPROTO for a reply that is not HTTP, EMSGSIZE
  // past the limits), errc::cancelled. After an error the connection is
  // closed.
  result<http_reply> post(std::string_view target, std::string_view body, const sys::net_bounds& b);

  // Starts a streamed POST on a connection of its own (any open one is
  // closed first): sends it and reads the reply's head. A reply other than
  // 200 is read whole and returned (status and body); for 200, body is empty
  // and next_message() reads the stream.
  result<http_reply> start_stream(std::string_view target, std::string_view body, const sys::net_bounds& b);
  // The next message of the stream: one line of the body, without its
  // newline. nullopt when the deadline passed first (the stream stays
  // usable); errc::cancelled when a cancel descriptor fired (usable too);
  // ECONNRESET naming the endpoint when the stream ended; other errors as
  // post(), after which the connection is closed.
  result<std::optional<std::string>> next_message(const sys::net_bounds& b);

  void close();
  bool is_open() const;

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_HTTP_HPP
