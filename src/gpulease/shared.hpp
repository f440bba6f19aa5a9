// One directory for both protocols (doc/protocol-gpulease.md, "GPU_LOCK
// shared by both"): gpulease takes GPU_LOCK as its lease directory, and v1
// and offload-lock take it as their lock directory. What a lock directory
// holds of gpulease's, and the rules offload-lock's lock judgment applies
// to such a directory. Pure.
#ifndef OFFLOAD_LOCK_SRC_GPULEASE_SHARED_HPP
#define OFFLOAD_LOCK_SRC_GPULEASE_SHARED_HPP

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace offload_lock::detail::gpulease {

struct lease_marks {
  // meta.json is a gpulease claim: it parses by gpulease's rules and names
  // an epoch (gpulease issues epochs from 1). A v1 record alone parses too,
  // with epoch 0, and is not a claim.
  bool claim = false;
  // ... and it is a v1 record as well (a top-level "pid" number, as Node
  // reads it): one meta.json for both protocols.
  bool v1_record = false;
  // gpulease's own files are in the directory (hb.*, unloaded.*,
  // .writeprobe-*): it is, or has been, gpulease's lease directory.
  bool lease_files = false;
  std::string first_lease_file;
  // The directory is gpulease's in part: see never_reclaim_whole.
  bool any() const { return claim || lease_files; }
};

// What `names` (a lock directory's entries) and `meta` (its meta.json's
// bytes, nullopt when missing or unreadable) hold of gpulease's.
lease_marks lease_marks_of(const std::vector<std::string>& names, const std::optional<std::string>& meta);

// The rule for offload-lock's lock judgment: a lock directory holding a
// gpulease record or gpulease's files is never a v1 lock to reclaim whole
// (it is gpulease's container, and its files are gpulease's). Its claim is
// judged by judge_lease and, when dead, taken over alone (hold.hpp
// take_over); an empty container is free to claim in, never removed.
inline bool never_reclaim_whole(const lease_marks& m) { return m.any(); }

// How long a missing or unparseable meta.json in such a directory is left
// alone: gpulease's claim grace (10 s), not the 2 s of a v1 lock, since a
// gpulease acquirer writes its claim after creating it.
std::int64_t incomplete_claim_grace_ms(const lease_marks& m, std::int64_t v1_grace_ms);

// Whether a lock directory shared with gpulease may hold `name`: what a v1
// lock directory holds (meta.json, .meta.json.*) and what gpulease makes
// there (hb.*, unloaded.*, .writeprobe-*).
bool allowed_in_shared_lock_dir(const std::string& name);

}  // namespace offload_lock::detail::gpulease

#endif  // OFFLOAD_LOCK_SRC_GPULEASE_SHARED_HPP
