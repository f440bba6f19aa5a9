// The fleet view: publishing from a background thread, and reading
// (fleet.hpp).
#include "etcd/fleet.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "etcd/client.hpp"
#include "etcd/record.hpp"
#include "offload_lock/gpus.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail::etcd::fleet {

using json = nlohmann::json;

namespace {

constexpr std::int64_t per_call_ms = 2'000;
// After a failure, the next try: doubling from 1 s to 10 s, so an etcd that
// is down costs a connection attempt now and then, nothing more.
constexpr std::int64_t first_backoff_ms = 1'000, last_backoff_ms = 10'000;

// A host name as a key component: what a host name may hold, anything
// else as '_'.
std::string key_host(std::string h) {
  for (char& ch : h)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
      ch = '_';
  return h.empty() ? "_" : h.substr(0, 253);
}

// NOLINTNEXTLINE(bugprone-exception-escape): its moves are json's and std::string's, which do not throw
struct rec {
  json fields;          // the value but for what is known late (the device)
  bool slotted = false;  // the lock has GPU slots: the device is looked up
  std::uint64_t version = 1;
  std::uint64_t published = 0;  // the version written to etcd
  bool gone = false;
  bool ours = true;  // false in a forked child, for the parent's records
  // cppcheck-suppress unusedStructMember ; read and cleared through the map's references
  std::string key;   // written under this key (empty: not yet)
};

struct publisher {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, rec> recs;
  std::uint64_t next_id = 1;
  bool running = false;  // this process's thread runs
  std::vector<endpoint> eps;
  std::atomic<std::int64_t> lease{0};
};

publisher& pub() {
  static auto* p = new publisher();  // never destroyed: its thread may outlive exit
  return *p;
}

// Around fork: the mutex is taken so that no child gets it locked; the
// child has no publishing thread, and publishes none of its parent's
// records unless it adopts one.
void before_fork() { pub().mu.lock(); }
void after_fork_parent() { pub().mu.unlock(); }
void after_fork_child() {
  publisher& p = pub();
  p.running = false;
  p.lease = 0;
  for (auto& [id, r] : p.recs) {
    r.ours = false;
    r.key.clear();
  }
  p.mu.unlock();
}

// At exit, the records go with the lease at once rather than a TTL later
// (bounded: an etcd that does not answer delays the exit by 300 ms at most).
void revoke_at_exit() {
  publisher& p = pub();
  const std::int64_t lease = p.lease.exchange(0);
  if (!lease) return;
  client c(p.eps);
  c.per_member_ms = 300;
  (void)c.revoke(lease, {sys::monotonic_ms() + 300, {}});
}

std::string device_of(int gpu) {
  const auto& gpus = machine_gpus();
  if (!gpus) return {};
  for (const auto& d : *gpus)
    if (d.index == gpu) return d.uuid.empty() ? d.name : d.uuid + (d.name.empty() ? "" : " (" + d.name + ")");
  return {};
}

void run(publisher& p) {
  client c(p.eps);
  c.per_member_ms = per_call_ms;
  std::int64_t next_ka = 0, backoff = 0, retry_at = 0;
  std::map<int, std::string> devices;
  auto bounds = [&] {
    return sys::net_bounds{sys::monotonic_ms() + per_call_ms * static_cast<std::int64_t>(p.eps.size()), {}};
  };
  auto failed = [&] {
    backoff = backoff ? std::min(backoff * 2, last_backoff_ms) : first_backoff_ms;
    retry_at = sys::monotonic_ms() + backoff;
  };
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    const std::int64_t now = sys::monotonic_ms();
    bool work = false;
    for (const auto& [id, r] : p.recs)
      if (r.ours && r.published != r.version) work = true;
    std::int64_t wake = -1;
    if (p.lease) wake = next_ka;
    if (work && now < retry_at) wake = wake < 0 ? retry_at : std::min(wake, retry_at);
    if ((!work || now < retry_at) && (!p.lease || now < next_ka)) {
      if (wake < 0) p.cv.wait(lk);
      else p.cv.wait_for(lk, std::chrono::milliseconds(wake - now));
      if (!p.running) return;  // a forked child's copy never runs; never reached in the parent
      continue;
    }
    // What to write, copied out: the network is used without the mutex.
    std::vector<std::pair<std::uint64_t, rec>> todo;
    for (const auto& [id, r] : p.recs)
      if (r.ours && r.published != r.version) todo.emplace_back(id, r);
    std::int64_t lease = p.lease;
    lk.unlock();
    bool ok = true;
    if (lease && sys::monotonic_ms() >= next_ka) {
      auto ttl = c.keep_alive(lease, bounds());
      if (ttl && *ttl > 0) {
        next_ka = sys::monotonic_ms() + *ttl * 1000 / 3;
      } else if (ttl) {
        // Lapsed while etcd could not be reached: every record again.
        lk.lock();
        p.lease = 0;
        for (auto& [id, r] : p.recs) r.published = 0, r.key.clear();
        lk.unlock();
        continue;
      } else {
        ok = false;
        next_ka = sys::monotonic_ms() + first_backoff_ms;
      }
    }
    bool any_put = false;
    for (const auto& [id, r] : todo) any_put = any_put || !r.gone;
    if (ok && !lease && any_put) {
      auto g = c.grant(fleet_ttl_s, bounds());
      if (g) {
        lease = g->id;
        next_ka = sys::monotonic_ms() + g->ttl_s * 1000 / 3;
        p.lease = lease;
      } else {
        ok = false;
      }
    }
    std::vector<std::pair<std::uint64_t, std::pair<std::uint64_t, std::string>>> done;  // id -> version, key
    for (auto& [id, r] : todo) {
      if (!ok) break;
      std::string key = r.key;
      if (r.gone) {
        if (!key.empty() && !c.txn({}, {{txn_op::kind::del, key, "", 0, false}}, {}, bounds())) ok = false;
        else done.push_back({id, {r.version, ""}});
        continue;
      }
      if (key.empty())
        key = std::string(fleet_root) + key_host(sys::host_name()) + "/" + std::to_string(sys::self_pid()) + "-" +
              std::to_string(id);
      json v = r.fields;
      if (r.slotted && v.value("holding", false)) {
        const int gpu = v.value("gpu", 0);
        if (!devices.count(gpu)) devices[gpu] = device_of(gpu);  // nvidia-smi, once, on this thread
        if (!devices[gpu].empty()) v["device"] = devices[gpu];
      }
      if (!c.txn({}, {{txn_op::kind::put, key, v.dump(-1, ' ', false, json::error_handler_t::replace), lease, false}},
                 {}, bounds()))
        ok = false;
      else
        done.push_back({id, {r.version, key}});
    }
    lk.lock();
    for (const auto& [id, vk] : done) {
      auto it = p.recs.find(id);
      if (it == p.recs.end()) continue;
      if (it->second.gone && it->second.version == vk.first) {
        p.recs.erase(it);
        continue;
      }
      if (!vk.second.empty()) it->second.key = vk.second;
      it->second.published = vk.first;
    }
    if (ok) backoff = 0, retry_at = 0;
    else failed();
    // Nothing left to publish: the lease goes (no renewals for nothing).
    bool any = false;
    for (const auto& [id, r] : p.recs) any = any || r.ours;
    if (!any && p.lease && ok) {
      const std::int64_t old = p.lease.exchange(0);
      lk.unlock();
      (void)c.revoke(old, bounds());
      lk.lock();
    }
  }
}

