// `offload-lock wait-free`: waits until the GPU is free, its lock and the
// gpulease lease that goes with it. See commands.hpp.
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/exit_codes.hpp"
#include "cli/lease_view.hpp"
#include "cli/output.hpp"
#include "offload_lock/inspect.hpp"

namespace offload_lock::cli {

int cmd_wait_free(const args& a, const std::string& path) {
  // The GPU as a whole: the lock, and where the upstream's current runners
  // keep one, the gpulease lease every acquisition also takes.
  gpu_view v;
  // --within: a holder that declared it will stay longer than that is
  // answered at once rather than after --wait.
  bool too_long = false;
  if (a.within) {
    v = inspect_gpu(path, a.ttl);
    const info& i = v.lock;
    too_long = i.held && i.expected_free_in && *i.expected_free_in > *a.within;
  }
  if (!too_long) v = wait_gpu_free(path, a.wait.value_or(wait_forever), a.poll, a.ttl);
  const info& i = v.lock;
  if (!i.problem.empty()) {
    say(i.problem);
    return exit_system;
  }
  const bool by_lease = !i.held && v.busy();
  // Why it exits 1: the holder will stay longer than --within, or the wait
  // ran out; a script tells the two apart by the message or by the JSON.
  std::string why;
  if (i.held && too_long)
    why = "not free within " + describe_duration(*a.within) + ": " + path + " is " + status_line(i) +
          " and expects to be free in ~" + describe_duration(*i.expected_free_in);
  else if (by_lease)
    why = "timed out: the GPU of " + path + " is " +
          lease_busy_line(lease_board{find_lease(), *v.lease}, status_line(i));
  else if (i.held)
    why = "timed out: " + path + " is " + status_line(i);
  if (a.json) {
    ojson j = to_json(i);
    j["busy"] = v.busy();
    j["busyBy"] = i.held ? ojson("lock") : by_lease ? ojson("gpulease") : ojson();
    j["expectMs"] = i.held && i.expected.count() > 0 ? ojson(i.expected.count()) : ojson();
    j["freeInMs"] = !i.held ? ojson(0) : i.expected_free_in ? ojson(i.expected_free_in->count()) : ojson();
    j["tooLong"] = i.held && too_long;
    std::optional<lease_board> lease;
    if (v.lease) lease = lease_board{find_lease(), *v.lease};
    j["gpulease"] = lease_json(lease);
    std::cout << dump(j) << "\n";
  }
  if (!why.empty() && !a.quiet) say(why);
  return v.busy() ? exit_busy : exit_ok;
}

}  // namespace offload_lock::cli
