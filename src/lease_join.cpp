// The gpulease lease every acquisition also holds. See lease_join.hpp.
#include "lease_join.hpp"

#include <algorithm>

#include "gpulease/hold.hpp"
#include "gpulease/look.hpp"
#include "offload_lock/path.hpp"
#include "os/clock.hpp"
#include "os/cwd.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/watch.hpp"

namespace offload_lock::detail {

namespace gl = gpulease;

namespace {

// The origin our claims record (gpulease's `origin`).
constexpr const char* lease_origin = "offload-lock";

// How often a waiter looks again though nothing it watches changed: the
// lease's holder may end its window or let its heartbeat go stale on a
// file system without inotify events, and a stuck counter lock clears by
// time alone. gpulease's own waiters look every second.
constexpr std::int64_t look_every_ms = 200;

// Whom the lease is held by, in words safe for a terminal: only numbers
// from the claim (its strings are anyone's).
std::string held_by(const gl::lease_verdict& v, const std::string& dir) {
  std::string s = std::string(lease_wait_context) + "lease " + dir;
  if (v.rec) {
    s += " is held by pid " + std::to_string(v.rec->pid) + " (epoch " + std::to_string(v.rec->epoch) + ")";
  } else if (v.state == gl::lease_state::unknown) {
    s += " cannot be judged (a file there cannot be read)";
  } else {
    s += " is being taken";
  }
  return s;
}

bool same_inputs(const gl::lease_inputs& a, const gl::lease_inputs& b) {
  return a.explicit_dir == b.explicit_dir && a.gpu_lock == b.gpu_lock && a.lease_root == b.lease_root &&
         a.state_dir == b.state_dir && a.cwd == b.cwd;
}

// Where this process's environment places the lease (GPU_LOCK, a root or
// the default). Every acquisition asks, so it is placed again only when the
// environment or the working directory changed (a thread's own copy:
// nothing shared, nothing a fork could copy locked).
const gl::lease_location& placed_lease() {
  thread_local std::optional<std::pair<gl::lease_inputs, gl::lease_location>> placed;
  gl::lease_inputs in = gl::lease_inputs_from_environment();
  if (!placed || !same_inputs(placed->first, in)) {
    gl::lease_location where = gl::resolve_lease(in);
    placed.emplace(std::move(in), std::move(where));
  }
  return placed->second;
}

// The lease this process's acquisitions take beside their lock: a root
// that exists, not placed by GPU_LOCK or a directory of its own. Where no
// root exists this is all the lease costs: placed_lease(), then one open.
std::optional<gl::lease_location> lease_here() {
  const gl::lease_location& loc = placed_lease();
  if (loc.source == gl::lease_source::gpu_lock || loc.source == gl::lease_source::explicit_dir) return std::nullopt;
  if (!loc.refused.empty() || loc.root.empty()) return std::nullopt;
  if (!sys::open_dir(sys::cwd, loc.root, /*nofollow=*/false, loc.root)) return std::nullopt;
  return loc;
}

}  // namespace

std::optional<gl::lease_location> lease_sharing(const std::string& lock_path) {
  if (!sys::get_env(gl::env_gpu_lock)) return std::nullopt;
  const gl::lease_location& loc = placed_lease();
  if (loc.source != gl::lease_source::gpu_lock || !loc.refused.empty()) return std::nullopt;
  std::string abs = lock_path;
  if (abs.empty() || abs.front() != '/') abs = sys::current_directory().value_or("") + "/" + abs;
  if (clean_path(abs) != loc.dir || !gl::lease_root_exists(loc)) return std::nullopt;
  return loc;
}

std::optional<lease_join> lease_to_take(const plan& p) {
  // Slot 0 is the plain lock's directory: the one the lease goes with.
  if (!p.one_slot || p.slots.front() != 0) return std::nullopt;
  if (auto shared = lease_sharing(p.base)) return lease_join{std::move(*shared), true};
  if (auto apart = lease_here()) return lease_join{std::move(*apart), false};
  return std::nullopt;
}

gl::take_options lease_options(const plan& p) {
  gl::take_options o;
  o.cls = gl::parse_lease_class(p.lease_class).value_or(gl::lease_class::media);
  o.reason = p.record.label;
  o.origin = lease_origin;
  // `acquire` records a holder that outlives this process: the lease names
  // it too, so that both protocols judge the same process.
  if (p.record.pid != sys::self_pid()) o.holder_pid = p.record.pid;
  return o;
}

void give_back_lease_of(std::int64_t pid) {
  const auto loc = lease_here();
  if (!loc) return;
  if (auto h = gl::lease_hold::left_by(loc->dir, pid, lease_origin)) (void)h->release();
}

gl::inheritance lease_passed_down(const gl::lease_location& loc) {
  gl::inheritance in = gl::read_inheritance([](const std::string& n) { return sys::get_env(n); });
  // Another lease directory's lease is not the one this acquisition would
  // take: it passes nothing down here.
  if (in.k == gl::inheritance::kind::offered &&
      gl::resolve_lease(gl::lease_inputs_from_environment(in.lease->dir)).dir != loc.dir)
    return gl::inheritance{};
  return gl::confirm_inheritance(std::move(in), sys::now_ms(), gl::lease_process_view::real());
}

error take_lease(const plan& p, const gl::lease_location& loc, held_state& s) {
  const gl::take_options o = lease_options(p);
  sys::watcher w;
  for (;;) {
    auto r = gl::lease_hold::try_take(loc, o);
    if (r.status == gl::take_status::held) {
      {
        std::lock_guard<std::mutex> g(s.lease_mu);
        s.lease = std::make_unique<gl::lease_hold>(std::move(*r.hold));
      }
      // The maximum hold counts from here: the GPU is this holder's now.
      s.taken_at = sys::monotonic_ms();
      s.lease_pending.store(false, std::memory_order_release);
      watch_lease(s);
      return {};
    }
    gl::lease_wake wake = r.wake;
    std::string why;
    if (r.status == gl::take_status::error) {
      // The counter's lock stuck for 2 s (a gpulease acquirer killed inside
      // it): gpulease clears it after 30 s; wait for that like for a holder.
      if (r.err.code() != sys::errno_code(std::errc::resource_unavailable_try_again)) return r.err;
      wake = gl::lease_wake{loc.gpu_dir, 0, 0, look_every_ms};
      why = std::string(lease_wait_context) + "epoch counter " + loc.gpu_dir + "/" + gl::counter_lock_name + " is locked";
    } else {
      why = held_by(r.seen, loc.dir);
    }
    if (p.until.expired()) return error(p.until.trying() ? errc::busy : errc::timed_out, why);
    w.unwatch_all();
    const int dir_id = w.watch_entries(wake.dir);
    const int pid_id = wake.pid > 0 ? w.watch_pid(wake.pid) : -1;
    std::int64_t timeout = look_every_ms;
    if (dir_id < 0 || (wake.pid > 0 && pid_id < 0 && !w.has_pidfd())) timeout = std::min(timeout, wake.poll_ms);
    if (wake.at_ms > 0) timeout = std::min(timeout, std::max<std::int64_t>(0, wake.at_ms - sys::now_ms()));
    if (w.wait(p.until.clamp(timeout), p.cancel_fds) == sys::watcher::wake::extra_fd)
      return error(errc::cancelled, why);
  }
}

}  // namespace offload_lock::detail
