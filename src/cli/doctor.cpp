// `offload-lock doctor`. See doctor.hpp.
#include "cli/doctor.hpp"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/exit_codes.hpp"
#include "cli/fleet.hpp"
#include "cli/gpus.hpp"
#include "cli/lease_view.hpp"
#include "cli/output.hpp"
#include "etcd/look.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/path.hpp"
#include "offload_lock/policy.hpp"
#include "posix/os.hpp"
#include "posix/probe.hpp"

namespace offload_lock::cli {

namespace {

struct check {
  std::string name;
  bool ok = true;
  std::string detail;
};

std::string mode_text(unsigned mode) {
  char buf[8];
  (void)std::snprintf(buf, sizeof buf, "%04o", mode);
  return buf;
}

std::string user_text(std::uint32_t uid) {
  auto n = os::user_name(uid);
  return n ? *n + " (uid " + std::to_string(uid) + ")" : "uid " + std::to_string(uid);
}

std::string group_text(std::uint32_t gid) {
  auto n = os::group_name(gid);
  return n ? *n + " (gid " + std::to_string(gid) + ")" : "gid " + std::to_string(gid);
}

bool can_write(const os::dir_facts& f) {
  if (os::effective_uid() == 0) return true;
  if (f.uid == os::effective_uid()) return (f.mode & 0300) == 0300;
  if (os::in_group(f.gid)) return (f.mode & 0030) == 0030;
  return (f.mode & 0003) == 0003;
}

// The lock path itself: nothing, a lock, or something that is not one. The
// verdict is the library's (inspect(), the judgment every command acts on):
// whatever it refuses to use as a lock, doctor warns about in its words.
// Only what the library does not judge before a claim is looked at here: a
// path that is not a directory, and a directory holding foreign files.
check lock_path_check(const path_resolution& r) {
  check c{"lock", true, ""};
  const std::string via = r.rule == path_rule::gpu_lock_env ? "GPU_LOCK names " : "";
  const info i = inspect(r.path);
  if (!i.problem.empty()) {
    // Not a lock (a directory no participant makes), a missing parent, a
    // parent that cannot be read: every command exits 4 on it.
    c.ok = false;
    c.detail = i.problem;
    return c;
  }
  if (!i.present) {
    c.detail = via + r.path + ": nothing there now (free)";
    return c;
  }
  std::string err;
  auto f = os::facts_of(r.path, err);
  if (f && !f->is_dir) {
    c.ok = false;
    c.detail = via + r.path + ", which is not a directory: no participant can take the lock there";
    return c;
  }
  for (const auto& n : os::list_names(r.path).value_or(std::vector<std::string>{}))
    if (n != "meta.json" && n.rfind(".meta.json.", 0) != 0) {
      c.ok = false;
      c.detail = via + r.path + ", a directory that is not a lock (it holds '" + n +
                 "'): it is waited for while its meta.json says held, and never removed";
      return c;
    }
  c.detail = via + r.path + ": " + status_line(i);
  return c;
}

// The site policy beside the lock (offload_lock/policy.hpp): what it sets,
// or why it is not applied.
check policy_check(const path_resolution& r) {
  const policy_report p = site_policy(r.path);
  switch (p.state) {
    case policy_state::absent: break;
    case policy_state::honoured: return {"policy", true, p.path + ": " + p.summary};
    case policy_state::ignored: return {"policy", false, p.path + " is ignored: " + p.reason};
    case policy_state::invalid:
      return {"policy", false,
              p.path + " is invalid, and every acquisition of the lock fails until it is fixed: " + p.reason};
  }
  return {"policy", true, "no site policy (" + p.path + ")"};
}

// The path every participant must resolve alike: a relative one means each
// program's own working directory, so two programs started in different
// directories take two different locks and never see each other.
check path_check(const path_resolution& r) {
  const std::string rule = to_string(r.rule);
  if (!r.path.empty() && r.path.front() == '/')
    return {"path", true, r.path + " (rule: " + rule + ", as the Node runners resolve it)"};
  const std::string from = r.rule == path_rule::override_path ? "--lock" : rule;
  return {"path", false,
          r.path + " is a relative path (from " + from +
              "): each program resolves it against its own working directory, so programs started elsewhere "
              "take another lock; give an absolute path"};
}

// The parent directory: who owns it, its mode, and who may reclaim whose
// stale lock in it.
std::vector<check> parent_checks(const std::string& parent) {
  std::string err;
  auto f = os::facts_of(parent, err);
  if (!f) return {{"parent", false, parent + ": " + err + " (every acquisition fails until it exists)"}};
  if (!f->is_dir) return {{"parent", false, parent + " is not a directory"}};
  std::vector<check> out;
  const bool sticky = f->mode & 01000, setgid = f->mode & 02000;
  std::string d = parent + ": owner " + user_text(f->uid) + ", group " + group_text(f->gid) + ", mode " +
                  mode_text(f->mode) + (sticky ? ", sticky" : "") + (setgid ? ", setgid" : "");
  out.push_back({"parent", can_write(*f), d + (can_write(*f) ? "" : "; this user cannot create the lock there")});
  std::string who;
  if (sticky)
    who = "sticky: a stale lock can be reclaimed only by the user who made it" +
          (f->uid == 0 ? std::string() : ", by " + user_text(f->uid)) +
          " and by root; anyone who can write here can also create the lock path first";
  else if (f->mode & 0002)
    who = "not sticky and writable by everyone: any user can reclaim (or remove) any lock here";
  else if (f->mode & 0020)
    who = "not sticky: every member of " + group_text(f->gid) + " can reclaim a stale lock of any member";
  else
    who = "only " + user_text(f->uid) + (f->uid == 0 ? "" : " and root") + " can create or reclaim locks here";
  if (setgid) who += "; setgid: locks made here belong to " + group_text(f->gid);
  out.push_back({"reclaim", true, who});
  return out;
}

std::vector<check> feature_checks(const std::string& parent) {
  const os::feature_probe p = os::probe_features(parent);
  if (!p.writable) return {{"features", false, "not checked: cannot make a scratch directory in " + parent}};
  auto one = [](const char* name, const std::string& failure, const char* without) {
    return failure.empty() ? check{name, true, "works here"} : check{name, false, failure + ": " + without};
  };
  return {one("inotify", p.inotify, "waiters re-check every second instead of waking at once"),
          one("pidfd", p.pidfd, "a holder's death is noticed at the next re-check, within a second"),
          one("rename_noreplace", p.rename_noreplace,
              "locks are made with mkdir and a renamed meta.json instead of one atomic move"),
          one("ofd_locks", p.ofd_locks, "a live offload-lock holder cannot prove it is alive to the others")};
}

int report(const std::vector<check>& checks, const args& a, const std::string& path);

}  // namespace

int cmd_doctor(const args& a) {
  const path_resolution r = resolve_path(a.lock_path);
  std::vector<check> checks;
  if (is_etcd_lock(r.path)) {
    // An etcd lock: no directory, parent or kernel feature is involved;
    // the cluster and the lock's keys are.
    for (auto& c : detail::etcd::health(r.path)) checks.push_back({std::move(c.name), c.ok, std::move(c.detail)});
    return report(checks, a, r.path);
  }
  checks.push_back(path_check(r));
  if (r.go_disagrees())
    checks.push_back({"go", false,
                      "Go readers resolve " + r.go_path +
                          ": Go reads only $TMPDIR, not $TMP or $TEMP; set TMPDIR or GPU_LOCK for both"});
  else
    checks.push_back({"go", true, "Go readers resolve the same path"});
  const auto gpu_lock = os::get_env("GPU_LOCK");
  checks.push_back({"gpu_lock", true,
                    gpu_lock && !gpu_lock->empty() ? "GPU_LOCK=" + *gpu_lock + " (every side reads it)"
                                                   : "GPU_LOCK is not set"});
  checks.push_back(lock_path_check(r));
  checks.push_back(policy_check(r));
  std::string parent, name;
  os::split_path(r.path, parent, name);
  for (auto& c : parent_checks(parent)) checks.push_back(std::move(c));
  for (auto& c : feature_checks(parent)) checks.push_back(std::move(c));
  checks.push_back(os::proc_is_own()
                       ? check{"proc", true, "/proc is this pid namespace's"}
                       : check{"proc", false,
                               "/proc is another pid namespace's: other holders' start times and zombie states "
                               "cannot be read, so reused pids are not recognized"});
  for (auto& c : lease_checks(r.path)) checks.push_back({std::move(c.name), c.ok, std::move(c.detail)});
  if (const auto fleet = fleet_freshness(r.path))
    checks.push_back({"fleet", !fleet->stale, fleet->stale ? "the fleet view is stale: " + fleet->why : fleet->why});
  const auto& gpus = machine_gpus();
  if (!gpus)
    checks.push_back({"nvidia-smi", false,
                      "nvidia-smi -L cannot be run: --gpus auto finds no GPU and status shows no GPU use"});
  else
    checks.push_back({"nvidia-smi", !gpus->empty(),
                      std::to_string(gpus->size()) + " GPU" + (gpus->size() == 1 ? "" : "s") +
                          (gpus->empty() ? " listed" : " (--gpus auto: " + std::to_string(gpus->back().index + 1) +
                                                          " slots)")});
  return report(checks, a, r.path);
}

namespace {

int report(const std::vector<check>& checks, const args& a, const std::string& path) {
  int warnings = 0;
  for (const auto& c : checks) warnings += c.ok ? 0 : 1;
  if (a.json) {
    ojson j;
    j["path"] = path;
    ojson list = ojson::array();
    for (const auto& c : checks) list.push_back(ojson{{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    j["checks"] = std::move(list);
    j["warnings"] = warnings;
    std::cout << dump(j) << "\n";
  } else {
    for (const auto& c : checks) std::cout << printable((c.ok ? "ok    " : "warn  ") + c.name + ": " + c.detail) << "\n";
    std::cout << (warnings ? std::to_string(warnings) + (warnings == 1 ? " warning" : " warnings") : "all well") << "\n";
  }
  return warnings ? exit_busy : exit_ok;
}

}  // namespace

}  // namespace offload_lock::cli
