// The fleet view (doc/etcd.md "The fleet view"): every host whose processes
// are told a fleet endpoint (OFFLOAD_LOCK_FLEET=etcd://HOST:PORT[,...])
// publishes, under a lease, who holds and who waits for its local locks;
// `status --fleet` reads every host's records in one range.
//
// Publishing never delays or fails a local acquisition: the acquisition
// only hands a record to one background thread per process (a mutex and a
// condition variable), which writes it to etcd when it can. When etcd
// cannot be reached the records wait, and `status` and `doctor` say that
// this host's part of the view is stale.
#ifndef OFFLOAD_LOCK_SRC_ETCD_FLEET_HPP
#define OFFLOAD_LOCK_SRC_ETCD_FLEET_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "etcd/address.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::detail::etcd::fleet {

inline constexpr const char* env_fleet = "OFFLOAD_LOCK_FLEET";
// The root of the fleet's keys: one key per holder or waiter,
// <root><host>/<pid>-<n>, attached to its process's fleet lease.
inline constexpr std::string_view fleet_root = "/offload-lock/fleet/";
// The lease of a process's records: they vanish this long after the
// process dies without a word.
inline constexpr std::int64_t fleet_ttl_s = 10;

// OFFLOAD_LOCK_FLEET, read once per process: its endpoints; an error
// (bad_input, naming the variable) when it is set but not an endpoint
// list; nullopt when unset or empty.
std::optional<result<std::vector<endpoint>>> configured();

// What one record says.
struct entry {
  std::string host, path;
  int gpu = 0;
  bool holding = false;   // holds the lock; else waits for it
  std::int64_t pid = 0;
  std::string label, token, device;  // device: "GPU-… (name)" when known
  std::int64_t since = 0;            // epoch ms: took the lock, or began to wait
  std::int64_t expect_ms = 0, max_hold_ms = 0;
  int priority = 0;
  std::string problem;  // a record that could not be read (then only host is known)
};

// Publishing, for lock::acquire of a local lock (lock.cpp). Each returns
// at once; all do nothing (and waiting() returns 0) when no fleet is
// configured.
std::uint64_t waiting(const lock_options& o, const std::string& path);
void held(std::uint64_t id, const lock& l, const lock_options& o);
void gone(std::uint64_t id);
// In a forked child that keeps a lock of its parent's (the `acquire`
// keeper): publishes record `id` from this process, under its own lease.
// Records the child did not adopt are the parent's, never published from it.
void adopt(std::uint64_t id);

// Waits up to `ms` for this process's records to be written (a process
// about to _exit()); false when some are not.
bool flush(std::int64_t ms);

// Every host's records, in one range (bounded). `eps` empty: configured().
struct view {
  std::string endpoints;  // as given, for messages
  std::vector<entry> entries;
  std::size_t unreadable = 0;  // records that were not records
  std::string problem;         // why the view could not be read (entries empty)
};
view read(const std::vector<endpoint>& eps);

// Whether this host's part of the view is current for the local lock at
// `path` (its holder and waiters published, nothing published that is not
// there any more), in words; `configured` false when no fleet is.
struct freshness {
  bool configured = false;
  bool stale = false;
  std::string endpoints;
  std::string why;
};
freshness check(const std::string& path);

}  // namespace offload_lock::detail::etcd::fleet

#endif  // OFFLOAD_LOCK_SRC_ETCD_FLEET_HPP
