// The looks at an etcd lock that take nothing (look.hpp).
#include "etcd/look.hpp"

#include "etcd/client.hpp"
#include "etcd/lock.hpp"
#include "etcd/view.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"

namespace offload_lock::detail::etcd {

namespace {

sys::net_bounds call_bounds(const client& c, const std::vector<int>& cancel = {}) {
  return {sys::monotonic_ms() + per_member_ms * static_cast<std::int64_t>(c.endpoints().size()), cancel};
}

}  // namespace

info inspect(const std::string& url) {
  info i;
  i.path = url;
  auto a = parse_address(url);
  if (!a) {
    i.problem = a.error().message();
    return i;
  }
  i.path = a->url();
  client c(a->endpoints);
  auto v = look(c, *a, call_bounds(c));
  if (!v) {
    i.problem = a->url() + ": " + v.error().message();
    return i;
  }
  return to_info(*a, *v, sys::now_ms());
}

std::vector<waiter> waiters(const std::string& url) {
  auto a = parse_address(url);
  if (!a) return {};
  client c(a->endpoints);
  auto v = look(c, *a, call_bounds(c));
  if (!v) return {};
  const std::int64_t now = sys::now_ms();
  return to_waiters(*v, to_info(*a, *v, now), now);
}

info wait_free(const std::string& url, milliseconds wait) {
  auto a = parse_address(url);
  if (!a) return inspect(url);
  const std::int64_t until = wait == wait_forever ? -1 : sys::monotonic_ms() + std::max<std::int64_t>(0, wait.count());
  client c(a->endpoints);
  for (;;) {
    auto v = look(c, *a, call_bounds(c));
    if (!v) return inspect(url);
    info i = to_info(*a, *v, sys::now_ms());
    if (!i.held || (until >= 0 && sys::monotonic_ms() >= until)) return i;
    auto w = c.watch(a->holder_key(), false, v->revision + 1, call_bounds(c));
    if (!w) {
      if (w.error().code() == std::errc::no_such_file_or_directory) continue;  // compacted: look again
      i.problem = a->url() + ": " + w.error().message();
      i.held = false;
      return i;
    }
    for (bool changed = false; !changed;) {
      const std::int64_t left = until < 0 ? 60'000 : until - sys::monotonic_ms();
      if (left <= 0) break;
      auto ev = (*w)->next({sys::monotonic_ms() + std::min<std::int64_t>(left, 60'000), {}});
      if (!ev) break;          // the watch ended: look again (and watch again)
      if (*ev) changed = true;  // the holder key changed
    }
  }
}

result<release_outcome> release_by(const std::string& url, const release_request& req) {
  auto a = parse_address(url);
  if (!a) return a.error();
  client c(a->endpoints);
  auto v = look(c, *a, call_bounds(c));
  if (!v) return error(v.error().code(), a->url() + ": " + v.error().context());
  release_outcome out;
  out.before = to_info(*a, *v, sys::now_ms());
  if (!v->holder) {
    out.status = release_status::already_free;
    return out;
  }
  const record& h = v->holder->rec;
  // A pid names a process on one host only: this one.
  const bool match = req.force || (!req.token.empty() && h.token == req.token) ||
                     (req.token.empty() && req.pid > 0 && h.pid == req.pid && h.host == sys::host_name());
  if (!match) {
    out.status = release_status::not_owner;
    return out;
  }
  auto t = c.txn({{a->holder_key(), compare::field::create, compare::op::equal, v->holder->kv.create_revision}},
                 {{txn_op::kind::del, a->holder_key(), "", 0, false}}, {}, call_bounds(c));
  if (!t) return error(t.error().code(), a->url() + ": " + t.error().context());
  if (!t->succeeded) {
    // Changed since the look: whoever holds it now was not asked about.
    out.status = release_status::not_owner;
    out.before = inspect(url);
    if (!out.before.held) out.status = release_status::already_free;
    return out;
  }
  if (v->holder->kv.lease) (void)c.revoke(v->holder->kv.lease, call_bounds(c));
  out.status = release_status::released;
  return out;
}

std::vector<health_line> health(const std::string& url) {
  std::vector<health_line> out;
  auto a = parse_address(url);
  if (!a) return {{"etcd", false, a.error().message()}};
  out.push_back({"etcd", true,
                 a->url() + ": lock '" + a->name + "' on " + std::to_string(a->endpoints.size()) + " endpoint" +
                     (a->endpoints.size() == 1 ? "" : "s") + " (keys under " + a->lock_prefix() + ")"});
  int reached = 0;
  for (const auto& ep : a->endpoints) {
    client one({ep});
    auto s = one.status({sys::monotonic_ms() + per_member_ms, {}});
    if (!s) {
      out.push_back({"member", false, ep.text() + " cannot be reached: " + s.error().message()});
      continue;
    }
    ++reached;
    if (s->leader == 0)
      out.push_back({"member", false, ep.text() + ": etcd " + s->version + " without a leader (no quorum): "
                                       "no acquisition or renewal can be made through it"});
    else
      out.push_back({"member", true, ep.text() + ": etcd " + s->version + (s->leader == s->member ? ", the leader" : ", follows a leader")});
  }
  if (reached == 0) {
    out.push_back({"lock", false, "not looked at: no endpoint answered; acquisitions fail at once (exit 4)"});
    return out;
  }
  client c(a->endpoints);
  auto v = look(c, *a, call_bounds(c));
  if (!v) {
    out.push_back({"lock", false, v.error().message()});
    return out;
  }
  const info i = to_info(*a, *v, sys::now_ms());
  std::string state = i.held ? "held by " + (i.label.empty() ? std::string("an unnamed holder") : i.label) +
                                   (i.pid ? " (pid " + std::to_string(*i.pid) + (i.host.empty() ? "" : ", host " + i.host) + ")" : "") +
                                   ", fence " + std::to_string(i.fence)
                         : "free";
  state += ", " + std::to_string(v->queue.size()) + " waiting";
  const bool unreadable = v->holder && !v->holder->rec.problem.empty();
  out.push_back({"lock", !unreadable, state + (unreadable ? " (the holder key holds an unreadable record: " +
                                                                v->holder->rec.problem + ")" : "")});
  if (v->foreign)
    out.push_back({"keys", false, std::to_string(v->foreign) + " key(s) under " + a->queue_prefix() +
                                      " are no waiter's entry (no lease, or not named by their lease): ignored"});
  return out;
}

std::int64_t current_revision(const std::string& url) {
  auto a = parse_address(url);
  if (!a) return 0;
  client c(a->endpoints);
  auto r = c.range(a->holder_key(), false, call_bounds(c));
  return r ? r->revision : 0;
}

std::int64_t wait_change(const std::string& url, std::int64_t since, milliseconds wait,
                         const std::vector<int>& cancel_fds) {
  auto a = parse_address(url);
  if (!a) return 0;
  client c(a->endpoints);
  const std::int64_t until = wait == wait_forever ? -1 : sys::monotonic_ms() + std::max<std::int64_t>(0, wait.count());
  if (since <= 0) {
    auto v = look(c, *a, call_bounds(c, cancel_fds));
    if (!v) return 0;
    since = v->revision;
  }
  auto w = c.watch(a->lock_prefix(), true, since + 1, call_bounds(c, cancel_fds));
  if (!w) {
    if (w.error().code() == std::errc::no_such_file_or_directory) return since + 1;  // compacted: changed
    // Cannot watch: wait out a little, so a caller that loops does not spin.
    (void)sys::wait_any(cancel_fds, until < 0 ? retry_ms : std::min<std::int64_t>(retry_ms, until - sys::monotonic_ms()));
    return 0;
  }
  for (;;) {
    const std::int64_t left = until < 0 ? 60'000 : until - sys::monotonic_ms();
    if (left <= 0) return since;
    auto ev = (*w)->next({sys::monotonic_ms() + std::min<std::int64_t>(left, 60'000), cancel_fds});
    if (!ev) return ev.error() == errc::cancelled ? since : 0;
    if (*ev && !(*ev)->empty()) {
      std::int64_t rev = since;
      for (const auto& e : **ev) rev = std::max(rev, e.kv.mod_revision);
      return rev;
    }
  }
}

}  // namespace offload_lock::detail::etcd
