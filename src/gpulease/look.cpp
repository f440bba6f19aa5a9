// Reading a gpulease lease directory. See look.hpp.
#include "gpulease/look.hpp"

#include <cerrno>

#include "os/clock.hpp"
#include "os/files.hpp"

namespace offload_lock::detail::gpulease {

file_read read_lease_file(int dirfd, const std::string& name, const std::string& shown) {
  file_read f;
  auto r = sys::read_file_at(dirfd, name, claim_cap, shown);
  if (!r) {
    if (r.error().code() == sys::errno_code(std::errc::no_such_file_or_directory)) return f;
    f.st = file_read::state::unreadable;
    f.error = r.error().message();
    return f;
  }
  if (r->truncated) {
    f.st = file_read::state::unreadable;
    f.error = shown + " is larger than " + std::to_string(claim_cap) + " bytes";
    return f;
  }
  f.st = file_read::state::present;
  f.bytes = std::move(r->bytes);
  f.mtime_ms = r->st.mtime_ms;
  f.id = r->st.id;
  return f;
}

lease_snapshot read_lease(const std::string& dir) {
  lease_snapshot s;
  auto d = sys::open_dir(sys::cwd, dir, /*nofollow=*/false, dir);
  if (!d) {
    if (d.error().code() == sys::errno_code(std::errc::no_such_file_or_directory)) {
      s.dir_present = false;
      return s;
    }
    s.claim.st = file_read::state::unreadable;
    s.claim.error = d.error().message();
    return s;
  }
  s.claim = read_lease_file(d->get(), claim_name, dir + "/" + claim_name);
  if (s.claim.st != file_read::state::present) return s;
  if (auto r = parse_record(s.claim.bytes)) {
    const std::string hb = heartbeat_name(r->epoch);
    s.heartbeat = read_lease_file(d->get(), hb, dir + "/" + hb);
  }
  return s;
}

lease_verdict look_lease(const std::string& dir) {
  return judge_lease(read_lease(dir), sys::now_ms(), lease_process_view::real());
}

bool lease_root_exists(const lease_location& loc) {
  const std::string& where = loc.root.empty() ? loc.gpu_dir : loc.root;
  auto d = sys::open_dir(sys::cwd, where, /*nofollow=*/false, where);
  if (!d) return false;
  if (loc.source != lease_source::gpu_lock) return true;
  // GPU_LOCK is also the v1 lock directory of sites that run no gpulease
  // at all: only gpulease's counter beside it says gpulease has been here.
  auto st = sys::stat_at(d->get(), counter_name, loc.gpu_dir + "/" + counter_name);
  return st && st->is_regular;
}

bool joinable(const lease_location& loc) {
  if (loc.source == lease_source::gpu_lock || loc.source == lease_source::explicit_dir) return false;
  return loc.refused.empty() && !loc.root.empty();
}

bool joined_by_acquisitions(const lease_location& loc) {
  return joinable(loc) && static_cast<bool>(sys::open_dir(sys::cwd, loc.root, /*nofollow=*/false, loc.root));
}

}  // namespace offload_lock::detail::gpulease
