// A lock directory shared with gpulease. See shared_dir.hpp.
#include "shared_dir.hpp"

#include <algorithm>

#include "gpulease/epoch.hpp"
#include "gpulease/look.hpp"
#include "gpulease/record.hpp"
#include "gpulease/shared.hpp"
#include "history.hpp"
#include "meta.hpp"
#include "offload_lock/inspect.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/test_hooks.hpp"

namespace offload_lock::detail {

namespace gl = gpulease;

namespace {

bool is(const error& e, std::errc c) { return e.code() == c; }

// A failure to read meta.json that is a fact about the file (absent, a
// symlink or something else planted there) rather than a failure of this
// reader (lock_dir.cpp reads it by the same rule).
bool about_the_file(const error& e) {
  return is(e, std::errc::no_such_file_or_directory) || is(e, std::errc::too_many_symbolic_link_levels) ||
         is(e, std::errc::invalid_argument) || is(e, std::errc::is_a_directory);
}

verdict with(judgment state, std::string reason) {
  verdict v;
  v.state = state;
  v.reason = std::move(reason);
  v.watch_contents = true;
  return v;
}

std::string ms_text(std::int64_t ms) { return describe_duration(milliseconds(ms)); }

// gpulease's verdict in the lock judgment's words.
verdict from_lease(const gl::lease_verdict& l) {
  switch (l.state) {
    case gl::lease_state::alive: {
      verdict v = with(judgment::held, "gpulease: " + l.why);
      v.holder_pid = l.holder_pid;
      v.changes_at_ms = l.changes_at_ms;
      v.incomplete = l.in_progress;
      return v;
    }
    case gl::lease_state::dead: return with(judgment::stale, "gpulease: " + l.why);
    case gl::lease_state::unknown: {
      verdict v = with(judgment::unknown, "gpulease: " + l.why);
      v.error = EIO;
      return v;
    }
    case gl::lease_state::free: break;
  }
  return with(judgment::absent, "no claim");
}

// A record for both protocols is held while either calls it held; it can
// change by time alone only when every side that holds it can.
verdict either_holds(verdict v1, verdict lease) {
  const bool a = v1.state == judgment::held, b = lease.state == judgment::held;
  if (a && b) {
    v1.changes_at_ms = v1.changes_at_ms > 0 && lease.changes_at_ms > 0 ? std::max(v1.changes_at_ms, lease.changes_at_ms) : 0;
    if (!v1.holder_pid) v1.holder_pid = lease.holder_pid;
    return v1;
  }
  if (a) return v1;
  if (b) return lease;
  if (v1.unknown()) return v1;
  if (lease.unknown()) return lease;
  v1.reason += "; " + lease.reason;
  return v1;
}

}  // namespace

result<shared_observed> observe_shared(const target& t) {
  shared_observed so;
  snapshot& s = so.o.snap;
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!st) {
    if (is(st.error(), std::errc::no_such_file_or_directory)) {
      so.lease.dir_present = false;
      return so;
    }
    return st.error();
  }
  s.present = true;
  s.is_dir = st->is_dir;
  s.is_symlink = st->is_symlink;
  s.id = st->id;
  s.dir_mtime_ms = st->mtime_ms;
  s.owner_uid = st->uid;
  s.dir_mode = st->mode;
  s.first_seen_age_ms = std::max<std::int64_t>(0, sat_sub(sys::now_ms(), st->mtime_ms));
  if (!st->is_dir) return so;
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    if (is(d.error(), std::errc::no_such_file_or_directory)) {
      s.present = false;
      so.lease.dir_present = false;
    } else {
      s.look_errno = d.error().code().value();
      s.look_failed = "opening " + t.path;
      so.lease.claim.st = gl::file_read::state::unreadable;
      so.lease.claim.error = d.error().message();
    }
    return so;
  }
  if (auto fst = sys::stat_fd(d->get(), t.path)) {
    s.id = fst->id;
    s.dir_mtime_ms = fst->mtime_ms;
    s.owner_uid = fst->uid;
    s.dir_mode = fst->mode;
  }
  if (s.dir_mode & 02000)
    if (auto pst = sys::stat_fd(t.parent.get(), "parent of " + t.path)) s.parent_mode = pst->mode;
  so.born_ms = sys::birth_ms(d->get());
  const std::string meta_shown = t.path + "/" + meta_file_name;
  auto mb = sys::read_file_at(d->get(), meta_file_name, meta_cap, meta_shown, true);
  if (mb) {
    s.meta_exists = true;
    s.meta_mtime_ms = mb->st.mtime_ms;
    s.proof_of_life = mb->write_lock == sys::lock_probe::locked;
    s.proof_unknown = mb->write_lock == sys::lock_probe::unknown;
    gl::file_read& c = so.lease.claim;
    if (mb->truncated) {
      c.st = gl::file_read::state::unreadable;
      c.error = meta_shown + " is larger than " + std::to_string(meta_cap) + " bytes";
    } else {
      s.meta = parse_meta(mb->bytes);
      c.st = gl::file_read::state::present;
      c.bytes = std::move(mb->bytes);
      c.mtime_ms = mb->st.mtime_ms;
      c.id = mb->st.id;
      if (auto r = gl::parse_record(c.bytes)) {
        const std::string hb = gl::heartbeat_name(r->epoch);
        so.lease.heartbeat = gl::read_lease_file(d->get(), hb, t.path + "/" + hb);
      }
    }
  } else if (about_the_file(mb.error())) {
    // No claim: what else is in the directory tells gpulease's container
    // (or a claim in progress) from a directory that is no lock.
    auto names = sys::list_dir(d->get(), t.path);
    if (!names && is(names.error(), std::errc::no_such_file_or_directory)) {
      // Removed since it was opened: absent, as when the open finds nothing.
      s.present = false;
      so.lease.dir_present = false;
    } else if (!names) {
      s.look_errno = names.error().code().value();
      s.look_failed = "listing " + t.path;
    } else {
      for (const auto& n : *names) {
        if (n.rfind("hb.", 0) == 0 || n.rfind("unloaded.", 0) == 0) so.lease_files = true;
        if (!gl::allowed_in_shared_lock_dir(n)) {
          s.foreign_entry = n;
          break;
        }
        auto est = sys::stat_at(d->get(), n, t.path + "/" + n);
        if (!est && is(est.error(), std::errc::no_such_file_or_directory)) continue;
        if (!est) {
          s.look_errno = est.error().code().value();
          s.look_failed = "looking at " + t.path + "/" + n;
          break;
        }
        if (!est->is_regular) {
          s.foreign_entry = n;
          break;
        }
      }
      s.listed_empty = s.foreign_entry.empty() && names->empty();
    }
  } else {
    s.look_errno = mb.error().code().value();
    s.look_failed = "reading " + meta_shown;
    so.lease.claim.st = gl::file_read::state::unreadable;
    so.lease.claim.error = mb.error().message();
  }
  so.o.dir = std::move(*d);
  return so;
}

