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
// `bytes` random bytes as 2*bytes lower-case hex digits (getrandom).
std::string random_hex(std::size_t bytes);

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_CLOCK_HPP
