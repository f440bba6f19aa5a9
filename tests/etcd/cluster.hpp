// Test support for etcd locks: a real etcd cluster of one or three members,
// started by the test on loopback ports in its own temporary directory and
// stopped with it, and members killed, stopped and started again by the
// fault tests. Nothing here talks to any address off this machine.
#ifndef OFFLOAD_LOCK_TESTS_ETCD_CLUSTER_HPP
#define OFFLOAD_LOCK_TESTS_ETCD_CLUSTER_HPP

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "etcd/client.hpp"
#include "os/net.hpp"
#include "support.hpp"

// A case that needs etcd is not run on a machine without it.
#define ETCD_OR_SKIP() \
  if (!olt::etcd_exe()) OLT_NOT_RUN("no etcd server on this machine (scripts/setup installs etcd-server)")

namespace olt {

// The etcd server of the machine, or nullopt (the test is then not run).
std::optional<std::string> etcd_exe();

class etcd_cluster {
 public:
  // Starts `members` members and waits until they have a leader (bounded:
  // throws when they do not). Elections are tuned short (heartbeat 50 ms,
  // election 500 ms), so a lost leader is replaced within a second and a
  // lease TTL may be as short as 1 s.
  explicit etcd_cluster(int members = 1);
  ~etcd_cluster();
  etcd_cluster(const etcd_cluster&) = delete;
  etcd_cluster& operator=(const etcd_cluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  // "127.0.0.1:P" of member k; all of them joined by ','.
  std::string endpoint(int k) const;
  std::string endpoints() const;
  // "etcd://<endpoints>/<name>"
  std::string url(const std::string& name) const;

  void kill(int k);      // SIGKILL, waited for
  void stop(int k);      // SIGSTOP: alive, answering nothing
  void resume(int k);    // SIGCONT
  void start(int k);     // again, from its data directory
  // Waits until the members that run agree on a leader (bounded).
  bool has_leader(ms timeout = kPrompt) const;
  bool running(int k) const;

 private:
  struct member;
  temp_dir dir_;
  std::string token_;
  std::vector<std::unique_ptr<member>> members_;
  std::string initial_cluster_;
};

// offload-lock with `--lock <cluster's url for name>` and args (bounded).
cli_result etcd_cli(const etcd_cluster& c, const std::string& name, std::vector<std::string> args,
                    const env_changes& env = {}, ms timeout = 60s);
// The same arguments as a command line for a child process.
std::vector<std::string> etcd_args(const etcd_cluster& c, const std::string& name, std::vector<std::string> args);
// Polls `pred` every 50 ms (for predicates that start a process or ask
// etcd) until true or the timeout passes.
bool eventually_every_50ms(const std::function<bool()>& pred, ms timeout = kPrompt);
// How many processes `--json status` lists as waiting for the lock.
int waiting_count(const etcd_cluster& c, const std::string& name);
// A counter from a member's /metrics (GET, over the loopback), -1 when it
// cannot be read.
long long etcd_metric(const etcd_cluster& c, int member, const std::string& name);

// The JSON object of a hold's first line, "acquired {...}" (REQUIREd).
nlohmann::json acquired(child& h);
// The library's etcd client for every member of `c`.
offload_lock::detail::etcd::client client_of(const etcd_cluster& c);
// Bounds of one request: five seconds from now.
offload_lock::detail::sys::net_bounds soon();

// An unused loopback TCP port (bound and let go; taken before anyone else
// on a test machine in practice).
int free_port();

}  // namespace olt

#endif  // OFFLOAD_LOCK_TESTS_ETCD_CLUSTER_HPP