verdict judge_shared(const shared_observed& so, std::int64_t now, std::int64_t ttl, std::int64_t grace,
                     const process_view& pv, const gl::lease_process_view& lpv) {
  const snapshot& s = so.o.snap;
  if (s.present && !s.is_dir) return with(judgment::not_a_lock, "not a directory");
  if (!s.present || s.look_errno) return judge(s, now, ttl, grace, pv);

  if (!s.meta_exists) {
    if (auto why = not_made_by_mkdir(s)) return with(judgment::not_a_lock, *why);
    if (!s.foreign_entry.empty()) {
      verdict v = with(judgment::not_a_lock, "a directory holding '" + s.foreign_entry +
                                                 "', which neither a lock nor gpulease makes there");
      v.error = static_cast<int>(std::errc::directory_not_empty);
      return v;
    }
    // No claim. A v1 runner's mkdir makes an empty directory and writes its
    // meta.json next (B3): an empty one born less than the grace ago may be
    // that. Every other one is gpulease's container, or one emptied by a
    // release or a takeover: its birth is older (emptying it changes its
    // mtime, not its birth), or it still holds a lease's files (a dead
    // holder's heartbeat, say), which no v1 runner's new directory holds.
    const std::int64_t born = so.born_ms.value_or(s.dir_mtime_ms);
    const std::int64_t age = std::max(sat_sub(now, born), s.unchanged_for_ms);
    if (age < grace && !so.lease_files) {
      verdict v = with(judgment::held, "an empty directory " + ms_text(age) + " old (within the " + ms_text(grace) +
                                           " grace of a v1 runner between its mkdir and its meta.json)");
      v.incomplete = true;
      v.changes_at_ms = sat_add(now, grace - age);
      return v;
    }
    return with(judgment::absent, "no claim in the directory: free to claim in it");
  }
  // A live offload-lock holder's proof (or its probe failing) settles it,
  // as for any lock.
  if (s.proof_of_life || s.proof_unknown) return judge(s, now, ttl, grace, pv);

  const gl::file_read& c = so.lease.claim;
  std::optional<gl::record> rec;
  if (c.st == gl::file_read::state::present) rec = gl::parse_record(c.bytes);
  const bool lease_claim = rec && rec->epoch >= 1;
  const bool v1_record = !s.meta.node_null && s.meta.js_pid.has_value();
  if (!lease_claim && !v1_record && (s.meta.node_null || !rec)) {
    // Unparseable for one side: a claim being written, by a v1 runner or by
    // gpulease (its O_EXCL create, then its write), whose own grace is 10 s.
    const std::int64_t wait = std::max(grace, gl::claim_grace_ms);
    const std::int64_t quiet = std::max(sat_sub(now, s.meta_mtime_ms), s.unchanged_for_ms);
    if (quiet < wait) {
      verdict v = with(judgment::held, "meta.json does not parse (within the " + ms_text(wait) +
                                           " grace of a claim being written)");
      v.incomplete = true;
      v.changes_at_ms = sat_add(now, wait - quiet);
      return v;
    }
    verdict v = with(judgment::stale, "meta.json has not parsed for " + ms_text(quiet));
    v.incomplete = true;
    return v;
  }
  if (!lease_claim) return judge(s, now, ttl, grace, pv);
  verdict lease = from_lease(gl::judge_lease(so.lease, now, lpv));
  if (!v1_record) return lease;
  return either_holds(judge(s, now, ttl, grace, pv), std::move(lease));
}

