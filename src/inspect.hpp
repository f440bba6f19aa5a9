// Judging what is at the lock path and describing it as offload_lock::info
// (doc/protocol.md A3, A5, B3, B6): the one look that acquire, release, inspect()
// and wait_free() share.
#ifndef OFFLOAD_LOCK_SRC_INSPECT_HPP
#define OFFLOAD_LOCK_SRC_INSPECT_HPP

#include <cstdint>

#include "judge.hpp"
#include "lock_dir.hpp"
#include "offload_lock/inspect.hpp"

namespace offload_lock::detail {

struct detailed {
  info i;      // as `status` shows it
  verdict v;   // offload-lock's judgment
  observed o;  // what was seen, with the directory judged still open
};

// "the parent directory D of lock P does not exist".
std::string missing_parent(const std::string& path);

// The error for a directory at the lock path that is not a lock (see
// not_made_by_mkdir): nothing is ever removed from it.
error not_a_lock_error(const std::string& path, const verdict& v);

// Observes and judges the lock. `seen`: the caller's watch clock across
// looks (see watch_clock), updated here. `idle_mark`: read the holder's
// idle mark too (a view shows it; a waiter's look has no use for it). Only a
// failure to look at all is an error.
result<detailed> inspect_target(const target& t, std::int64_t ttl, std::int64_t grace, const process_view& pv,
                                watch_clock* seen = nullptr, bool idle_mark = true);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_INSPECT_HPP
