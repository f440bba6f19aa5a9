// Holding a gpulease lease. See hold.hpp.
#include "gpulease/hold.hpp"

#include "gpulease/epoch.hpp"
#include "gpulease/look.hpp"
#include "gpulease/record.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"

namespace offload_lock::detail::gpulease {

const char* to_string(lease_class c) noexcept { return c == lease_class::text ? "text" : "media"; }

std::optional<lease_class> parse_lease_class(std::string_view s) {
  if (s == "media") return lease_class::media;
  if (s == "text") return lease_class::text;
  return std::nullopt;
}

const char* to_string(take_status s) noexcept {
  switch (s) {
    case take_status::held: return "held";
    case take_status::busy: return "busy";
    case take_status::unknown: return "unknown";
    case take_status::error: return "error";
  }
  return "?";
}

namespace {

bool is(const error& e, std::errc c) { return e.code() == sys::errno_code(c); }

std::string private_suffix() { return std::to_string(sys::self_pid()) + "-" + sys::random_hex(6); }

// The pid in one of our private names in a lease directory, 0 for any
// other name: .meta.json.claim-<pid>-<hex>, .meta.json.reclaim-<pid>-<hex>,
// hb.<epoch>.<pid>-<hex>.tmp.
std::int64_t private_name_pid(const std::string& n) {
  std::size_t at = std::string::npos;
  for (const char* p : {claim_temp_prefix, claim_aside_prefix})
    if (n.rfind(p, 0) == 0) at = std::string(p).size();
  if (at == std::string::npos) {
    if (n.rfind("hb.", 0) != 0 || n.size() < 4 || n.compare(n.size() - 4, 4, ".tmp") != 0) return 0;
    const auto dot = n.find('.', 3);
    if (dot == std::string::npos) return 0;
    at = dot + 1;
  }
  std::int64_t pid = 0;
  std::size_t k = at;
  for (; k < n.size() && n[k] >= '0' && n[k] <= '9' && pid < sys::max_pid; ++k) pid = pid * 10 + (n[k] - '0');
  return k > at && k < n.size() && n[k] == '-' ? pid : 0;
}

// Our private names left by a process killed while it made them.
void clean_leftovers(int dir, const std::string& shown) {
  auto names = sys::list_dir(dir, shown);
  if (!names) return;
  for (const auto& n : *names) {
    const std::int64_t pid = private_name_pid(n);
    if (pid <= 0 || pid == sys::self_pid() || sys::probe(pid) == sys::liveness::alive) continue;
    (void)sys::unlink_at(dir, n, false, shown + "/" + n);
  }
}

// Makes directory `path` (missing parents are an error) as open to others
// as `parent` is: gpulease's MkdirAll leaves it 0777 less the creator's
// umask, so under the world-writable root upstream prescribes, a lease
// directory first made by a user with umask 022 would shut every other
// user's participants out. Existing directories are left as they are.
error make_dir_like_parent(const std::string& parent, const std::string& path) {
  if (auto e = sys::mkdir_at(sys::cwd, path, 0777, path)) return is(e, std::errc::file_exists) ? error{} : e;
  auto p = sys::open_dir(sys::cwd, parent, /*nofollow=*/false, parent);
  auto d = sys::open_dir(sys::cwd, path, /*nofollow=*/true, path);
  if (!p || !d) return {};
  auto pst = sys::stat_fd(p->get(), parent), dst = sys::stat_fd(d->get(), path);
  if (pst && dst && (pst->mode & 0777) != (dst->mode & 0777) && dst->uid == sys::effective_uid())
    (void)sys::chmod_fd(d->get(), pst->mode & 0777, path);
  return {};
}

// The lease directory, opened; made when missing (and its parent, the gpu
// directory, as gpulease's MkdirAll makes both under an existing root).
result<sys::fd> open_or_make(const lease_location& loc) {
  auto d = sys::open_dir(sys::cwd, loc.dir, /*nofollow=*/false, loc.dir);
  if (d || !is(d.error(), std::errc::no_such_file_or_directory)) return d;
  if (!loc.root.empty())
    if (auto e = make_dir_like_parent(loc.root, loc.gpu_dir)) return e;
  if (auto e = make_dir_like_parent(loc.gpu_dir, loc.dir)) return e;
  return sys::open_dir(sys::cwd, loc.dir, /*nofollow=*/false, loc.dir);
}

lease_snapshot read_at(int dir, const std::string& shown) {
  lease_snapshot s;
  s.claim = read_lease_file(dir, claim_name, shown + "/" + claim_name);
  if (s.claim.st != file_read::state::present) return s;
  if (auto r = parse_record(s.claim.bytes)) {
    const std::string hb = heartbeat_name(r->epoch);
    s.heartbeat = read_lease_file(dir, hb, shown + "/" + hb);
  }
  return s;
}

lease_wake wake_for(const std::string& dir, const lease_verdict& v) {
  lease_wake w;
  w.dir = dir;
  w.pid = v.holder_pid;
  w.at_ms = v.changes_at_ms;
  return w;
}

record new_record(std::uint64_t epoch, const take_options& o) {
  record r;
  const std::int64_t now = sys::now_ms();
  r.epoch = epoch;
  r.lease_class = to_string(o.cls);
  r.pid = o.holder_pid > 0 ? o.holder_pid : sys::self_pid();
  if (auto s = sys::start_of(r.pid)) r.start_ticks = static_cast<std::int64_t>(s->ticks);
  r.job_id = o.job_id;
  r.origin = o.origin;
  r.reason = o.reason;
  r.acquired_at_ms = now;
  r.expires_at_ms = now + (o.window_ms > 0 ? o.window_ms : default_window_ms);
  r.renewed_at_ms = now;
  return r;
}

// The claim made complete under a private name and moved into place
// without replacing; the O_EXCL create where the rename flag is refused.
// nullopt: someone else's claim is there.
result<std::optional<sys::file_id>> place_claim(int dir, const std::string& shown, const std::string& bytes) {
  const std::string claim_shown = shown + "/" + claim_name;
  const std::string temp = claim_temp_prefix + private_suffix();
  sys::file_id id;
  {
    auto f = sys::create_file_at(dir, temp, bytes, 0666, shown + "/" + temp);
    if (!f) return f.error();
    auto st = sys::stat_fd(f->get(), shown + "/" + temp);
    if (!st) {
      (void)sys::unlink_at(dir, temp, false, shown + "/" + temp);
      return st.error();
    }
    id = st->id;
  }
  sys::crash_point("lease.claim-staged");
  error e = sys::rename_noreplace(dir, temp, claim_name, claim_shown);
  if (!e) return std::optional<sys::file_id>(id);
  (void)sys::unlink_at(dir, temp, false, shown + "/" + temp);
  if (is(e, std::errc::file_exists)) return std::optional<sys::file_id>();
  if (!is(e, std::errc::invalid_argument)) return e;
  auto f = sys::create_file_at(dir, claim_name, bytes, 0666, claim_shown);
  if (!f) {
    if (is(f.error(), std::errc::file_exists)) return std::optional<sys::file_id>();
    return f.error();
  }
  auto st = sys::stat_fd(f->get(), claim_shown);
  if (!st) return st.error();
  return std::optional<sys::file_id>(st->id);
}

}  // namespace

lease_hold::take_result lease_hold::try_take(const lease_location& loc, const take_options& o,
                                             const lease_process_view& pv) {
  take_result res;
  auto fail = [&](error e) {
    res.status = take_status::error;
    res.err = std::move(e);
    return std::move(res);
  };
  auto dir = open_or_make(loc);
  if (!dir) return fail(dir.error());
  clean_leftovers(dir->get(), loc.dir);
  // gpulease's TryAcquire makes three attempts: a claim taken over, or made
  // by another between our look and our claim, is looked at again.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const lease_snapshot snap = read_at(dir->get(), loc.dir);
    res.seen = judge_lease(snap, sys::now_ms(), pv);
    if (res.seen.state == lease_state::alive || res.seen.state == lease_state::unknown) {
      res.status = res.seen.state == lease_state::alive ? take_status::busy : take_status::unknown;
      res.wake = wake_for(loc.dir, res.seen);
      return res;
    }
    if (res.seen.state == lease_state::dead) {
      auto gone = take_over(loc.dir, snap.claim.id, pv);
      if (!gone) return fail(gone.error());
      res.took_over = res.took_over || *gone;
      continue;  // look again: ours, or somebody's new claim
    }
    auto epoch = issue_epoch(loc.gpu_dir);
    if (!epoch) return fail(epoch.error());
    record r = new_record(*epoch, o);
    const std::string bytes = o.leading_object.empty() ? serialize_record(r) : append_record(o.leading_object, r);
    auto placed = place_claim(dir->get(), loc.dir, bytes);
    if (!placed) return fail(placed.error());
    if (*placed) {
      sys::crash_point("lease.claimed");
      res.status = take_status::held;
      res.hold.emplace(lease_hold(loc.dir, std::move(r), o.cls, **placed, sys::self_pid()));
      return res;
    }
  }
  // Still contended after three looks: whoever is there now.
  res.seen = judge_lease(read_at(dir->get(), loc.dir), sys::now_ms(), pv);
  res.status = res.seen.state == lease_state::unknown ? take_status::unknown : take_status::busy;
  res.wake = wake_for(loc.dir, res.seen);
  // Free or dead by now: changing hands among others; look again shortly.
  if (res.seen.state == lease_state::free || res.seen.state == lease_state::dead) res.wake.at_ms = sys::now_ms() + 10;
  return res;
}