result<detailed> inspect_shared(const target& t, std::int64_t ttl, std::int64_t grace, const process_view& pv,
                                const gl::lease_process_view& lpv, watch_clock* seen, bool idle_mark) {
  auto so = observe_shared(t);
  if (!so) return so.error();
  if (seen) seen->update(so->o.snap);
  const std::int64_t now = sys::now_ms();
  detailed d;
  d.v = judge_shared(*so, now, ttl, grace, pv, lpv);
  d.o = std::move(so->o);
  describe(t, d, now, ttl, pv, idle_mark);
  // gpulease's container without a claim is no lock at all, as gpulease's
  // readers see it: "free", not a stale lock of nobody to be reclaimed.
  if (d.v.state == judgment::absent && d.o.snap.present && !d.o.snap.meta_exists) d.i.present = false;
  // A gpulease claim without v1 keys names its holder by its own keys.
  if (!d.i.pid && so->lease.claim.st == gl::file_read::state::present)
    if (auto r = gl::parse_record(so->lease.claim.bytes); r && r->epoch >= 1) {
      if (r->pid > 0) d.i.pid = r->pid;
      if (d.i.label.empty()) d.i.label = "gpulease " + gl::describe_holder(*r);
      if (!d.i.started_at && r->acquired_at_ms > 0) {
        d.i.started_at = r->acquired_at_ms;
        d.i.held_for = milliseconds(std::max<std::int64_t>(0, sat_sub(now, r->acquired_at_ms)));
      }
    }
  return d;
}

