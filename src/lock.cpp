// The members of class lock (include/offload_lock/lock.hpp): one acquisition
// as its holder sees it. The protocol's steps live in acquire, claim,
// reclaim, heartbeat, release, local_gate and inherit.
#include "offload_lock/lock.hpp"

#include "acquire.hpp"
#include "etcd/address.hpp"
#include "etcd/fleet.hpp"
#include "etcd/lock.hpp"
#include "idle.hpp"
#include "inherit.hpp"
#include "offload_lock/path.hpp"
#include "os/process.hpp"

namespace offload_lock {

using namespace detail;

namespace {
const std::string kEmpty;
}  // namespace

lock::lock() noexcept = default;
lock::lock(std::unique_ptr<handle> h) noexcept : h_(std::move(h)) {}
lock::lock(lock&&) noexcept = default;
// NOLINTNEXTLINE(bugprone-exception-escape): release() calls std::get and result::error() only after checking which alternative is held
lock& lock::operator=(lock&& o) noexcept {
  if (this != &o) {
    if (h_) (void)release();
    h_ = std::move(o.h_);
  }
  return *this;
}
// NOLINTNEXTLINE(bugprone-exception-escape): as operator= above
lock::~lock() {
  if (h_) (void)release();
}

result<lock> lock::acquire(const lock_options& opt) {
  const std::string path = opt.path.empty() ? resolve_path().path : opt.path;
  if (etcd::is_etcd(path)) {
    lock_options o = opt;
    o.path = path;
    bool nested = false;
    auto h = etcd::acquire(o, nested);
    if (!h) return h.error();
    return acquirer::make_remote(std::move(*h), !nested);
  }
  // The fleet view, when one is configured: handed to a background thread,
  // never waited for (etcd/fleet.hpp).
  const std::uint64_t fleet_id = etcd::fleet::waiting(opt, path);
  auto r = acquirer::acquire(opt, path);
  if (fleet_id) {
    if (r && r->h_->outermost && r->h_->gate->held) {
      etcd::fleet::held(fleet_id, *r, opt);
      r->h_->fleet_id = fleet_id;
    } else {
      etcd::fleet::gone(fleet_id);
    }
  }
  return r;
}

lock acquirer::make_remote(std::shared_ptr<etcd::hold> h, bool outermost) {
  const int gpu = h->gpu();
  return lock(std::make_unique<handle>(handle{nullptr, outermost, false, gpu, sys::self_pid(), std::move(h), 0}));
}

result<lock> lock::acquire(const std::string& path, milliseconds wait) {
  lock_options o;
  o.path = path;
  o.wait = wait;
  return acquire(o);
}

bool lock::owns() const noexcept { return static_cast<bool>(h_); }

namespace {
// A forked child's copy of a lock: it holds nothing, and touches nothing
// (the gate's mutex may have been copied in any state).
bool forked_copy(const detail::handle& h) { return h.pid != sys::self_pid(); }
}  // namespace

bool lock::still_held() const {
  if (!h_ || forked_copy(*h_)) return false;
  if (h_->remote) return h_->remote->still_held();
  std::lock_guard<std::mutex> g(h_->gate->mu);
  if (h_->gate->held) return h_->gate->held->still_ours();
  return h_->gate->passes_through();
}

bool lock::yield_requested() const {
  if (!h_ || forked_copy(*h_)) return false;
  if (h_->remote) return h_->remote->yield_requested();
  std::lock_guard<std::mutex> g(h_->gate->mu);
  return h_->gate->held && h_->gate->held->yield_asked;
}

bool lock::max_hold_passed() const {
  if (!h_ || forked_copy(*h_)) return false;
  if (h_->remote) return h_->remote->max_hold_passed();
  std::lock_guard<std::mutex> g(h_->gate->mu);
  return h_->gate->held && h_->gate->held->max_hold_over();
}

const std::string& lock::path() const {
  if (h_ && h_->remote) return h_->remote->url();
  return h_ && h_->gate->held ? h_->gate->held->t.path : kEmpty;
}
const std::string& lock::token() const {
  if (!h_) return kEmpty;
  if (h_->remote) return h_->remote->token();
  return h_->gate->held ? h_->gate->held->token : h_->gate->inherited_token;
}
const std::string& lock::meta_json() const {
  if (h_ && h_->remote) return h_->remote->record_json();
  return h_ && h_->gate->held ? h_->gate->held->meta : kEmpty;
}
int lock::gpu() const noexcept { return h_ ? h_->gpu : 0; }
std::int64_t lock::pid() const {
  if (h_ && h_->remote) return h_->remote->pid();
  return h_ && h_->gate->held ? h_->gate->held->pid : 0;
}
bool lock::nested() const noexcept { return h_ && !h_->outermost; }
bool lock::inherited() const noexcept {
  if (h_ && h_->remote) return h_->outermost && h_->remote->inherited();
  return h_ && h_->outermost && !h_->gate->held && h_->gate->passes_through();
}

std::uint64_t lock::fence() const noexcept { return h_ && h_->remote ? h_->remote->fence() : 0; }

std::uint64_t lock::lease_epoch() const {
  if (!h_ || forked_copy(*h_)) return 0;
  if (h_->remote) return 0;
  std::shared_ptr<held_state> held;
  {
    std::lock_guard<std::mutex> g(h_->gate->mu);
    if (!h_->gate->held) return h_->gate->inherited_lease_epoch;
    held = h_->gate->held;
  }
  return held->lease_epoch();
}

std::vector<std::pair<std::string, std::string>> lock::child_environment() const {
  if (!h_ || forked_copy(*h_)) return {};
  if (h_->remote) return h_->remote->child_environment();
  std::lock_guard<std::mutex> g(h_->gate->mu);
  if (!h_->gate->held && h_->gate->inherited_token.empty()) return h_->gate->inherited_lease_env;
  std::string path = h_->gate->held ? h_->gate->held->t.path : inherited_path().value_or("");
  std::vector<std::pair<std::string, std::string>> env{{env_lock_path, path}, {env_lock_token, token()}};
  // The lease's too: a gpulease participant started under this lock holds
  // through it instead of waiting for it.
  auto lease = h_->gate->held ? h_->gate->held->lease_environment() : h_->gate->inherited_lease_env;
  env.insert(env.end(), lease.begin(), lease.end());
  return env;
}

error lock::release() {
  if (!h_) return error(errc::lost, "release of a lock that is not held");
  std::unique_ptr<handle> h = std::move(h_);
  if (forked_copy(*h)) {
    // Nothing here is this process's; the parent's lock stays the parent's.
    return error(errc::lost, "a lock taken by process " + std::to_string(h->pid) +
                                 ", which forked this one; a forked child cannot release it");
  }
  // A nested acquisition of an etcd lock leaves it to the outermost one.
  if (h->remote) return h->outermost ? h->remote->release() : error{};
  etcd::fleet::gone(h->fleet_id);
  local_gate& g = *h->gate;
  std::unique_lock<std::mutex> guard(g.mu);
  // A nested acquisition only counts down; the outermost one releases.
  if (g.depth > 0) --g.depth;
  if (!h->outermost) return {};
  std::shared_ptr<held_state> held = std::move(g.held);
  g.forget_inherited();
  g.depth = 0;
  guard.unlock();
  error e = held ? held->release() : error{};  // an inherited claim stays the parent's
  g.leave();
  return e;
}

void lock::detach() noexcept {
  if (!h_) return;
  std::unique_ptr<handle> h = std::move(h_);
  if (forked_copy(*h)) return;
  if (h->remote) {
    if (h->outermost) h->remote->detach();
    return;
  }
  etcd::fleet::gone(h->fleet_id);
  {
    std::lock_guard<std::mutex> guard(h->gate->mu);
    if (!h->outermost) {
      if (h->gate->depth > 0) --h->gate->depth;
      return;
    }
    if (h->gate->held) {
      h->gate->held->stop_heartbeat();
      h->gate->held->released = true;
      h->gate->held->abandon_lease();  // whoever keeps the lock keeps it
    }
    h->gate->held.reset();
    h->gate->forget_inherited();
    h->gate->depth = 0;
  }
  h->gate->leave();
}

error lock::hold_until_holder_exits() {
  if (!h_ || !h_->outermost) return error(errc::lost, "hold of a lock that is not held here");
  // The one call a forked child may make on its copy: it takes the lock over
  // (`offload-lock acquire` leaves a detached keeper this way). Its gate
  // copy is this process's from now on.
  h_->pid = sys::self_pid();
  if (h_->remote) {
    error e = h_->remote->keep_until_holder_exits();
    h_.reset();
    return e;
  }
  // The fleet record is this keeper's to publish now; its parent detaches.
  etcd::fleet::adopt(h_->fleet_id);
  const std::uint64_t fleet_id = h_->fleet_id;
  struct flushed {
    std::uint64_t id;
    // The keeper ends with _exit: its record's deletion is sent first.
    ~flushed() {
      if (id) (void)etcd::fleet::flush(500);
    }
  } at_end{fleet_id};
  std::shared_ptr<held_state> held;
  {
    std::lock_guard<std::mutex> g(h_->gate->mu);
    held = h_->gate->held;
  }
  if (!held) return error(errc::lost, "hold of a lock that is not held here");
  held->stop_heartbeat();
  held->owner_pid = sys::self_pid();
  held->adopt_lease();
  // The idle rule's watch is the keeper's from now on (its own thread).
  held->held_on = true;
  if (held->idle_after_ms > 0) watch_idle(held, held->base);
  if (held->keep_until_holder_exits() == held_state::kept::lost) {
    const std::string lease = held->lease_claim_path();
    (void)held->release_lease();  // removes nothing that is not ours any more
    if (held->still_ours()) {
      // Only the lease was lost: the lock goes too, the GPU is not reserved.
      (void)release();
      return error(errc::lost, lease);
    }
    held->released = true;
    detach();
    return error(errc::lost, held->t.path);
  }
  return release();
}

}  // namespace offload_lock