lease_hold::lease_hold(lease_hold&& o) noexcept
    : dir_(std::move(o.dir_)),
      rec_(std::move(o.rec_)),
      cls_(o.cls_),
      id_(o.id_),
      owner_pid_(o.owner_pid_),
      released_(o.released_) {
  o.released_ = true;
}

lease_hold& lease_hold::operator=(lease_hold&& o) noexcept {
  if (this != &o) {
    if (!released_) (void)release();
    dir_ = std::move(o.dir_);
    rec_ = std::move(o.rec_);
    cls_ = o.cls_;
    id_ = o.id_;
    owner_pid_ = o.owner_pid_;
    released_ = o.released_;
    o.released_ = true;
  }
  return *this;
}

lease_hold::~lease_hold() {
  if (!released_) (void)release();
}

error lease_hold::check() const {
  auto d = sys::open_dir(sys::cwd, dir_, /*nofollow=*/false, dir_);
  if (!d) {
    if (is(d.error(), std::errc::no_such_file_or_directory)) return error(errc::lost, dir_ + " is gone");
    return d.error();
  }
  const file_read f = read_lease_file(d->get(), claim_name, claim_path());
  if (f.st == file_read::state::absent) return error(errc::lost, claim_path() + " is gone");
  if (f.st == file_read::state::unreadable) return error(sys::errno_code(std::errc::io_error), f.error);
  auto r = parse_record(f.bytes);
  if (f.id != id_ || !r || r->epoch != rec_.epoch)
    return error(
        errc::lost,
        claim_path() + " is another holder's now" +
            (r ? " (epoch " + std::to_string(r->epoch) + ", ours " + std::to_string(rec_.epoch) + ")" : std::string()));
  return {};
}

