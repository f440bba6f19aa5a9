// Section 10 of the benchmark: etcd locks, beside etcd's own `etcdctl lock
// NAME -- CMD` in the same run and on the same etcd (started here on
// loopback ports, its data on /dev/shm when there is one): handoff, crash
// takeover against the lease TTL, no double holder under SIGKILLs of
// holders and of etcd members, `status --fleet` over 100 published hosts,
// and what a local acquisition pays with the fleet's etcd down.
// bench.cpp prints what this returns.
#ifndef OFFLOAD_LOCK_BENCH_ETCD_BENCH_HPP
#define OFFLOAD_LOCK_BENCH_ETCD_BENCH_HPP

#include <nlohmann/json.hpp>
#include <string>

namespace bench::etcd_bench {

struct context {
  std::string dir;    // a fresh directory of its own
  std::string cli;    // the offload-lock command
  std::string self;   // this benchmark (its child modes)
  std::string stamp;  // offload-lock-bench-stamp
  bool quick = false;
  int acquisitions = 0;  // the no-double-holder run's size (0: 10,000, quick 300)
};

struct result {
  std::string report;
  nlohmann::ordered_json json;
};

// Says so, instead of figures, where etcd or etcdctl is not installed.
result run(const context& c);

// The child modes (bench --child e-...): a stress participant, and the
// cost of a local acquisition as the environment configures the fleet.
int run_child(int argc, char** argv);

}  // namespace bench::etcd_bench

#endif  // OFFLOAD_LOCK_BENCH_ETCD_BENCH_HPP
