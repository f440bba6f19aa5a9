// Test-only switches and crash points, each read from the environment once
// per process and in one way: set and not "0" means on. Inert in normal use:
// with the variables unset, each check is one comparison.
//   OFFLOAD_LOCK_NO_INOTIFY, OFFLOAD_LOCK_NO_PIDFD, OFFLOAD_LOCK_NO_RENAMEAT2:
//     act as if the kernel lacked inotify, pidfd or RENAME_NOREPLACE, so the
//     fallbacks are tested on a kernel that has them.
//   OFFLOAD_LOCK_TEST_CRASH_AT=STEP[@N]: SIGKILL this process the Nth time
//     (default first) it reaches STEP (see crash_point below).
//   OFFLOAD_LOCK_TEST_STOP_AT=STEP[,STEP...]: SIGSTOP this process each time
//     it reaches one of the steps (a test lets it go on with SIGCONT).
//   OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE=FILE: add the number of milliseconds in
//     FILE (re-read each time) to every wall-clock reading.
#ifndef OFFLOAD_LOCK_SRC_OS_TEST_HOOKS_HPP
#define OFFLOAD_LOCK_SRC_OS_TEST_HOOKS_HPP

#include <cstdint>

namespace offload_lock::detail::sys {

enum class feature { inotify, pidfd, renameat2 };
// False when the test switch for `f` is set.
bool feature_enabled(feature f);

// Stops this process with SIGKILL at a named step of the protocol when
// OFFLOAD_LOCK_TEST_CRASH_AT names that step, so tests can check that every
// participant recovers from a crash there. The steps are listed where they
// are called and in tests/multiprocess/crash_test.cpp.
void crash_point(const char* step);
// The same, for a step shared by two operations: "<op>.<step>".
void crash_point(const char* op, const char* step);

// Milliseconds the test clock skew adds to the wall clock (0 when unset).
std::int64_t clock_skew_ms();

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_TEST_HOOKS_HPP