// Starts this process's thread if it does not run (under the mutex).
void ensure_running(publisher& p) {
  if (p.running) return;
  static std::once_flag once;
  std::call_once(once, [] {
    sys::on_fork(before_fork, after_fork_parent, after_fork_child);
    (void)std::atexit(revoke_at_exit);
  });
  p.running = true;
  std::thread([&p] { run(p); }).detach();
}

bool parse_entry(const std::string& value, entry& e) {
  if (value.size() > max_record_bytes) return false;
  json j = json::parse(value, nullptr, false);
  if (!j.is_object()) return false;
  auto str = [&](const char* k, std::string& out, std::size_t cap) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return true;
    if (!it->is_string() || it->get_ref<const std::string&>().size() > cap) return false;
    out = it->get<std::string>();
    return true;
  };
  auto num = [&](const char* k, std::int64_t& out, std::int64_t lo, std::int64_t hi) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) return true;
    if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)))
      return false;
    const std::int64_t v = it->get<std::int64_t>();
    if (v < lo || v > hi) return false;
    out = v;
    return true;
  };
  std::int64_t gpu = 0, priority = 0;
  const bool ok = str("host", e.host, 255) && str("path", e.path, 4096) && str("label", e.label, max_label_bytes) &&
                  str("token", e.token, 128) && str("device", e.device, 512) && num("gpu", gpu, 0, 1023) &&
                  num("pid", e.pid, 0, 2147483647) && num("since", e.since, 0, 32503680000000LL) &&
                  num("expectMs", e.expect_ms, 0, 316224000000LL) && num("maxHoldMs", e.max_hold_ms, 0, 316224000000LL) &&
                  num("priority", priority, -100, 100);
  if (!ok) return false;
  auto h = j.find("holding");
  if (h != j.end() && !h->is_boolean()) return false;
  e.holding = h != j.end() && h->get<bool>();
  e.gpu = static_cast<int>(gpu);
  e.priority = static_cast<int>(priority);
  return !e.host.empty() && !e.path.empty();
}

