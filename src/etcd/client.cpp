// The etcd client over the JSON gateway (client.hpp).
#include "etcd/client.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "os/clock.hpp"

namespace offload_lock::detail::etcd {

using json = nlohmann::json;

namespace {

constexpr char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::error_code eio() { return std::make_error_code(std::errc::io_error); }
std::error_code eproto() { return std::make_error_code(std::errc::protocol_error); }

// What a member sent that etcd never sends.
error malformed(const endpoint& ep, const std::string& what) {
  return error(eproto(), "etcd " + ep.text() + " sent a malformed reply (" + what + ")");
}

// A 64-bit number as the gateway writes it (a string of digits), or as a
// JSON number; absent is 0 (the gateway leaves out zero values). Signed for
// revisions and leases, unsigned for member and cluster ids (random, often
// above INT64_MAX); one out of its type's range is malformed.
template <class T>
bool number_at(const json& j, const char* name, T& out) {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>);
  out = 0;
  if (!j.is_object()) return false;
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (it->is_number_integer()) {
    if constexpr (std::is_signed_v<T>) {
      if (it->is_number_unsigned() && it->get<std::uint64_t>() > std::uint64_t(INT64_MAX)) return false;
    } else if (!it->is_number_unsigned()) {
      return false;
    }
    out = it->get<T>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() || s.size() > 20) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool bytes_at(const json& j, const char* name, std::string& out) {
  out.clear();
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  auto d = base64_decode(it->get_ref<const std::string&>());
  if (!d) return false;
  out = std::move(*d);
  return true;
}

bool parse_kv(const json& j, key_value& kv) {
  return j.is_object() && bytes_at(j, "key", kv.key) && bytes_at(j, "value", kv.value) &&
         number_at(j, "create_revision", kv.create_revision) && number_at(j, "mod_revision", kv.mod_revision) &&
         number_at(j, "version", kv.version) && number_at(j, "lease", kv.lease);
}

bool parse_range(const json& j, range_reply& r) {
  if (!j.is_object()) return false;
  auto h = j.find("header");
  if (h != j.end() && !number_at(*h, "revision", r.revision)) return false;
  if (!number_at(j, "count", r.count)) return false;
  auto kvs = j.find("kvs");
  if (kvs == j.end() || kvs->is_null()) return true;
  if (!kvs->is_array()) return false;
  for (const auto& e : *kvs) {
    key_value kv;
    if (!parse_kv(e, kv)) return false;
    r.kvs.push_back(std::move(kv));
  }
  return true;
}

std::string to_string_i64(std::int64_t v) { return std::to_string(v); }

json op_json(const txn_op& o) {
  json j;
  switch (o.k) {
    case txn_op::kind::put: {
      json p = {{"key", base64_encode(o.key)}, {"value", base64_encode(o.value)}};
      if (o.lease) p["lease"] = to_string_i64(o.lease);
      j["request_put"] = std::move(p);
      break;
    }
    case txn_op::kind::del: {
      json d = {{"key", base64_encode(o.key)}};
      if (o.prefix) d["range_end"] = base64_encode(prefix_end(o.key));
      j["request_delete_range"] = std::move(d);
      break;
    }
    case txn_op::kind::range: {
      json r = {{"key", base64_encode(o.key)}};
      if (o.prefix) r["range_end"] = base64_encode(prefix_end(o.key));
      j["request_range"] = std::move(r);
      break;
    }
  }
  return j;
}

json compare_json(const compare& c) {
  json j = {{"key", base64_encode(c.key)}};
  if (c.prefix) j["range_end"] = base64_encode(prefix_end(c.key));
  switch (c.how) {
    case compare::op::equal: j["result"] = "EQUAL"; break;
    case compare::op::not_equal: j["result"] = "NOT_EQUAL"; break;
    case compare::op::greater: j["result"] = "GREATER"; break;
    case compare::op::less: j["result"] = "LESS"; break;
  }
  switch (c.what) {
    case compare::field::create:
      j["target"] = "CREATE";
      j["create_revision"] = to_string_i64(c.number);
      break;
    case compare::field::mod:
      j["target"] = "MOD";
      j["mod_revision"] = to_string_i64(c.number);
      break;
    case compare::field::lease:
      j["target"] = "LEASE";
      j["lease"] = to_string_i64(c.number);
      break;
  }
  return j;
}

// The gateway's error object {"error":..., "message":..., "code":N} (or a
// stream's {"error":{"grpc_code":N,"message":...}}): code and message.
std::pair<int, std::string> gateway_error(const json& j) {
  const json* e = &j;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) e = &j["error"];
  int code = -1;
  std::string message;
  if (e->is_object()) {
    for (const char* name : {"code", "grpc_code"})
      if (e->contains(name) && (*e)[name].is_number_integer()) code = (*e)[name].get<int>();
    if (e->contains("message") && (*e)["message"].is_string()) message = (*e)["message"].get<std::string>();
  }
  return {code, message.substr(0, 300)};
}

// Failures another member may not share: it has no leader, is cut off
// from the quorum, or took too long (gRPC UNAVAILABLE, DEADLINE_EXCEEDED,
// and the HTTP 5xx of anything else in the way).
bool worth_another_member(int status, int code) {
  if (code == 14 || code == 4) return true;
  return status >= 500 && code < 0;
}

}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += b64[(v >> 6) & 63];
    out += b64[v & 63];
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += b64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<std::size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return std::nullopt;  // data after padding
      v[k] = b64_value(c);
      if (v[k] < 0) return std::nullopt;
    }
    const unsigned x = (static_cast<unsigned>(v[0]) << 18) | (static_cast<unsigned>(v[1]) << 12) |
                       (static_cast<unsigned>(v[2]) << 6) | static_cast<unsigned>(v[3]);
    out += static_cast<char>((x >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((x >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(x & 0xff);
  }
  return out;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

client::client(std::vector<endpoint> endpoints) : eps_(std::move(endpoints)) {
  for (const auto& ep : eps_) conns_.push_back(std::make_unique<connection>(ep));
}
client::~client() = default;

const endpoint& client::current() const { return eps_[current_]; }

template <class F>
auto client::on_some_member(const sys::net_bounds& b, F fn) -> decltype(fn(std::declval<connection&>(), b)) {
  std::string failures;
  error last(std::make_error_code(std::errc::host_unreachable), "no etcd endpoint");
  for (std::size_t n = 0; n < eps_.size(); ++n) {
    const std::size_t k = (current_ + n) % eps_.size();
    sys::net_bounds mine = b;
    const std::int64_t now = sys::monotonic_ms();
    if (b.until_ms >= 0 && now >= b.until_ms && n > 0) break;
    // Each member gets its share of what is left (at most per_member_ms),
    // so one that does not answer leaves time to ask the others.
    std::int64_t share = per_member_ms;
    if (b.until_ms >= 0)
      share = std::min(share, std::max<std::int64_t>(1, (b.until_ms - now) / static_cast<std::int64_t>(eps_.size() - n)));
    mine.until_ms = now + share;
    auto r = fn(*conns_[k], mine);
    if (r) {
      current_ = k;
      return r;
    }
    const error& e = r.error();
    // Cancelled is the caller's; a member's own answer (not found, a bad
    // request) would be the same from any member.
    if (e == errc::cancelled || (!e.is_system() && e.code() != std::errc::timed_out)) return r;
    if (e.code() == std::errc::io_error) return r;
    last = e;
    failures += (failures.empty() ? "" : "; ") + e.message();
  }
  current_ = (current_ + 1) % eps_.size();  // the next call starts elsewhere
  if (eps_.size() == 1) return last;
  return error(last.code(), "no etcd endpoint answered (" + failures + ")");
}

result<std::string> client::call(const std::string& target, const std::string& body, const sys::net_bounds& b) {
  last_code_ = -1;
  return on_some_member(b, [&](connection& c, const sys::net_bounds& mine) -> result<std::string> {
    auto r = c.post(target, body, mine);
    if (!r) return r.error();
    if (r->status == 200) return std::move(r->body);
    json j = json::parse(r->body, nullptr, false);
    const auto [code, message] = gateway_error(j);
    const std::string what = "etcd " + c.where().text() + ": " +
                             (message.empty() ? "HTTP " + std::to_string(r->status) : message);
    if (worth_another_member(r->status, code)) {
      c.close();
      return error(std::make_error_code(std::errc::host_unreachable), what);
    }
    // A member's own answer: EIO, its gRPC code kept for the few callers
    // that tell codes apart.
    last_code_ = code;
    return error(eio(), what);
  });
}


result<range_reply> client::range(const std::string& key, bool prefix, const sys::net_bounds& b, std::int64_t limit) {
  json req = {{"key", base64_encode(key)}};
  if (prefix) req["range_end"] = base64_encode(prefix_end(key));
  if (limit > 0) req["limit"] = to_string_i64(limit);
  auto body = call("/v3/kv/range", req.dump(), b);
  if (!body) return body.error();
  json j = json::parse(*body, nullptr, false);
  range_reply r;
  if (!parse_range(j, r)) return malformed(current(), "range");
  return r;
}

result<txn_reply> client::txn(const std::vector<compare>& cmp, const std::vector<txn_op>& then,
                              const std::vector<txn_op>& otherwise, const sys::net_bounds& b) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : cmp) req["compare"].push_back(compare_json(c));
  for (const auto& o : then) req["success"].push_back(op_json(o));
  for (const auto& o : otherwise) req["failure"].push_back(op_json(o));
  auto body = call("/v3/kv/txn", req.dump(), b);
  if (!body) return body.error();
  json j = json::parse(*body, nullptr, false);
  txn_reply r;
  if (!j.is_object()) return malformed(current(), "txn");
  if (j.contains("succeeded")) {
    if (!j["succeeded"].is_boolean()) return malformed(current(), "txn succeeded");
    r.succeeded = j["succeeded"].get<bool>();
  }
  if (j.contains("header") && !number_at(j["header"], "revision", r.revision)) return malformed(current(), "txn header");
  if (j.contains("responses")) {
    if (!j["responses"].is_array()) return malformed(current(), "txn responses");
    for (const auto& op : j["responses"]) {
      if (!op.is_object()) return malformed(current(), "txn response");
      if (auto it = op.find("response_range"); it != op.end()) {
        range_reply rr;
        if (!parse_range(*it, rr)) return malformed(current(), "txn range");
        r.ranges.push_back(std::move(rr));
      }
    }
  }
  return r;
}

result<lease_grant> client::grant(std::int64_t ttl_s, const sys::net_bounds& b) {
  json req = {{"TTL", to_string_i64(ttl_s)}};
  auto body = call("/v3/lease/grant", req.dump(), b);
  if (!body) return body.error();
  json j = json::parse(*body, nullptr, false);
  lease_grant g;
  if (!number_at(j, "ID", g.id) || !number_at(j, "TTL", g.ttl_s) || g.id == 0 || g.ttl_s <= 0) {
    if (j.is_object() && j.contains("error") && j["error"].is_string())
      return error(eio(), "etcd " + current().text() + ": " + j["error"].get<std::string>().substr(0, 300));
    return malformed(current(), "lease grant");
  }
  return g;
}

result<std::int64_t> client::keep_alive(std::int64_t id, const sys::net_bounds& b) {
  json req = {{"ID", to_string_i64(id)}};
  auto body = call("/v3/lease/keepalive", req.dump(), b);
  if (!body) return body.error();
  // A stream of one message: {"result":{..., "TTL":"N"}} ("TTL" left out
  // when the lease is gone).
  const auto nl = body->find('\n');
  json j = json::parse(body->substr(0, nl), nullptr, false);
  if (!j.is_object() || !j.contains("result")) {
    const auto [code, message] = gateway_error(j);
    if (code >= 0) return error(std::make_error_code(std::errc::host_unreachable),
                                "etcd " + current().text() + ": " + message);
    return malformed(current(), "lease keep-alive");
  }
  std::int64_t ttl = 0;
  if (!number_at(j["result"], "TTL", ttl)) return malformed(current(), "lease keep-alive TTL");
  return std::max<std::int64_t>(0, ttl);
}

result<client::lease_left> client::time_to_live(std::int64_t id, const sys::net_bounds& b) {
  json req = {{"ID", to_string_i64(id)}};
  auto body = call("/v3/lease/timetolive", req.dump(), b);
  if (!body) return body.error();
  // {"ID":..., "TTL":"N", "grantedTTL":"G"}: a 0 is left out, and a lease
  // that is gone has "TTL":"-1".
  json j = json::parse(*body, nullptr, false);
  lease_left l;
  if (!number_at(j, "TTL", l.remaining_s) || !number_at(j, "grantedTTL", l.granted_s) || l.remaining_s < -1 ||
      l.granted_s < 0 || (l.remaining_s >= 0 && l.granted_s == 0))
    return malformed(current(), "lease time-to-live");
  return l;
}

error client::revoke(std::int64_t id, const sys::net_bounds& b) {
  json req = {{"ID", to_string_i64(id)}};
  auto body = call("/v3/lease/revoke", req.dump(), b);
  if (!body && last_code_ == grpc_not_found) return {};
  return body ? error{} : body.error();
}

result<client::member_status> client::status(const sys::net_bounds& b) {
  auto body = call("/v3/maintenance/status", "{}", b);
  if (!body) return body.error();
  json j = json::parse(*body, nullptr, false);
  member_status s;
  s.where = current();
  if (!j.is_object() || !number_at(j, "leader", s.leader) || !j.contains("header") ||
      !number_at(j["header"], "member_id", s.member) || !number_at(j["header"], "raft_term", s.raft_term))
    return malformed(current(), "status");
  if (j.contains("version") && j["version"].is_string()) s.version = j["version"].get<std::string>().substr(0, 40);
  return s;
}

result<std::unique_ptr<watch_stream>> client::watch(const std::string& key, bool prefix, std::int64_t from,
                                                    const sys::net_bounds& b) {
  json create = {{"key", base64_encode(key)}};
  if (prefix) create["range_end"] = base64_encode(prefix_end(key));
  if (from > 0) create["start_revision"] = to_string_i64(from);
  const std::string body = json{{"create_request", create}}.dump();
  return on_some_member(b, [&](connection&, const sys::net_bounds& mine) -> result<std::unique_ptr<watch_stream>> {
    // A connection of its own: the member's other connection stays free
    // for the calls made while the watch is open.
    auto c = std::make_unique<connection>(eps_[current_]);
    auto head = c->start_stream("/v3/watch", body, mine);
    if (!head) return head.error();
    if (head->status != 200) {
      const auto [code, message] = gateway_error(json::parse(head->body, nullptr, false));
      const std::string what = "etcd " + c->where().text() + ": " + (message.empty() ? "HTTP " + std::to_string(head->status) : message);
      if (worth_another_member(head->status, code)) return error(std::make_error_code(std::errc::host_unreachable), what);
      return error(eio(), what);
    }
    // The first message says the watch was made.
    auto first = c->next_message(mine);
    if (!first) return first.error();
    if (!*first) return error(std::make_error_code(std::errc::timed_out), "watch on " + c->where().text());
    json j = json::parse(**first, nullptr, false);
    if (!j.is_object() || !j.contains("result") || !j["result"].is_object())
      return malformed(c->where(), "watch creation");
    const json& r = j["result"];
    if (r.value("canceled", false)) {
      std::int64_t compacted = 0;
      (void)number_at(r, "compact_revision", compacted);
      return error(std::make_error_code(std::errc::no_such_file_or_directory),
                   "etcd " + c->where().text() + " cancelled the watch (compacted at " + std::to_string(compacted) + ")");
    }
    if (!r.value("created", false)) return malformed(c->where(), "watch creation");
    return std::make_unique<watch_stream>(std::move(c));
  });
}

result<std::optional<std::vector<watch_event>>> watch_stream::next(const sys::net_bounds& b) {
  for (;;) {
    auto m = conn_->next_message(b);
    if (!m) return m.error();
    if (!*m) return std::optional<std::vector<watch_event>>();
    json j = json::parse(**m, nullptr, false);
    if (!j.is_object() || !j.contains("result") || !j["result"].is_object()) {
      const auto [code, message] = gateway_error(j);
      conn_->close();
      if (code >= 0) return error(std::make_error_code(std::errc::host_unreachable), "etcd " + where().text() + ": " + message);
      return malformed(where(), "watch message");
    }
    const json& r = j["result"];
    if (r.value("canceled", false)) {
      std::int64_t compacted = 0;
      (void)number_at(r, "compact_revision", compacted);
      conn_->close();
      return error(std::make_error_code(std::errc::no_such_file_or_directory),
                   "etcd " + where().text() + " cancelled the watch (compacted at " + std::to_string(compacted) + ")");
    }
    auto evs = r.find("events");
    if (evs == r.end() || evs->is_null()) continue;  // a progress notice
    if (!evs->is_array()) return malformed(where(), "watch events");
    std::vector<watch_event> out;
    for (const auto& e : *evs) {
      watch_event we;
      if (!e.is_object() || !e.contains("kv") || !parse_kv(e["kv"], we.kv)) return malformed(where(), "watch event");
      if (e.contains("type")) {
        if (!e["type"].is_string()) return malformed(where(), "watch event type");
        we.deleted = e["type"].get<std::string>() == "DELETE";
      }
      out.push_back(std::move(we));
    }
    return std::optional<std::vector<watch_event>>(std::move(out));
  }
}

}  // namespace offload_lock::detail::etcd
