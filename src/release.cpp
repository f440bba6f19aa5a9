// Release with ownership (doc/protocol.md B5): a held lock's own release, and
// release_by() for a lock held by token or pid from another process. Both
// remove exactly the directory they matched (reclaim.hpp's remove_exact).
#include "offload_lock/release.hpp"

#include <optional>

#include "etcd/address.hpp"
#include "etcd/look.hpp"
#include "handoff.hpp"
#include "heartbeat.hpp"
#include "history.hpp"
#include "inspect.hpp"
#include "lease_join.hpp"
#include "os/test_hooks.hpp"
#include "os/files.hpp"
#include "reclaim.hpp"
#include "shared_dir.hpp"
#include "registry.hpp"

namespace offload_lock {

namespace detail {

error held_state::release() {
  // A forked child's copy of the lock neither holds nor releases it: the
  // parent's lock stays the parent's.
  if (!in_owner())
    return error(errc::lost, t.path + " is held by process " + std::to_string(owner_pid) +
                                 ", which forked this one; a forked child cannot release it");
  stop_heartbeat();
  if (released) return {};
  released = true;
  // Closed on the way out, whichever it is: after the handoff. (The
  // heartbeat thread, stopped above, no longer touches waited_with.)
  const std::shared_ptr<void> close_on_return = std::move(left_behind);
  const std::shared_ptr<void> waited_with_closed = std::move(waited_with);
  if (shared) {
    // One meta.json is the lock and the lease (shared_dir.hpp): our files
    // and it go, under the movers' flock; the directory, gpulease's
    // container, stays, and a waiter claims inside it.
    const bool over = max_hold_over();
    error e;
    {
      mover_lock movers(dir.get());
      e = release_lease();
    }
    const bool lost = e == errc::lost;
    history::record(t.path, history::hold_end(token, lost ? "lost" : over ? "max-hold" : "released", yield_asked),
                    meta);
    drop_proof();
    // The registry's directories this holder waited in, as any release.
    if (!queue_dir.empty()) tidy_registry(base, queue_dir);
    return lost ? error(errc::lost, t.path) : e;
  }
  // The lease first: the lock, still held, keeps every offload-lock waiter
  // and v1 runner out until it is handed on or removed; a gpulease waiter
  // may take the lease now, and the next offload-lock holder then waits for
  // it (lease_join.hpp). Its loss is reported once the lock is released.
  error lease_lost = release_lease();
  // The look and the move under one flock with every other mover of this
  // directory (reclaim.hpp, mover_lock).
  mover_lock movers(dir.get());
  // A look that fails (out of descriptors, say) is tried again; one that
  // keeps failing removes nothing: the lock stays, proven alive by its OFD
  // lock until this process exits, and is then taken over by the rules.
  error why;
  auto mine = check_ours(&why);
  for (int again = 0; again < 3 && mine == ownership::unknown; ++again) mine = check_ours(&why);
  if (mine == ownership::unknown) return why;
  if (mine == ownership::not_ours) {
    history::record(t.path, history::hold_end(token, "lost", yield_asked), meta);
    return error(errc::lost, t.path);
  }
  sys::crash_point("release.checked");
  // A hold kept past its maximum ended by it, whoever made the release.
  const char* ended = max_hold_over() ? "max-hold" : "released";
  // To the next waiter without a gap when one is staged for it; plainly
  // otherwise.
  auto handed = hand_to_next(t, id, dir.get(), slot, base, passed, queue_dir);
  if (!handed) return handed.error();
  if (*handed) {
    history::record(t.path, history::hold_end(token, ended, yield_asked), meta);
    drop_proof();
    return lease_lost;
  }
  auto r = remove_exact(t, id, "cannot release lock " + t.path, "release", dir.get());
  if (!queue_dir.empty()) tidy_registry(base, queue_dir);
  if (!r) return r.error();
  const bool removed = *r == removal::removed;
  history::record(t.path, history::hold_end(token, removed ? ended : "lost", yield_asked), meta);
  return removed ? lease_lost : error(errc::lost, t.path);
}

}  // namespace detail

using namespace detail;

namespace {

// The gpulease lease the released holder took with the lock goes too: its
// keeper, which would give it back, may be gone (lease_join.hpp). Only the
// plain lock and slot 0 take one.
void lease_left(const snapshot& s, const info& released) {
  const bool slot0 = !s.meta_exists || !s.meta.gpu || *s.meta.gpu == 0;
  if (slot0 && released.pid) give_back_lease_of(*released.pid);
}

// release_by() where the lock directory is gpulease's lease directory too
// (shared_dir.hpp): the matched holder's meta.json and markers go, the
// directory stays; a holder is matched by its token, its v1 record's pid,
// or by force.
result<release_outcome> release_shared_by(const target& t, const release_request& req, milliseconds ttl) {
  const process_view pv = process_view::real();
  const auto lpv = gpulease::lease_process_view::real();
  for (int attempt = 0;; ++attempt) {
    auto d = inspect_shared(t, ttl.count(), default_grace.count(), pv, lpv, nullptr, false);
    if (!d) return d.error();
    release_outcome out;
    out.before = d->i;
    const snapshot& s = d->o.snap;
    if (!s.present) return out;
    if (!s.is_dir) return not_a_lock_directory(t.path, s);
    if (d->v.not_a_lock()) return not_a_lock_error(t.path, d->v);
    if (!s.meta_exists) return out;
    // The pid of a v1 record (a v1 runner's or offload-lock's): a gpulease
    // claim names its holder too, but is gpulease's to release (--force
    // alone removes it).
    const bool matches = req.force || (!req.token.empty() && req.token == d->i.token) ||
                         (req.pid > 0 && s.meta.js_pid && *s.meta.js_pid == static_cast<double>(req.pid));
    if (!matches) {
      out.status = d->i.held ? release_status::not_owner : release_status::already_free;
      return out;
    }
    sys::crash_point("release.inspected");
    auto r = give_back_shared(t, d->o);
    if (!r) return r.error();
    if (*r == removal::removed) {
      out.status = release_status::released;
      history::record(t.path, history::released_by(d->i, req.force ? "force" : !req.token.empty() ? "token" : "pid"));
      return out;
    }
    // Changed hands while we looked: judge the new holder.
    if (attempt >= 100) return error(errc::busy, t.path);
  }
}

}  // namespace

result<release_outcome> release_by(const std::string& path, const release_request& req, milliseconds ttl) {
  if (etcd::is_etcd(path)) return etcd::release_by(path, req);
  auto t = open_target(path);
  if (!t) {
    if (t.error().code() == std::errc::no_such_file_or_directory)
      return error(sys::errno_code(std::errc::no_such_file_or_directory), missing_parent(path));
    return t.error();
  }
  if (lease_sharing(path)) return release_shared_by(*t, req, ttl);
  for (int attempt = 0;; ++attempt) {
    auto d = inspect_target(*t, ttl.count(), default_grace.count(), process_view::real(), nullptr, false);
    if (!d) return d.error();
    release_outcome out;
    out.before = d->i;
    const snapshot& s = d->o.snap;
    if (!s.present) return out;
    if (!s.is_dir) return not_a_lock_directory(path, s);
    if (d->v.not_a_lock()) return not_a_lock_error(path, d->v);
    const bool matches = req.force || (!req.token.empty() && req.token == d->i.token) ||
                         (req.pid > 0 && d->i.pid && *d->i.pid == req.pid);
    if (!matches) {
      out.status = d->i.held ? release_status::not_owner : release_status::already_free;
      return out;
    }
    if (d->o.dir.valid())
      if (auto e = check_lock_contents(d->o.dir.get(), path)) return e;
    sys::crash_point("release.inspected");
    // Whatever is decided from here is decided under the movers' flock
    // (reclaim.hpp): the path must still name what was inspected once it is
    // held, or the lock changed hands meanwhile (its keeper released it, a
    // reclaimer took it) and it is judged again.
    std::optional<mover_lock> movers;
    if (d->o.dir.valid()) {
      movers.emplace(d->o.dir.get());
      auto now = sys::stat_at(t->parent.get(), t->name, path);
      if (!now || now->id != s.id) {
        if (attempt >= 100) return error(errc::busy, path);
        continue;
      }
    }
    // Handed to the next waiter in line when one is staged for it.
    if (d->o.dir.valid() && s.meta_exists) {
      const std::set<std::string> skip(s.meta.passed_over.begin(), s.meta.passed_over.end());
      const int slot = s.meta.gpu ? static_cast<int>(*s.meta.gpu) : 0;
      auto handed = hand_to_next(*t, s.id, d->o.dir.get(), slot, queue_base(path, slot), skip);
      if (handed && *handed) {
        out.status = release_status::released;
        lease_left(s, d->i);
        return out;
      }
    }
    auto r = remove_exact(*t, s.id, "cannot release lock " + path, "release");
    movers.reset();
    d->o.dir.reset();
    if (!r) return r.error();
    if (*r == removal::removed) {
      out.status = release_status::released;
      history::record(path, history::released_by(d->i, req.force ? "force" : !req.token.empty() ? "token" : "pid"));
      lease_left(s, d->i);
      return out;
    }
    // Replaced while we looked: judge the new one. Bounded, since each round
    // means another participant took or released the lock meanwhile.
    if (attempt >= 100) return error(errc::busy, path);
  }
}

}  // namespace offload_lock
