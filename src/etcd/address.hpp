// Where an etcd lock lives: `etcd://HOST:PORT[,HOST:PORT...]/NAME`, read into
// its endpoints and its name, and the keys the lock uses in etcd. Pure.
#ifndef OFFLOAD_LOCK_SRC_ETCD_ADDRESS_HPP
#define OFFLOAD_LOCK_SRC_ETCD_ADDRESS_HPP

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "offload_lock/error.hpp"

namespace offload_lock::detail::etcd {

// One member of the cluster, as the URL names it. `host` is a name, an IPv4
// address or an IPv6 address (written in brackets in the URL, kept here
// without them).
struct endpoint {
  std::string host;
  std::uint16_t port = 2379;
  // "HOST:PORT", "[::1]:2379": how messages name it.
  std::string text() const;
  bool operator==(const endpoint& o) const { return host == o.host && port == o.port; }
};

inline constexpr std::string_view scheme = "etcd://";
// The longest lock name (a GPU slot's suffix included).
inline constexpr std::size_t max_name = 200;

struct address {
  std::vector<endpoint> endpoints;  // at least one, at most max_endpoints, in the URL's order
  std::string name;                 // letters, digits, '.', '_', '-'
  // The URL again in one spelling: what the lock is known by (in messages,
  // OFFLOAD_LOCK_PATH, the passing down to a child).
  std::string url() const;
  // The keys of the lock (doc/etcd.md "Keys"): the holder's, and the
  // prefix under which each waiter keeps its entry.
  std::string holder_key() const;
  std::string queue_prefix() const;
  std::string lock_prefix() const;  // both of the above start with it
};

inline constexpr std::size_t max_endpoints = 16;

// Whether `path` is an etcd lock's URL (starts with "etcd://"); says
// nothing of whether the rest is valid.
bool is_etcd(std::string_view path);

// Reads an etcd lock's URL: errc::bad_input naming what is wrong (no
// endpoint, a bad port, a name with a character outside the set, too
// long, ...). A missing port is 2379, etcd's client port.
result<address> parse_address(std::string_view url);

// Reads "HOST:PORT[,HOST:PORT...]" (the part between "etcd://" and the
// name): errc::bad_input naming the endpoint that is wrong.
result<std::vector<endpoint>> parse_endpoints(std::string_view list);

// The root of every key offload-lock writes in etcd.
inline constexpr std::string_view key_root = "/offload-lock/";

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_ADDRESS_HPP
