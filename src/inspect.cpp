// Judging and describing the lock (inspect.hpp), and the public inspect() and
// wait_free() (include/offload_lock/inspect.hpp).
#include "inspect.hpp"

#include <algorithm>

#include "etcd/address.hpp"
#include "etcd/look.hpp"
#include "idle.hpp"
#include "lease_join.hpp"
#include "offload_lock/slots.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "queue.hpp"
#include "registry.hpp"
#include "shared_dir.hpp"
#include "wait.hpp"

namespace offload_lock {

namespace detail {

process_view process_view::real() {
  process_view pv;
  pv.probe = sys::probe;
  pv.signals = sys::signal0;
  pv.start_of = sys::start_of;
  pv.boot_id = sys::boot_id();
  pv.host = sys::host_name();
  pv.pid_ns = sys::pid_namespace();
  return pv;
}

namespace {

void fill_info(const snapshot& s, std::int64_t now, info& i) {
  i.present = s.present;
  if (!s.present) return;
  i.owner_uid = s.owner_uid;
  if (!s.meta_exists) return;
  const parsed_meta& m = s.meta;
  if (m.js_pid && *m.js_pid == static_cast<double>(static_cast<std::int64_t>(*m.js_pid)))
    i.pid = static_cast<std::int64_t>(*m.js_pid);
  i.started_at = m.started_at;
  i.label = m.label;
  i.host = m.host;
  i.token = m.token;
  i.tool = m.tool;
  i.age = milliseconds(sat_sub(now, s.meta_mtime_ms));
  i.held_for = m.started_at ? milliseconds(sat_sub(now, *m.started_at)) : i.age;
  if (m.priority) i.priority = static_cast<int>(std::clamp<std::int64_t>(*m.priority, -100, 100));
  if (m.expect_ms && *m.expect_ms > 0) {
    i.expected = milliseconds(*m.expect_ms);
    i.expected_free_in = std::max(milliseconds(0), i.expected - i.held_for);
  }
  if (m.max_hold_ms && *m.max_hold_ms > 0) {
    i.max_hold = milliseconds(*m.max_hold_ms);
    i.max_hold_in = i.max_hold - i.held_for;
  }
  i.can_yield = m.can_yield;
}

void set_stale(info& i, std::optional<std::string> why) {
  i.stale = why;
  i.stale_reason = std::move(why);
}

}  // namespace

std::string missing_parent(const std::string& path) {
  std::string parent, name;
  sys::split_path(path, parent, name);
  return "the parent directory " + parent + " of lock " + path + " does not exist";
}

error not_a_lock_error(const std::string& path, const verdict& v) {
  return error(sys::errno_code(v.error ? static_cast<std::errc>(v.error) : std::errc::file_exists),
               "refusing to use " + path + " as the lock: it is " + v.reason +
                   "; GPU_LOCK (or --lock) names the lock directory itself, e.g. " + path + "/gpu.lock");
}

void describe(const target& t, detailed& d, std::int64_t now, std::int64_t ttl, const process_view& pv,
              bool idle_mark) {
  d.i.path = t.path;
  fill_info(d.o.snap, now, d.i);
  const snapshot& s = d.o.snap;
  if (!s.present) return;
  if (!s.is_dir) {
    d.v.state = judgment::not_a_lock;
    d.v.reason = s.is_symlink ? "a symbolic link, not a directory (never followed)" : "not a directory";
    set_stale(d.i, d.v.reason);
    d.i.node_stale = true;
    return;
  }
  if (d.v.not_a_lock()) {
    d.i.problem = not_a_lock_error(t.path, d.v).message();
    return;
  }
  // Unknown counts as held: nobody may take it for free on a failed read.
  // (A present directory is free only where it is shared with gpulease: a
  // container without a claim.)
  d.i.held = !d.v.free();
  if (idle_mark && d.i.held && d.o.dir.valid())
    if (auto mark = sys::attr_at(d.o.dir.get(), meta_file_name, idle_attr, idle_mark_cap)) {
      d.i.idle_since = parse_idle_mark(*mark);
      if (d.i.idle_since) d.i.idle_for = milliseconds(std::max<std::int64_t>(0, now - *d.i.idle_since));
    }
  if (d.v.unknown()) d.i.problem = t.path + ": " + d.v.reason;
  if (d.v.stale()) set_stale(d.i, d.v.reason);
  d.i.v1_stale_reason = node_stale_reason(s, now, ttl, pv);
  d.i.node_stale = d.i.v1_stale_reason.has_value();
  d.i.other_pid_namespace = s.meta_exists && s.meta.pid_ns && pv.pid_ns && *s.meta.pid_ns != *pv.pid_ns;
  d.i.go_held = go_inspect(s, now, ttl, pv).held;
}

result<detailed> inspect_target(const target& t, std::int64_t ttl, std::int64_t grace, const process_view& pv,
                                watch_clock* seen, bool idle_mark) {
  auto o = observe(t);
  if (!o) return o.error();
  detailed d;
  d.o = std::move(*o);
  if (seen) seen->update(d.o.snap);
  const std::int64_t now = sys::now_ms();
  if (d.o.snap.present && d.o.snap.is_dir) d.v = judge(d.o.snap, now, ttl, grace, pv);
  describe(t, d, now, ttl, pv, idle_mark);
  return d;
}

}  // namespace detail

using namespace detail;

info inspect(const std::string& path, milliseconds ttl, milliseconds grace) {
  if (etcd::is_etcd(path)) return etcd::inspect(path);
  info i;
  i.path = path;
  auto t = open_target(path);
  if (!t) {
    // Reported, not thrown: a missing parent too, which would otherwise read
    // as a free GPU on a mistyped path.
    i.problem = t.error().code() == std::errc::no_such_file_or_directory ? missing_parent(path) : t.error().message();
    return i;
  }
  // Where the lock directory is gpulease's lease directory too, by the
  // rules of both (shared_dir.hpp).
  auto d = lease_sharing(path) ? inspect_shared(*t, ttl.count(), grace.count(), process_view::real(),
                                                gpulease::lease_process_view::real())
                               : inspect_target(*t, ttl.count(), grace.count(), process_view::real());
  if (!d) {
    i.problem = d.error().message();
    return i;
  }
  if (d->i.held && d->i.can_yield) {
    // The queue is slot 0's: a GPU slot's meta.json names the slot, and its
    // path is slot 0's with the slot's suffix.
    const auto& m = d->o.snap.meta;
    const int slot = m.gpu && *m.gpu > 0 && queue_base(path, static_cast<int>(*m.gpu)) != path ? static_cast<int>(*m.gpu) : 0;
    const std::string registry = queue_base(path, slot);
    registry_reader reader(registry);
    d->i.yield_requested = first_above(reader, slot, d->i.priority, d->o.snap.owner_uid);
  }
  return d->i;
}

info wait_free(const std::string& path, milliseconds wait, milliseconds poll, milliseconds ttl) {
  if (etcd::is_etcd(path)) return etcd::wait_free(path, wait);
  const deadline until = deadline_for(wait);
  const std::int64_t poll_ms = std::max<std::int64_t>(1, poll.count());
  const process_view pv = process_view::real();
  lock_watch lw;
  watch_clock seen;
  const bool shared = lease_sharing(path).has_value();
  const auto lpv = gpulease::lease_process_view::real();
  for (;;) {
    auto t = open_target(path);
    if (!t) return inspect(path, ttl);
    auto d = shared ? inspect_shared(*t, ttl.count(), default_grace.count(), pv, lpv, &seen)
                    : inspect_target(*t, ttl.count(), default_grace.count(), pv, &seen);
    if (!d || !d->i.held) return d ? d->i : inspect(path, ttl);
    if (until.expired() || until.trying()) return d->i;
    d->o.dir.reset();
    (void)lw.wait_for_change(*t, d->o.snap, d->v, until, d->v.unknown() ? std::min<std::int64_t>(poll_ms, 100) : poll_ms);
  }
}

}  // namespace offload_lock
