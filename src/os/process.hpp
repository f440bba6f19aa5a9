// The seam's view of processes: liveness, start times, this process's
// identity and environment, and fork handlers. Declarations only:
// src/posix/ implements them.
#ifndef OFFLOAD_LOCK_SRC_OS_PROCESS_HPP
#define OFFLOAD_LOCK_SRC_OS_PROCESS_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "os/types.hpp"

namespace offload_lock::detail::sys {

// kill(pid, 0) with EPERM counted as alive, then /proc/<pid>/stat for the
// zombie state (skipped where /proc is not this pid namespace's: it would
// describe another process, and where it cannot be read: alive). `invalid`
// for a pid outside 1..max_pid; `unknown` when kill() fails otherwise.
liveness probe(std::int64_t pid);
// kill(pid, 0) alone, as Node's process.kill() and Go's syscall.Kill ask it:
// a zombie answers (alive); `dead` for ESRCH, `invalid` outside 1..max_pid,
// `unknown` for any other failure. One system call: what the v1 views of a
// lock need, which never look at /proc.
liveness signal0(std::int64_t pid);
// Whether the process is stopped (SIGSTOP, a debugger): nullopt when that
// cannot be read (gone, /proc not this namespace's, hidepid).
std::optional<bool> stopped(std::int64_t pid);
// The process's start, nullopt when it cannot be read (gone, invalid pid, or
// another process while /proc is not this pid namespace's). This process's
// own start is read from /proc/self once and cached (per process, so a
// forked child reads its own).
std::optional<proc_start> start_of(std::int64_t pid);
// Whether the process has ended for good: dead, or a zombie with no thread
// left running. A zombie whose main thread ended while other threads still
// work has not (nor one whose threads cannot be counted).
bool has_ended(std::int64_t pid);
// How many threads the process has (/proc/<pid>/status "Threads:"), the
// ended main thread of a zombie counted; nullopt when it cannot be read.
// A zombie with 1 has nothing left running; one with more ended its main
// thread while others still work.
std::optional<int> thread_count(std::int64_t pid);
// The inode of this process's pid namespace (/proc/self/ns/pid), read once
// per process (a child forked into a new namespace reads its own); nullopt
// when it cannot be read.
std::optional<std::uint64_t> pid_namespace();
// The inode of this process's time namespace (/proc/self/ns/time), read
// once per process; nullopt when it cannot be read (a kernel without them). Start ticks
// read from /proc are shifted by the reader's time namespace.
std::optional<std::uint64_t> time_namespace();
// Whether /proc shows this pid namespace: /proc/self names getpid(). False in
// a pid namespace that kept its parent's /proc (`unshare --pid --fork`
// without --mount-proc, a container that sees the host's /proc).
bool proc_is_own();
// This process's pid (asked of the kernel once per process: a child of
// fork() asks again).
std::int64_t self_pid();
// How many forks lie between the process that loaded the library and this
// one (each child of fork() counts one more than its parent): what tells a
// child's cached values from its parent's even where their pids are equal.
std::int64_t fork_generation();
std::uint32_t effective_uid();
// The name of this process's effective user, and of its groups (the
// supplementary ones and the effective one); nullopt and empty when the
// user and group databases do not know them.
std::optional<std::string> effective_user_name();
std::vector<std::string> group_names();
// The owner of /proc/<pid> (the process's effective uid, root for one that
// is not dumpable); nullopt when it cannot be read or /proc is not this
// namespace's.
std::optional<std::uint32_t> process_uid(std::int64_t pid);
std::int64_t parent_pid();
// Lets a thread this one has just woken run before it on this processor
// (sched_yield). The scheduler may queue a woken process on the processor
// of the one that woke it, even beside an idle one, and run it only once
// the waker blocks; where the woken one runs elsewhere this costs one
// system call and changes nothing.
void give_way();
// /proc/sys/kernel/random/boot_id, read once; empty when unreadable.
const std::string& boot_id();
const std::string& host_name();
std::string program_name();
// One environment variable; nullopt when unset. Not thread-safe against a
// concurrent setenv, like getenv itself.
std::optional<std::string> get_env(const std::string& name);

// Registers fork handlers (pthread_atfork): `prepare` runs in the parent
// before fork, `parent` after it in the parent, `child` in the child. Used to
// take the process-wide mutexes around fork so none is copied locked into a
// child, whose other threads are gone.
void on_fork(void (*prepare)(), void (*parent)(), void (*child)());

}  // namespace offload_lock::detail::sys

#endif  // OFFLOAD_LOCK_SRC_OS_PROCESS_HPP
