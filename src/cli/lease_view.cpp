// The gpulease lease on the command's screens. See lease_view.hpp.
#include "cli/lease_view.hpp"

#include "offload_lock/describe.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/path.hpp"
#include "posix/os.hpp"
#include "posix/probe.hpp"

namespace offload_lock::cli {

namespace {

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string holder_text(const lease_info& i) { return describe_lease_holder(i); }

std::string window_text(const lease_info& i) {
  const std::int64_t left = i.expires_at_ms - wall_now_ms();
  if (left >= 0) return "window ends in " + describe_duration(milliseconds(left));
  return "window ended " + describe_duration(milliseconds(-left)) + " ago";
}

std::string state_text(const lease_info& i) {
  switch (i.state) {
    case lease_state::free: return "free";
    case lease_state::held:
      if (i.in_progress) return "held: " + i.why;
      return "held by " + holder_text(i) + " for " + describe_duration(i.held_for) + ", " + window_text(i) +
             (i.gpulease_readers_held ? "" : "; gpulease's readers see it free");
    case lease_state::stale: return "free (stale: " + i.why + ")";
    case lease_state::unknown: return "unknown (" + i.why + ")";
  }
  return "?";
}

}  // namespace

std::optional<lease_board> look_lease_board() {
  lease_board b;
  b.place = find_lease();
  if (!b.place.exists) return std::nullopt;
  b.info = inspect_lease(b.place.dir);
  return b;
}

bool lease_keeps_gpu(const std::optional<lease_board>& b) { return b && b->place.joined && lease_busy(b->info); }

std::string lease_busy_line(const lease_board& b, const std::string& lock_line) {
  const lease_info& i = b.info;
  std::string s;
  if (i.state == lease_state::unknown) s = "held: the gpulease lease cannot be judged (" + i.why + ")";
  else if (i.in_progress) s = "held by a gpulease holder whose claim is being written";
  else s = "held by a gpulease holder: " + holder_text(i) + " for " + describe_duration(i.held_for) + ", " + window_text(i);
  // The lock's own line is escaped already.
  return printable(s) + "; the lock itself is " + lock_line;
}

std::string lease_text(const lease_board& b) {
  return printable("gpulease: " + state_text(b.info) + " (" + b.place.dir + ")");
}

ojson lease_json(const std::optional<lease_board>& b) {
  if (!b) return nullptr;
  const lease_info& i = b->info;
  const bool claim = i.epoch != 0 || i.pid != 0 || !i.lease_class.empty();
  auto or_null = [&](auto v) { return claim ? ojson(v) : ojson(); };
  ojson j;
  j["dir"] = b->place.dir;
  j["rule"] = to_string(b->place.rule);
  j["state"] = to_string(i.state);
  j["held"] = i.state == lease_state::held;
  j["why"] = i.why;
  j["inProgress"] = i.in_progress;
  j["pid"] = or_null(i.pid);
  j["class"] = or_null(i.lease_class);
  j["epoch"] = or_null(i.epoch);
  j["reason"] = i.reason;
  j["origin"] = i.origin;
  j["jobId"] = i.job_id;
  j["acquiredAtMs"] = or_null(i.acquired_at_ms);
  j["expiresAtMs"] = or_null(i.expires_at_ms);
  j["renewedAtMs"] = or_null(i.renewed_at_ms);
  j["heldForMs"] = i.state == lease_state::held && claim ? ojson(i.held_for.count()) : ojson();
  j["gpuleaseReadersHeld"] = i.gpulease_readers_held;
  j["counter"] = i.counter ? ojson(*i.counter) : ojson();
  return j;
}

std::vector<lease_check> lease_checks(const std::string& lock_path) {
  std::vector<lease_check> out;
  const lease_place p = find_lease();
  const std::string where = p.root.empty() ? p.gpu_dir : p.root;
  const std::string via = std::string("rule ") + to_string(p.rule);
  if (!p.exists) {
    const std::string missing =
        p.rule == lease_rule::gpu_lock_env
            ? "GPU_LOCK would be its lease directory, but no gpulease counter is at " + p.gpu_dir + "/epoch; "
            : where + " is not a directory; ";
    out.push_back({"gpulease", true,
                   "no gpulease root (" + missing + via +
                       "): no gpulease participant has held a lease here, and "
                       "offload-lock takes none"});
    return out;
  }
  out.push_back({"gpulease", true, "lease directory " + p.dir + " (" + via + "; the counter in " + p.gpu_dir + ")"});
  if (!p.refused.empty())
    out.push_back({"gpulease_path", false,
                   "gpulease refuses " + p.dir + " (" + p.refused +
                       "): its participants do not start, so they cannot contend here"});
  const lease_info i = inspect_lease(p.dir);
  out.push_back({"gpulease_lease", i.state != lease_state::unknown,
                 state_text(i) + (i.counter ? "; last epoch issued " + std::to_string(*i.counter) : std::string())});
  std::string err;
  if (auto f = os::facts_of(p.dir, err); f && f->is_dir) {
    // Permission to create and remove files there: write and search.
    const bool writable = os::effective_uid() == 0        ? true
                          : f->uid == os::effective_uid() ? (f->mode & 0300) == 0300
                          : os::in_group(f->gid)          ? (f->mode & 0030) == 0030
                                                          : (f->mode & 0003) == 0003;
    if (!writable)
      out.push_back({"gpulease_access", false,
                     p.dir + " is not writable by this user: offload-lock cannot take the lease, and gpulease "
                             "participants of this user refuse to start"});
  }
  if (clean_path(lock_path) == p.dir)
    out.push_back({"gpulease_shared", true,
                   "GPU_LOCK is the lock directory and gpulease's lease directory at once: offload-lock's one "
                   "meta.json there is both the lock and the lease (doc/protocol-gpulease.md, \"GPU_LOCK shared by "
                   "both\")"});
  return out;
}

}  // namespace offload_lock::cli
