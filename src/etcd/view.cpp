// One look at an etcd lock (view.hpp).
#include "etcd/view.hpp"

#include <algorithm>
#include <cstdio>

namespace offload_lock::detail::etcd {

std::string lease_name(std::int64_t lease) {
  char buf[17];
  (void)std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(lease));
  return buf;
}

lock_view read_view(const address& a, const range_reply& r) {
  lock_view v;
  v.revision = r.revision;
  const std::string holder = a.holder_key(), queue = a.queue_prefix();
  for (const auto& kv : r.kvs) {
    if (kv.key == holder) {
      v.holder = entry{kv, decode(kv.value)};
    } else if (kv.key.compare(0, queue.size(), queue) == 0) {
      if (kv.lease == 0 || kv.key.substr(queue.size()) != lease_name(kv.lease)) {
        ++v.foreign;
        continue;
      }
      v.queue.push_back(entry{kv, decode(kv.value)});
    }
  }
  std::stable_sort(v.queue.begin(), v.queue.end(), [](const entry& x, const entry& y) {
    if (x.rec.priority != y.rec.priority) return x.rec.priority > y.rec.priority;
    return x.kv.create_revision < y.kv.create_revision;
  });
  return v;
}

result<lock_view> look(client& c, const address& a, const sys::net_bounds& b) {
  auto r = c.range(a.lock_prefix(), true, b);
  if (!r) return r.error();
  return read_view(a, *r);
}

info to_info(const address& a, const lock_view& v, std::int64_t now_ms) {
  info i;
  i.path = a.url();
  if (!v.holder) return i;
  const record& h = v.holder->rec;
  i.present = true;
  i.held = true;
  // What Go's reader (compat/go) concludes from the same key: held.
  i.go_held = true;
  i.fence = static_cast<std::uint64_t>(v.holder->kv.create_revision);
  if (!h.problem.empty()) {
    // Held all the same: the key exists. Its words are the problem's.
    i.label = "an unreadable holder record (" + h.problem + ")";
    return i;
  }
  if (h.pid > 0) i.pid = h.pid;
  if (h.since > 0) {
    i.started_at = h.since;
    i.held_for = milliseconds(std::max<std::int64_t>(0, now_ms - h.since));
  }
  i.label = h.label;
  i.host = h.host;
  i.token = h.token;
  i.tool = h.tool;
  i.priority = h.priority;
  i.expected = milliseconds(h.expect_ms);
  if (h.expect_ms > 0) i.expected_free_in = std::max(milliseconds(0), i.expected - i.held_for);
  i.max_hold = milliseconds(h.max_hold_ms);
  if (h.max_hold_ms > 0) i.max_hold_in = i.max_hold - i.held_for;
  i.can_yield = h.can_yield;
  if (h.can_yield)
    for (const auto& w : v.queue)
      if (w.rec.priority > h.priority) {
        i.yield_requested = yield_request{w.rec.pid, w.rec.label, w.rec.priority, "priority"};
        break;
      }
  return i;
}

std::vector<waiter> to_waiters(const lock_view& v, const info& holder, std::int64_t now_ms) {
  std::vector<waiter> out;
  std::optional<milliseconds> eta = milliseconds(0);
  if (holder.held) eta = holder.expected_free_in;
  for (const auto& e : v.queue) {
    waiter w;
    w.pid = e.rec.pid;
    w.label = e.rec.problem.empty() ? e.rec.label : "an unreadable waiter entry (" + e.rec.problem + ")";
    w.host = e.rec.host;
    w.since = e.rec.since;
    w.waited = milliseconds(std::max<std::int64_t>(0, now_ms - e.rec.since));
    w.priority = e.rec.priority;
    w.expected = milliseconds(e.rec.expect_ms);
    w.position = static_cast<int>(out.size()) + 1;
    w.eta = eta;
    if (eta) eta = e.rec.expect_ms > 0 ? std::optional<milliseconds>(*eta + milliseconds(e.rec.expect_ms)) : std::nullopt;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace offload_lock::detail::etcd