error lease_hold::renew() {
  if (released_) return error(errc::lost, claim_path() + " was released");
  if (sys::self_pid() != owner_pid_) return error(errc::lost, claim_path() + " is held by the parent process");
  if (auto e = check()) return e;
  auto d = sys::open_dir(sys::cwd, dir_, /*nofollow=*/false, dir_);
  if (!d) return d.error();
  const std::string hb = heartbeat_name(rec_.epoch);
  const std::string temp = hb + "." + private_suffix() + ".tmp";
  {
    auto f = sys::create_file_at(d->get(), temp, std::to_string(sys::now_ms()), 0666, dir_ + "/" + temp);
    if (!f) return f.error();
  }
  if (auto e = sys::rename_at(d->get(), temp, hb, dir_ + "/" + hb)) {
    (void)sys::unlink_at(d->get(), temp, false, dir_ + "/" + temp);
    return e;
  }
  return {};
}

error lease_hold::release() {
  if (released_) return {};
  released_ = true;
  // A forked child's copy: the lease is its parent's to release.
  if (sys::self_pid() != owner_pid_) return {};
  if (auto e = check()) return e;
  auto d = sys::open_dir(sys::cwd, dir_, /*nofollow=*/false, dir_);
  if (!d) return d.error();
  // The markers of this lease first, as gpulease orders it: none of ours
  // may outlive the claim under an epoch a later lease could match.
  for (const std::string& n : {unloaded_name(rec_.epoch), heartbeat_name(rec_.epoch)})
    (void)sys::unlink_at(d->get(), n, false, dir_ + "/" + n);
  sys::crash_point("lease.release-markers");
  auto st = sys::stat_at(d->get(), claim_name, claim_path());
  if (!st || st->id != id_) return error(errc::lost, claim_path() + " was replaced while it was released");
  return sys::unlink_at(d->get(), claim_name, false, claim_path());
}

