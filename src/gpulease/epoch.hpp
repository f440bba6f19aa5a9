// gpulease's fencing counter (doc/protocol-gpulease.md, "The fencing
// epoch"): <gpu dir>/epoch holds the last epoch issued, in decimal. Every
// acquisition, gpulease's and offload-lock's, issues the next one before it
// claims, under <gpu dir>/epoch.lock (made with O_EXCL, removed after), so
// no two acquisitions ever hold the same epoch and the counter never goes
// back. A failed claim burns its number; only monotonicity matters.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_EPOCH_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_EPOCH_HPP

#include <cstdint>
#include <optional>
#include <string>

#include "offload_lock/error.hpp"

namespace offload_lock::detail::gpulease {

// gpulease's bounds on the counter's lock: it waits 400 times 5 ms for it,
// and a lock older than 30 s is the debris of a process that died inside
// the two file operations it guards.
inline constexpr int counter_lock_attempts = 400;
inline constexpr std::int64_t counter_lock_pause_ms = 5;
inline constexpr std::int64_t counter_lock_stale_ms = 30'000;

// The counter as it is now: nullopt when the file does not exist (no lease
// was ever issued under this directory). An unparseable counter is an error
// naming its bytes: gpulease refuses to restart the fence from zero, and so
// does offload-lock. Reads without the lock; never blocks.
result<std::optional<std::uint64_t>> read_counter(const std::string& gpu_dir);

// Issues the next epoch: takes epoch.lock (waiting at most 2 s, removing one
// older than 30 s as gpulease does: moved aside first, and removed only if
// it is the file judged), reads the counter (missing: 0), writes counter+1
// to epoch.tmp and renames it over epoch, removes the lock. Errors name the
// file and the step; the counter is unchanged when any step fails.
result<std::uint64_t> issue_epoch(const std::string& gpu_dir);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_EPOCH_HPP
