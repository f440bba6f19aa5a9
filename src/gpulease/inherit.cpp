// Leases passed down by a parent. See inherit.hpp.
#include "gpulease/inherit.hpp"

#include "gpulease/look.hpp"
#include "gpulease/record.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"

namespace offload_lock::detail::gpulease {

std::vector<std::pair<std::string, std::string>> inherited_lease::child_environment() const {
  return {{env_lease_dir, dir}, {env_lease_epoch, std::to_string(epoch)}, {env_lease_class, to_string(cls)}};
}

inheritance read_inheritance(const env_lookup_fn& env) {
  auto get = [&](const char* name) {
    auto v = env(name);
    return v ? std::string(trim_space(*v)) : std::string();
  };
  const std::string dir = get(env_lease_dir), epoch = get(env_lease_epoch), cls = get(env_lease_class);
  inheritance in;
  if (dir.empty() && epoch.empty() && cls.empty()) return in;
  in.k = inheritance::kind::refused;
  if (dir.empty() || epoch.empty() || cls.empty()) {
    in.why = "the inherited GPU lease is incomplete (GPU_LEASE_DIR=\"" + dir + "\" GPU_LEASE_EPOCH=\"" + epoch +
             "\" GPU_LEASE_CLASS=\"" + cls + "\")";
    return in;
  }
  auto e = parse_go_uint(epoch);
  if (!e || *e == 0) {
    in.why = "the inherited GPU lease epoch \"" + epoch + "\" is not a fencing epoch";
    return in;
  }
  auto c = parse_lease_class(cls);
  if (!c) {
    in.why = "the inherited GPU lease class \"" + cls + "\" is neither media nor text";
    return in;
  }
  in.k = inheritance::kind::offered;
  in.lease = inherited_lease{dir, *e, *c};
  return in;
}

inheritance confirm_inheritance(inheritance in, std::int64_t now_ms, const lease_process_view& pv) {
  if (in.k != inheritance::kind::offered) return in;
  const lease_verdict v = judge_lease(read_lease(in.lease->dir), now_ms, pv);
  if (v.state == lease_state::alive && v.rec && v.rec->epoch == in.lease->epoch) {
    in.k = inheritance::kind::current;
    return in;
  }
  in.k = inheritance::kind::refused;
  in.why = "the inherited GPU lease (epoch " + std::to_string(in.lease->epoch) + ") is no longer current at " +
           in.lease->dir + ": " +
           (v.rec && v.state == lease_state::alive ? "it is held by " + describe_holder(*v.rec)
                                                   : std::string(to_string(v.state)) + ", " + v.why);
  return in;
}

inheritance inheritance_now() {
  return confirm_inheritance(read_inheritance([](const std::string& n) { return sys::get_env(n); }), sys::now_ms(),
                             lease_process_view::real());
}

}  // namespace offload_lock::detail::gpulease