std::optional<lease_hold> lease_hold::left_by(const std::string& dir, std::int64_t holder_pid,
                                              std::string_view origin) {
  auto d = sys::open_dir(sys::cwd, dir, /*nofollow=*/false, dir);
  if (!d || holder_pid <= 0) return std::nullopt;
  const file_read f = read_lease_file(d->get(), claim_name, dir + "/" + claim_name);
  if (f.st != file_read::state::present) return std::nullopt;
  auto r = parse_record(f.bytes);
  if (!r || r->pid != holder_pid || r->origin != origin) return std::nullopt;
  const lease_class c = parse_lease_class(r->lease_class).value_or(lease_class::media);
  return lease_hold(dir, std::move(*r), c, f.id, sys::self_pid());
}

lease_hold lease_hold::claimed(std::string dir, record rec, lease_class cls, const sys::file_id& claim_id) {
  return lease_hold(std::move(dir), std::move(rec), cls, claim_id, sys::self_pid());
}

record lease_record_for(std::uint64_t epoch, const take_options& o) { return new_record(epoch, o); }

void clean_private_leftovers(int dir, const std::string& shown) { clean_leftovers(dir, shown); }

void lease_hold::adopt() { owner_pid_ = sys::self_pid(); }

std::vector<std::pair<std::string, std::string>> lease_hold::child_environment() const {
  return {
      {"GPU_LEASE_DIR", dir_}, {"GPU_LEASE_EPOCH", std::to_string(rec_.epoch)}, {"GPU_LEASE_CLASS", to_string(cls_)}};
}

result<bool> take_over(const std::string& dir, const sys::file_id& judged, const lease_process_view& pv) {
  auto d = sys::open_dir(sys::cwd, dir, /*nofollow=*/false, dir);
  if (!d) return d.error();
  // One offload-lock process at a time judges and moves: a second one
  // waits for the first one's outcome instead of racing it (D2).
  if (auto e = sys::try_flock_exclusive(d->get())) {
    if (e.code() == std::errc::operation_would_block) return false;
    return e;
  }
  sys::crash_point("lease.takeover-flocked");
  const lease_snapshot again = read_at(d->get(), dir);
  if (again.claim.st != file_read::state::present || again.claim.id != judged) return false;
  if (judge_lease(again, sys::now_ms(), pv).state != lease_state::dead) return false;
  const std::string claim_shown = dir + "/" + claim_name;
  const std::string aside = claim_aside_prefix + private_suffix();
  error e = sys::rename_noreplace(d->get(), claim_name, aside, claim_shown);
  if (e && is(e, std::errc::invalid_argument)) e = sys::rename_at(d->get(), claim_name, aside, claim_shown);
  if (e) {
    if (is(e, std::errc::no_such_file_or_directory)) return false;
    return error(e.code(), "cannot take over the dead lease " + claim_shown + " (" + e.message() + ")");
  }
  sys::crash_point("lease.takeover-moved");
  auto moved = sys::stat_at(d->get(), aside, dir + "/" + aside);
  if (moved && moved->id != judged) {
    // A claim made after our look (a gpulease acquirer took the dead one
    // over first and claimed): it is live; put it back.
    if (!sys::rename_noreplace(d->get(), aside, claim_name, claim_shown)) return false;
  }
  if (auto u = sys::unlink_at(d->get(), aside, false, dir + "/" + aside)) return u;
  return moved && moved->id == judged;
}

}  // namespace offload_lock::detail::gpulease