namespace {

// Removes the claim read in `so` (its directory open there): moved aside,
// then removed only if it is the file read (another goes back), then its
// holder's heartbeat and unloaded marker when offload-lock made the claim.
result<removal> remove_claim(const target& t, const shared_observed& so, const std::string& why) {
  const int dir = so.o.dir.get();
  const std::string meta_shown = t.path + "/" + meta_file_name;
  const std::string aside = gl::claim_aside_prefix + unique_suffix();
  error e = sys::rename_noreplace(dir, meta_file_name, aside, meta_shown);
  if (e && is(e, std::errc::invalid_argument)) e = sys::rename_at(dir, meta_file_name, aside, meta_shown);
  if (e) {
    if (is(e, std::errc::no_such_file_or_directory)) return removal::changed;
    return error(e.code(), "cannot remove " + meta_shown + " (" + why + "): " + e.message());
  }
  sys::crash_point("shared.claim-moved");
  auto moved = sys::stat_at(dir, aside, t.path + "/" + aside);
  if (!moved || moved->id != so.lease.claim.id) {
    // A claim made after the look (a gpulease acquirer took a dead one
    // over first and claimed): it is live; it goes back.
    if (moved && sys::rename_noreplace(dir, aside, meta_file_name, meta_shown))
      return error(errc::lost, "moved a live claim aside at " + meta_shown + " and could not put it back; it is at " +
                                   t.path + "/" + aside);
    return removal::changed;
  }
  if (auto u = sys::unlink_at(dir, aside, false, t.path + "/" + aside)) return u;
  // The holder's own markers, when offload-lock made the claim (its
  // release removes the same); gpulease's stay for gpulease.
  if (auto r = gl::parse_record(so.lease.claim.bytes); r && r->origin == "offload-lock")
    for (const std::string& n : {gl::heartbeat_name(r->epoch), gl::unloaded_name(r->epoch)})
      (void)sys::unlink_at(dir, n, false, t.path + "/" + n);
  return removal::removed;
}

}  // namespace

result<removal> take_over_shared(const target& t, const observed& judged, std::int64_t ttl, std::int64_t grace,
                                 const process_view& pv, const gl::lease_process_view& lpv, bool serialize) {
  if (!judged.dir.valid()) return removal::changed;
  // One mover at a time: offload-lock's reclaimers, releasers and lease
  // takeovers of this directory all take this flock (a failure other than
  // another holder goes ahead unserialized, as reclaim() does).
  if (serialize)
    if (auto e = sys::try_flock_exclusive(judged.dir.get()); e && is(e, std::errc::operation_would_block))
      return removal::contended;
  sys::crash_point("shared.takeover-flocked");
  auto again = observe_shared(t);
  if (!again) return again.error();
  snapshot& s = again->o.snap;
  if (!s.present || s.id != judged.snap.id || !s.meta_exists) return removal::changed;
  if (s.meta_mtime_ms == judged.snap.meta_mtime_ms) s.unchanged_for_ms = judged.snap.unchanged_for_ms;
  const verdict v = judge_shared(*again, sys::now_ms(), ttl, grace, pv, lpv);
  if (!v.stale() || again->lease.claim.st != gl::file_read::state::present) return removal::changed;
  auto r = remove_claim(t, *again, v.reason);
  if (r && *r == removal::removed) history::record(t.path, history::takeover(s, v.reason));
  return r;
}

result<removal> give_back_shared(const target& t, const observed& judged) {
  if (!judged.dir.valid()) return removal::changed;
  mover_lock movers(judged.dir.get());
  auto again = observe_shared(t);
  if (!again) return again.error();
  const snapshot& s = again->o.snap;
  // Still the holder that was matched: the same directory, and a meta.json
  // with the same token and time (a holder's refresh changes neither its
  // token nor, between two looks this close, anything but its mtime).
  if (!s.present || s.id != judged.snap.id || !s.meta_exists || !judged.snap.meta_exists ||
      s.meta.token != judged.snap.meta.token || s.meta.started_at != judged.snap.meta.started_at ||
      again->lease.claim.st != gl::file_read::state::present)
    return removal::changed;
  return remove_claim(t, *again, "released");
}

