// Reading a gpulease lease directory into a lease_snapshot (judge.hpp)
// through the seam: the claim never through a symlink, the heartbeat of the
// claim's epoch, every failure but "not there" kept as unreadable.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_LOOK_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_LOOK_HPP

#include <string>

#include "gpulease/judge.hpp"
#include "gpulease/location.hpp"

namespace offload_lock::detail::gpulease {

// One file of an open directory, read at most claim_cap bytes.
file_read read_lease_file(int dirfd, const std::string& name, const std::string& shown);

// The lease directory `dir` (a symlink to it is followed, as gpulease
// follows it): a missing directory is no claim; one that cannot be opened
// is an unreadable claim. Never blocks on the lease; a few system calls.
lease_snapshot read_lease(const std::string& dir);

// read_lease, then judge_lease now with the real kernel's answers.
lease_verdict look_lease(const std::string& dir);

// Whether gpulease has a root here at all: the state root (root rules) or
// the lease directory's parent (an explicit directory) is a directory.
// Where it is not, gpulease refuses to start (it would have to create a
// machine-wide root), so no gpulease participant can be holding. For
// GPU_LOCK, which v1-only sites set too, gpulease's counter must also be
// there (<gpu dir>/epoch: gpulease has acquired under it). One open and at
// most one stat; never creates anything.
bool lease_root_exists(const lease_location& loc);

// Whether offload-lock's acquisitions of a plain lock (or of its GPU slot
// 0) take the lease at `loc` as well, where its root exists (lease_join.hpp,
// lease_to_take): a state root rule placed it (not GPU_LOCK, a directory
// both protocols would share, nor a directory the caller named) and
// gpulease accepts its path. Pure.
bool joinable(const lease_location& loc);

// joinable(), and the root is a directory: the lease the acquisitions take
// now. The views (joined_lease, inspect_gpu, wait_gpu_free, `status`) judge
// the GPU busy by this rule, so that "free" means an acquisition would not
// wait for the lease. One open; never creates anything.
bool joined_by_acquisitions(const lease_location& loc);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_LOOK_HPP
