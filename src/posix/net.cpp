// TCP for the etcd client (os/net.hpp): non-blocking sockets waited on with
// poll() beside the caller's cancel descriptors, so that no network call
// outlives its deadline or a signal that abandons it.
//
// The socket calls are made directly, not through the syscall table: their
// faults (a refused connection, a peer that stops answering, a reset) are
// produced in the tests by real etcd processes that are killed, stopped
// and restarted (tests/etcd/), which the table could only imitate.
#include "os/net.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "os/clock.hpp"
#include "posix/common.hpp"

namespace offload_lock::detail::sys {

namespace {

// Waits until `s` is ready for `events`, a cancel descriptor is, or the
// deadline passes: 0 ready, else the error.
error wait_socket(int s, short events, const net_bounds& b, const std::string& shown) {
  std::vector<struct pollfd> p;
  p.push_back({s, events, 0});
  for (int f : b.cancel_fds)
    if (f >= 0) p.push_back({f, POLLIN, 0});
  for (bool first = true;; first = false) {
    for (auto& x : p) x.revents = 0;
    const int r = poll_toward(p, b.until_ms, first);
    if (r == 0) return error(errno_code(std::errc::timed_out), shown);
    if (r < 0) continue;
    for (std::size_t k = 1; k < p.size(); ++k)
      if (p[k].revents) return error(errc::cancelled, shown);
    if (p[0].revents) return {};
  }
}

}  // namespace

result<fd> tcp_connect(const std::string& host, std::uint16_t port, const net_bounds& b) {
  const std::string shown = host + ":" + std::to_string(port);
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* found = nullptr;
  // A bracketed IPv6 address reaches here without its brackets.
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (gai != 0 || !found)
    return error(errno_code(std::errc::host_unreachable),
                 "resolve " + host + (gai != 0 ? std::string(" (") + ::gai_strerror(gai) + ")" : ""));
  error last(errno_code(std::errc::host_unreachable), "connect " + shown);
  for (struct addrinfo* a = found; a; a = a->ai_next) {
    const int s = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) {
      last = sys_error(errno, "socket for", shown);
      continue;
    }
    fd owned(s);
    const int one = 1;
    (void)::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(s, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        last = sys_error(errno, "connect", shown);
        continue;
      }
      if (error e = wait_socket(s, POLLOUT, b, "connect " + shown)) {
        ::freeaddrinfo(found);
        return e;  // the deadline or a cancel is the caller's, whatever address comes next
      }
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      if (err != 0) {
        last = sys_error(err, "connect", shown);
        continue;
      }
    }
    ::freeaddrinfo(found);
    return owned;
  }
  ::freeaddrinfo(found);
  return last;
}

error tcp_send(int s, std::string_view data, const net_bounds& b, const std::string& shown) {
  while (!data.empty()) {
    // MSG_NOSIGNAL: a peer gone is EPIPE here, never a SIGPIPE that would
    // kill a host process that did not ask for it.
    const ssize_t n = ::send(s, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return sys_error(errno, "send to", shown);
    if (error e = wait_socket(s, POLLOUT, b, "send to " + shown)) return e;
  }
  return {};
}

result<std::size_t> tcp_receive(int s, char* buf, std::size_t cap, const net_bounds& b, const std::string& shown) {
  for (;;) {
    const ssize_t n = ::recv(s, buf, cap, 0);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return sys_error(errno, "receive from", shown);
    if (error e = wait_socket(s, POLLIN, b, "receive from " + shown)) return e;
  }
}

}  // namespace offload_lock::detail::sys
