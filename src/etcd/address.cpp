// etcd lock URLs and the keys of a lock (address.hpp).
#include "etcd/address.hpp"

#include <charconv>

#include "offload_lock/etcd.hpp"

namespace offload_lock::detail::etcd {

namespace {

error bad(const std::string& what) { return error(errc::bad_input, what); }

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

// A host name or IPv4 address: letters, digits, '.', '-'; an IPv6 address
// (bracketed in the URL): hex digits, ':' and '.'.
bool host_ok(std::string_view h, bool v6) {
  if (h.empty() || h.size() > 253) return false;
  for (char c : h) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (v6 ? !(alnum || c == ':' || c == '.') : !(alnum || c == '.' || c == '-')) return false;
  }
  return true;
}

// Shown in messages as given, cut short: a URL comes from a flag or the
// environment, and may be anything.
std::string shown(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return s.size() > 80 ? out + "..." : out;
}

result<endpoint> parse_endpoint(std::string_view e) {
  endpoint out;
  std::string_view host, port;
  if (!e.empty() && e.front() == '[') {
    const auto close = e.find(']');
    if (close == std::string_view::npos) return bad("etcd endpoint '" + shown(e) + "': no closing ']'");
    host = e.substr(1, close - 1);
    std::string_view rest = e.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return bad("etcd endpoint '" + shown(e) + "': junk after ']'");
    if (!rest.empty()) port = rest.substr(1);
    if (!host_ok(host, true)) return bad("etcd endpoint '" + shown(e) + "': not an IPv6 address");
  } else {
    const auto colon = e.rfind(':');
    host = colon == std::string_view::npos ? e : e.substr(0, colon);
    if (colon != std::string_view::npos) port = e.substr(colon + 1);
    if (!host_ok(host, false)) return bad("etcd endpoint '" + shown(e) + "': not a host name or address");
  }
  out.host = std::string(host);
  if (e.find(':') != std::string_view::npos && port.empty() && e.front() != '[')
    return bad("etcd endpoint '" + shown(e) + "': empty port");
  if (!port.empty()) {
    unsigned v = 0;
    const auto r = std::from_chars(port.data(), port.data() + port.size(), v);
    if (r.ec != std::errc() || r.ptr != port.data() + port.size() || v == 0 || v > 65535 || port.size() > 5)
      return bad("etcd endpoint '" + shown(e) + "': port '" + shown(port) + "' (1 to 65535)");
    out.port = static_cast<std::uint16_t>(v);
  }
  return out;
}

}  // namespace

std::string endpoint::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string address::url() const {
  std::string s(scheme);
  for (std::size_t k = 0; k < endpoints.size(); ++k) s += (k ? "," : "") + endpoints[k].text();
  return s + "/" + name;
}

std::string address::lock_prefix() const { return std::string(key_root) + "lock/" + name + "/"; }
std::string address::holder_key() const { return lock_prefix() + "holder"; }
std::string address::queue_prefix() const { return lock_prefix() + "queue/"; }

bool is_etcd(std::string_view path) { return path.substr(0, scheme.size()) == scheme; }

result<std::vector<endpoint>> parse_endpoints(std::string_view list) {
  if (list.empty()) return bad("no etcd endpoint given (etcd://HOST:PORT[,HOST:PORT...]/NAME)");
  std::vector<endpoint> out;
  std::size_t i = 0;
  for (;;) {
    const auto comma = list.find(',', i);
    const std::string_view e = list.substr(i, comma == std::string_view::npos ? std::string_view::npos : comma - i);
    if (e.empty()) return bad("etcd endpoint list '" + shown(list) + "' has an empty entry");
    auto ep = parse_endpoint(e);
    if (!ep) return ep.error();
    if (out.size() == max_endpoints)
      return bad("etcd endpoint list '" + shown(list) + "' has more than " + std::to_string(max_endpoints) +
                 " endpoints");
    out.push_back(std::move(*ep));
    if (comma == std::string_view::npos) break;
    i = comma + 1;
  }
  return out;
}

result<address> parse_address(std::string_view url) {
  if (!is_etcd(url)) return bad("'" + shown(url) + "' is not an etcd lock (etcd://HOST:PORT[,HOST:PORT...]/NAME)");
  std::string_view rest = url.substr(scheme.size());
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos)
    return bad("etcd lock '" + shown(url) + "' has no name (etcd://HOST:PORT[,HOST:PORT...]/NAME)");
  auto eps = parse_endpoints(rest.substr(0, slash));
  if (!eps) return eps.error();
  address a;
  a.endpoints = std::move(*eps);
  const std::string_view name = rest.substr(slash + 1);
  if (name.empty()) return bad("etcd lock '" + shown(url) + "' has an empty name");
  if (name.size() > max_name)
    return bad("etcd lock name of " + std::to_string(name.size()) + " characters (at most " +
               std::to_string(max_name) + ")");
  for (char c : name)
    if (!name_char(c))
      return bad("etcd lock name '" + shown(name) + "': only letters, digits, '.', '_' and '-' may name a lock");
  if (name == "." || name == "..") return bad("etcd lock name '" + std::string(name) + "'");
  a.name = std::string(name);
  return a;
}

}  // namespace offload_lock::detail::etcd

namespace offload_lock {

bool is_etcd_lock(std::string_view path) noexcept { return detail::etcd::is_etcd(path); }

}  // namespace offload_lock
