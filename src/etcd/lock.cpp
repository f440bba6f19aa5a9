// An etcd lock taken (lock.hpp): the options of an acquisition checked
// once, a nested acquisition on the same thread and a claim passed down by
// the `run` that started this process passed through; else the wait in the
// line (lock_wait.cpp), and the lock held by a thread of its own
// (lock_hold.cpp).
#include "etcd/lock.hpp"

#include <algorithm>
#include <map>

#include "etcd/client.hpp"
#include "etcd/lock_parts.hpp"
#include "etcd/record.hpp"
#include "etcd/same_machine.hpp"
#include "etcd/view.hpp"
#include "inherit.hpp"
#include "offload_lock/slots.hpp"
#include "os/process.hpp"
#include "plan.hpp"
#include "token.hpp"
#include "wait.hpp"

namespace offload_lock::detail::etcd {

namespace {

error bad(const std::string& what) { return error(errc::bad_input, what); }

// This thread's outermost etcd acquisitions, by URL: a nested one on the
// same thread passes straight through, as for a local lock (B10).
using nest_key = std::pair<std::string, std::thread::id>;
std::mutex g_nest_mu;
std::map<nest_key, std::weak_ptr<hold>>& nests() {
  static auto* m = new std::map<nest_key, std::weak_ptr<hold>>();  // never destroyed: threads may outlive exit
  return *m;
}

result<wanted> want(const lock_options& o) {
  if (o.gpus > 1 && o.gpu < 0)
    return bad("an etcd lock has no GPU slots to choose among (--gpus " + std::to_string(o.gpus) +
               "): name one with --gpu K, or give each GPU a lock of its own");
  if (o.gpu >= max_gpus) return bad("GPU slot " + std::to_string(o.gpu));
  wanted w;
  w.gpu = std::max(0, o.gpu);
  auto a = parse_address(gpu_slot_path(o.path, w.gpu));
  if (!a) return a.error();
  w.a = std::move(*a);
  if (o.priority < lowest_priority || o.priority > highest_priority)
    return bad("priority " + std::to_string(o.priority) + " (" + std::to_string(lowest_priority) + " to " +
               std::to_string(highest_priority) + ")");
  if (o.expected.count() < 0) return bad("expected duration below 0");
  if (o.max_hold.count() < 0) return bad("maximum hold below 0");
  if (o.pid < 0) return bad("holder pid " + std::to_string(o.pid));
  if (!o.token.empty() && !valid_token(o.token)) return bad("token '" + o.token + "'");
  if (o.ttl.count() <= 0) return bad("TTL " + std::to_string(o.ttl.count()) + " ms (above 0)");
  // etcd's leases count whole seconds; a year is more than any holder
  // should go without a word.
  const std::int64_t ttl_ms = o.ttl == default_ttl ? default_ttl_ms : o.ttl.count();
  if (ttl_ms > 366LL * 24 * 3600 * 1000) return bad("an etcd lease TTL above a year");
  w.ttl_s = (ttl_ms + 999) / 1000;
  w.queue = o.register_waiter;
  w.until = deadline_for(o.wait);
  w.cancel = o.cancel_fds;
  w.inherit = o.inherit;
  w.on_lost = o.on_lost;
  w.on_yield = o.on_yield_request;
  w.max_hold_ms = o.max_hold.count();
  w.report.on_wait = o.on_wait;
  w.report.on_progress = o.on_progress;
  w.report.progress_every_ms = std::max<std::int64_t>(0, o.progress_every.count());

  record& h = w.holder;
  h.pid = o.pid ? o.pid : sys::self_pid();
  h.label = o.label.empty() ? sys::program_name() : o.label;
  if (h.label.size() > max_label_bytes) h.label.resize(max_label_bytes);
  h.host = sys::host_name();
  h.token = o.token.empty() ? new_token() : o.token;
  h.priority = o.priority;
  h.expect_ms = o.expected.count();
  h.max_hold_ms = o.max_hold.count();
  h.can_yield = static_cast<bool>(o.on_yield_request);
  h.tool = std::string("offload-lock/") + version();
  // The entry names the waiting process: the one that keeps it (and what
  // place_in_line looks for).
  w.waiting = h;
  w.waiting.pid = sys::self_pid();
  w.waiting.token.clear();
  // Who the holder and the waiter are, for a waiter on this machine
  // (same_machine.hpp).
  stamp_here(h);
  stamp_here(w.waiting);
  return w;
}

// A claim passed down by the `run` that started this process (B11): the
// same URL in OFFLOAD_LOCK_PATH, and the holder's token in
// OFFLOAD_LOCK_TOKEN.
std::optional<lock_view> passed_down(const wanted& w, client& c) {
  if (!w.inherit) return std::nullopt;
  auto path = sys::get_env(env_lock_path);
  auto token = sys::get_env(env_lock_token);
  if (!path || !token || token->empty()) return std::nullopt;
  auto theirs = parse_address(*path);
  if (!theirs || theirs->url() != w.a.url()) return std::nullopt;
  auto v = look(c, w.a, call_bounds(c, w.cancel));
  if (!v || !v->holder || v->holder->rec.token != *token) return std::nullopt;
  return *v;
}

}  // namespace

void forget_nesting(const hold& h) {
  std::lock_guard<std::mutex> g(g_nest_mu);
  for (auto it = nests().begin(); it != nests().end();) {
    auto held = it->second.lock();
    if (!held || held.get() == &h) it = nests().erase(it);
    else ++it;
  }
}

result<std::shared_ptr<hold>> acquire(const lock_options& o, bool& nested) {
  nested = false;
  auto w = want(o);
  if (!w) return w.error();
  const std::string url = w->a.url();
  {
    std::lock_guard<std::mutex> g(g_nest_mu);
    auto it = nests().find({url, std::this_thread::get_id()});
    if (it != nests().end())
      if (auto h = it->second.lock()) {
        nested = true;
        return h;
      }
  }
  client c(w->a.endpoints);
  if (auto v = passed_down(*w, c)) {
    hold::made m;
    m.addr = w->a;
    m.token = v->holder->rec.token;
    m.record_json = v->holder->kv.value;
    m.fence = static_cast<std::uint64_t>(v->holder->kv.create_revision);
    m.pid = v->holder->rec.pid;
    m.gpu = w->gpu;
    m.inherited = true;
    return std::make_shared<hold>(std::move(m));
  }
  auto h = wait_and_take(std::move(*w));
  if (!h) return h;
  (*h)->start();
  std::lock_guard<std::mutex> g(g_nest_mu);
  nests()[{url, std::this_thread::get_id()}] = *h;
  return h;
}

}  // namespace offload_lock::detail::etcd