std::string endpoints_text(const std::vector<endpoint>& eps) {
  std::string s = "etcd://";
  for (std::size_t k = 0; k < eps.size(); ++k) s += (k ? "," : "") + eps[k].text();
  return s;
}

}  // namespace

std::optional<result<std::vector<endpoint>>> configured() {
  static const std::optional<result<std::vector<endpoint>>> conf = []() -> std::optional<result<std::vector<endpoint>>> {
    auto v = sys::get_env(env_fleet);
    if (!v || v->empty()) return std::nullopt;
    std::string_view s = *v;
    if (!is_etcd(s))
      return result<std::vector<endpoint>>(
          error(errc::bad_input, std::string(env_fleet) + " is not etcd://HOST:PORT[,HOST:PORT...]"));
    s.remove_prefix(scheme.size());
    if (!s.empty() && s.back() == '/') s.remove_suffix(1);
    auto eps = parse_endpoints(s);
    if (!eps) return result<std::vector<endpoint>>(error(errc::bad_input, std::string(env_fleet) + ": " + eps.error().context()));
    return eps;
  }();
  return conf;
}

std::uint64_t waiting(const lock_options& o, const std::string& path) {
  const auto conf = configured();
  if (!conf || !*conf) return 0;
  publisher& p = pub();
  std::lock_guard<std::mutex> g(p.mu);
  if (p.eps.empty()) p.eps = conf->value();
  const std::uint64_t id = p.next_id++;
  rec r;
  r.fields = {{"host", sys::host_name()},
              {"path", o.gpu >= 0 ? gpu_slot_path(path, o.gpu) : path},
              {"gpu", std::max(0, o.gpu)},
              {"holding", false},
              {"pid", sys::self_pid()},
              {"label", o.label.empty() ? sys::program_name() : o.label.substr(0, max_label_bytes)},
              {"since", sys::now_ms()},
              {"priority", o.priority},
              {"expectMs", std::max<std::int64_t>(0, o.expected.count())},
              {"tool", std::string("offload-lock/") + version()}};
  r.slotted = o.gpus > 1 || o.gpu >= 0;
  p.recs.emplace(id, std::move(r));
  ensure_running(p);
  p.cv.notify_one();
  return id;
}

void held(std::uint64_t id, const lock& l, const lock_options& o) {
  if (!id) return;
  publisher& p = pub();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.recs.find(id);
  if (it == p.recs.end()) return;
  json& f = it->second.fields;
  f["holding"] = true;
  f["path"] = l.path();
  f["gpu"] = l.gpu();
  f["pid"] = l.pid();
  f["token"] = l.token();
  f["since"] = sys::now_ms();
  f["maxHoldMs"] = std::max<std::int64_t>(0, o.max_hold.count());
  ++it->second.version;
  p.cv.notify_one();
}

