// An etcd v3 client of our own, over the JSON gateway every etcd member
// serves on its client port (POST /v3/kv/range, /v3/kv/txn, /v3/lease/*,
// /v3/watch; keys and values base64, 64-bit numbers as strings). Only the
// calls the lock and the fleet view make.
//
// Fail-over: each call goes to the member that answered last, and on a
// failure that another member may not share (no connection, no answer in
// time, a member without a leader or out of the quorum) to the next one in
// the list, within the call's bounds. What a member sends is bounded
// (http.hpp) and checked: a reply that is not what etcd sends is an error
// (EPROTO), never a crash or a value taken on trust.
// Not thread-safe: one client per thread.
#ifndef OFFLOAD_LOCK_SRC_ETCD_CLIENT_HPP
#define OFFLOAD_LOCK_SRC_ETCD_CLIENT_HPP

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "etcd/address.hpp"
#include "etcd/http.hpp"
#include "offload_lock/error.hpp"
#include "os/net.hpp"

namespace offload_lock::detail::etcd {

// base64 (RFC 4648, with padding) as the gateway writes keys and values.
std::string base64_encode(std::string_view in);
// nullopt for anything that is not exactly that.
std::optional<std::string> base64_decode(std::string_view in);

struct key_value {
  std::string key, value;
  std::int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct range_reply {
  std::int64_t revision = 0;  // the store's revision at the read
  std::vector<key_value> kvs;
  std::int64_t count = 0;     // keys in the range (more than kvs when limited)
};

// One comparison of a transaction: the key's create or mod revision, or its
// lease, against a number (a key that does not exist has 0 for each). With
// `prefix`, every key starting with `key` must compare so (true when there
// is none).
struct compare {
  enum class field { create, mod, lease };
  enum class op { equal, not_equal, greater, less };
  std::string key;
  field what = field::create;
  op how = op::equal;
  std::int64_t number = 0;
  bool prefix = false;
};

// One operation of a transaction.
struct txn_op {
  enum class kind { put, del, range };
  kind k = kind::range;
  std::string key, value;
  std::int64_t lease = 0;
  bool prefix = false;  // range/del: every key starting with `key`
};

struct txn_reply {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<range_reply> ranges;  // the replies of the range operations, in order
};

struct lease_grant {
  std::int64_t id = 0;
  std::int64_t ttl_s = 0;  // what the member granted (etcd raises a TTL below its minimum)
};

struct watch_event {
  bool deleted = false;
  key_value kv;
};

// A call a member answered with an error ("etcdserver: requested lease
// not found", gRPC code 5) fails with EIO, its context naming the member
// and the message.
inline constexpr int grpc_not_found = 5;

// The [end) of every key starting with `prefix`.
std::string prefix_end(const std::string& prefix);

// A watch on one member: events on a key or a prefix from a revision on.
class watch_stream {
 public:
  // The next events: a batch, nullopt when the bounds' deadline passed
  // first (the watch goes on), errc::cancelled when a cancel descriptor
  // fired (it goes on too); an error when it ended (the member went away,
  // or etcd cancelled it: a compacted start revision is ENOENT, "compacted
  // at N"). After an error, make a new watch.
  result<std::optional<std::vector<watch_event>>> next(const sys::net_bounds& b);
  const endpoint& where() const { return conn_->where(); }
  explicit watch_stream(std::unique_ptr<connection> c) : conn_(std::move(c)) {}

 private:
  std::unique_ptr<connection> conn_;
};

class client {
 public:
  explicit client(std::vector<endpoint> endpoints);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  // Each call below blocks within `b` (its deadline covers every member
  // tried; each member is given its share of what is left, at most
  // per_member_ms) and returns
  // the member's answer or why none came: the last failure, its context
  // naming the member, or with several members "no etcd endpoint answered
  // (A: why; B: why)".
  result<range_reply> range(const std::string& key, bool prefix, const sys::net_bounds& b,
                            std::int64_t limit = 0);
  result<txn_reply> txn(const std::vector<compare>& cmp, const std::vector<txn_op>& then,
                        const std::vector<txn_op>& otherwise, const sys::net_bounds& b);
  result<lease_grant> grant(std::int64_t ttl_s, const sys::net_bounds& b);
  // The lease's TTL after the renewal; 0 when etcd has no such lease (it
  // expired, or was revoked).
  result<std::int64_t> keep_alive(std::int64_t id, const sys::net_bounds& b);
  // What etcd's leader says a lease has left, in whole seconds cut toward
  // zero (-1: no such lease), and the TTL it was granted.
  struct lease_left {
    std::int64_t remaining_s = 0, granted_s = 0;
  };
  result<lease_left> time_to_live(std::int64_t id, const sys::net_bounds& b);
  // A lease that does not exist any more is no error.
  error revoke(std::int64_t id, const sys::net_bounds& b);
  // A watch on `key` (with `prefix`, every key under it) from revision
  // `from` on, on the first member that accepts it.
  result<std::unique_ptr<watch_stream>> watch(const std::string& key, bool prefix, std::int64_t from,
                                              const sys::net_bounds& b);

  // What the member the call reached says of itself (its version, the
  // leader it follows: 0 when it has none).
  struct member_status {
    endpoint where;
    std::string version;
    std::uint64_t leader = 0, member = 0, raft_term = 0;
  };
  result<member_status> status(const sys::net_bounds& b);

  // The member the next call goes to first.
  const endpoint& current() const;
  const std::vector<endpoint>& endpoints() const { return eps_; }
  // How long one member may take over one call (the rest of the deadline
  // goes to the next member).
  std::int64_t per_member_ms = 2000;

 private:
  template <class F>
  auto on_some_member(const sys::net_bounds& b, F fn) -> decltype(fn(std::declval<connection&>(), b));
  result<std::string> call(const std::string& target, const std::string& body, const sys::net_bounds& b);

  std::vector<endpoint> eps_;
  std::vector<std::unique_ptr<connection>> conns_;
  std::size_t current_ = 0;
  int last_code_ = -1;  // the gRPC code of the last call's error answer; -1: none
};

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_CLIENT_HPP
