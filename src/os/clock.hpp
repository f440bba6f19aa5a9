// The seam's clocks and randomness. Declarations only: src/posix/clock.cpp.
#ifndef OFFLOAD_LOCK_SRC_OS_CLOCK_HPP
#define OFFLOAD_LOCK_SRC_OS_CLOCK_HPP

#include <cstddef>
#include <cstdint>
#include <string>

namespace offload_lock::detail::sys {

// The wall clock, epoch milliseconds (plus the test clock skew, see
// test_hooks.hpp).
std::int64_t now_ms();
// A monotonic clock for deadlines, milliseconds.
std::int64_t monotonic_ms();
// The same clock in microseconds. CLOCK_MONOTONIC is one clock for every
// process of a boot (outside time namespaces), so it orders the arrivals of
// waiters in different processes.
std::int64_t monotonic_us();
// Sleeps about `ms` milliseconds (a poll with no descriptors, through the
// syscall table).
void pause_ms(std::int64_t ms);
// `bytes` random bytes as 2*bytes lower-case hex digits (getrandom).
std::string random_hex(std::size_t bytes);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_CLOCK_HPP