void gone(std::uint64_t id) {
  if (!id) return;
  publisher& p = pub();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.recs.find(id);
  if (it == p.recs.end()) return;
  if (!it->second.ours) {
    // The parent's, in a forked child: the parent deletes it.
    p.recs.erase(it);
    return;
  }
  // The thread deletes it (once written: a write may be on its way now).
  it->second.gone = true;
  ++it->second.version;
  p.cv.notify_one();
}

void adopt(std::uint64_t id) {
  if (!id) return;
  publisher& p = pub();
  std::lock_guard<std::mutex> g(p.mu);
  auto it = p.recs.find(id);
  if (it == p.recs.end()) return;
  it->second.ours = true;
  it->second.key.clear();
  ++it->second.version;
  ensure_running(p);
  p.cv.notify_one();
}

bool flush(std::int64_t ms) {
  publisher& p = pub();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    bool pending = false;
    for (const auto& [id, r] : p.recs) pending = pending || (r.ours && r.published != r.version);
    if (!pending) return true;
    if (!p.running || std::chrono::steady_clock::now() >= until) return false;
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    lk.lock();
  }
}

view read(const std::vector<endpoint>& eps) {
  view v;
  v.endpoints = endpoints_text(eps);
  client c(eps);
  auto r = c.range(std::string(fleet_root), true,
                   {sys::monotonic_ms() + per_call_ms * static_cast<std::int64_t>(eps.size()), {}});
  if (!r) {
    v.problem = v.endpoints + ": " + r.error().message();
    return v;
  }
  for (const auto& kv : r->kvs) {
    entry e;
    if (!parse_entry(kv.value, e)) {
      ++v.unreadable;
      continue;
    }
    v.entries.push_back(std::move(e));
  }
  return v;
}

freshness check(const std::string& path) {
  freshness f;
  const auto conf = configured();
  if (!conf) return f;
  f.configured = true;
  if (!*conf) {
    f.stale = true;
    f.why = conf->error().context() + ": nothing is published";
    return f;
  }
  const auto& eps = conf->value();
  f.endpoints = endpoints_text(eps);
  client c(eps);
  const std::string mine = std::string(fleet_root) + key_host(sys::host_name()) + "/";
  auto r = c.range(mine, true, {sys::monotonic_ms() + per_call_ms * static_cast<std::int64_t>(eps.size()), {}});
  if (!r) {
    f.stale = true;
    f.why = f.endpoints + " cannot be reached (" + r.error().message() + "): this host's locks are not in the fleet view";
    return f;
  }
  std::vector<entry> here;
  for (const auto& kv : r->kvs) {
    entry e;
    if (parse_entry(kv.value, e) && e.path.compare(0, path.size(), path) == 0) here.push_back(std::move(e));
  }
  const info i = inspect(path);
  const bool ours = i.held && !i.token.empty() && i.tool.rfind("offload-lock/", 0) == 0;
  bool published = false;
  for (const auto& e : here) {
    if (!e.holding || e.path != path) continue;
    if (ours && e.token == i.token) published = true;
    else {
      f.stale = true;
      f.why = "a holder that no longer holds " + path + " is still published (" + e.label + ", pid " +
              std::to_string(e.pid) + "): its process ended less than " + std::to_string(fleet_ttl_s) + " s ago";
      return f;
    }
  }
  if (ours && !published) {
    f.stale = true;
    f.why = "the holder of " + path + " (" + i.label + ", pid " + std::to_string(i.pid.value_or(0)) +
            ") is not published (yet)";
    return f;
  }
  f.why = "published to " + f.endpoints + ": " + std::to_string(here.size()) + " record" +
          (here.size() == 1 ? "" : "s") + " of this host for " + path;
  return f;
}

}  // namespace offload_lock::detail::etcd::fleet
