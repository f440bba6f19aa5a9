// The seam's TCP calls, for the etcd client (src/etcd/): a connection made,
// written and read toward a deadline, each wait also ended by the caller's
// cancel descriptors. Declarations only: src/posix/net.cpp implements them.
#ifndef OFFLOAD_LOCK_SRC_OS_NET_HPP
#define OFFLOAD_LOCK_SRC_OS_NET_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offload_lock/error.hpp"
#include "os/files.hpp"

namespace offload_lock::detail::sys {

// When a network call must end: a monotonic deadline in ms (-1: none) and
// descriptors whose readability or hang-up abandons it (errc::cancelled).
struct net_bounds {
  std::int64_t until_ms = -1;
  std::vector<int> cancel_fds;
};

// A TCP connection to host:port (a name is resolved; every address it has
// is tried in turn), non-blocking and close-on-exec, with TCP_NODELAY (the
// client writes each request whole). Errors: the connect's errno
// (ECONNREFUSED, EHOSTUNREACH ...) with "connect HOST:PORT", ETIMEDOUT when
// the deadline passes, EHOSTUNREACH with "resolve HOST" when the name has no
// address, errc::cancelled.
result<fd> tcp_connect(const std::string& host, std::uint16_t port, const net_bounds& b);
// Writes all of `data`. Errors as above (EPIPE and ECONNRESET when the peer
// went away).
error tcp_send(int s, std::string_view data, const net_bounds& b, const std::string& shown);
// Reads what is there, at most `cap` bytes, waiting for at least one: the
// count, 0 when the peer closed the connection. Errors as above.
result<std::size_t> tcp_receive(int s, char* buf, std::size_t cap, const net_bounds& b, const std::string& shown);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_NET_HPP