namespace {

// Claims inside the directory judged (`judged_dir`): a complete meta.json,
// write-locked (the proof of life), made under a private name and moved
// onto meta.json without replacing; O_EXCL where the rename flag is refused.
result<claim> claim_inside(const target& t, const sys::file_id& judged_dir, const std::string& bytes) {
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    if (is(d.error(), std::errc::no_such_file_or_directory) || is(d.error(), std::errc::not_a_directory))
      return claim{};
    return d.error();
  }
  auto dst = sys::stat_fd(d->get(), t.path);
  if (!dst) return dst.error();
  // Replaced since it was judged free (a v1 runner's new directory, say).
  if (dst->id != judged_dir) return claim{};
  // Not while another offload-lock process moves a claim aside to look at
  // it (take_over_shared, a release): a claim moved aside by mistake is put
  // back, and one made here meanwhile would stand in its way.
  mover_lock movers(d->get());
  gl::clean_private_leftovers(d->get(), t.path);
  const std::string meta_shown = t.path + "/" + meta_file_name;
  const std::string temp = gl::claim_temp_prefix + unique_suffix();
  const std::string temp_shown = t.path + "/" + temp + " (claiming " + t.path + ")";
  auto gone = [](const error& e) {
    return is(e, std::errc::no_such_file_or_directory) || is(e, std::errc::file_exists);
  };
  auto lock_it = [](int meta, const std::string& shown) {
    error e = sys::chmod_fd(meta, meta_mode, shown);
    return e ? e : sys::ofd_lock(meta, true);
  };
  auto taken = [&](sys::fd meta) {
    claim c;
    c.taken = true;
    c.dir = std::move(*d);
    c.meta = std::move(meta);
    c.id = dst->id;
    return c;
  };
  auto f = sys::create_file_at(d->get(), temp, bytes, meta_mode, temp_shown);
  if (!f) return gone(f.error()) ? result<claim>(claim{}) : result<claim>(f.error());
  if (auto e = lock_it(f->get(), temp_shown)) {
    (void)sys::unlink_at(d->get(), temp, false, temp_shown);
    return e;
  }
  sys::crash_point("shared.claim-staged");
  error e = sys::rename_noreplace(d->get(), temp, meta_file_name, meta_shown);
  if (!e) {
    sys::crash_point("shared.claimed");
    return taken(std::move(*f));
  }
  (void)sys::unlink_at(d->get(), temp, false, temp_shown);
  if (gone(e)) return claim{};
  if (!is(e, std::errc::invalid_argument)) return e;
  // No RENAME_NOREPLACE here: O_EXCL, as gpulease creates its claim
  // (readers may see it empty for a moment, as they see gpulease's).
  auto m = sys::create_file_at(d->get(), meta_file_name, bytes, meta_mode, meta_shown);
  if (!m) return gone(m.error()) ? result<claim>(claim{}) : result<claim>(m.error());
  if (auto le = lock_it(m->get(), meta_shown)) {
    (void)sys::unlink_at(d->get(), meta_file_name, false, meta_shown);
    return le;
  }
  return taken(std::move(*m));
}

}  // namespace

result<claim> claim_shared(const target& t, const snapshot& judged, const std::string& record,
                           const shared_lease& lease) {
  auto epoch = gl::issue_epoch(lease.loc.gpu_dir);
  if (!epoch) return epoch.error();
  gl::record rec = gl::lease_record_for(*epoch, lease.options);
  std::string bytes = gl::append_record(record, rec);
  auto c = judged.present ? claim_inside(t, judged.id, bytes) : try_claim(t, bytes);
  if (!c || !c->taken) return c;
  auto mst = sys::stat_fd(c->meta.get(), t.path + "/" + meta_file_name);
  if (!mst) {
    // Ours, but without its identity it cannot be released as ours:
    // given back now.
    (void)sys::unlink_at(c->dir.get(), meta_file_name, false, t.path + "/" + meta_file_name);
    return mst.error();
  }
  c->lease = std::make_unique<gl::lease_hold>(gl::lease_hold::claimed(lease.loc.dir, std::move(rec), lease.options.cls, mst->id));
  c->written = std::move(bytes);
  return c;
}

}  // namespace offload_lock::detail
