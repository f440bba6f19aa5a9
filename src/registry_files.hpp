// The registry's names and limits, shared by its writers (registry.cpp) and
// its reader (registry_reader.cpp); internal to the two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "offload_lock/error.hpp"
#include "os/files.hpp"

namespace offload_lock::detail::registry_files {

// At most this many names are read from another user's directory and from
// the registry itself: a flood costs one bounded listing. This user's own
// directory is read in full (a queue of thousands of one user's waiters).
inline constexpr std::size_t kForeignNames = 256;
inline constexpr std::size_t kOwnNames = 16384;
inline constexpr std::size_t kTopNames = 256;
inline constexpr std::size_t kUserDirs = 64;
// Directory timestamps are coarser than a millisecond (a kernel tick): a
// listing is reused only when the directory was last changed longer ago.
inline constexpr std::int64_t kSettledMs = 50;

enum class kind { none, entry, temporary, wake };

// "<pid>-<12 hex>" followed by ".json" (an entry) or ".wake" (its wake
// channel); ".<pid>-<12 hex>.tmp" while it is being written.
kind name_kind(const std::string& n, std::int64_t* pid = nullptr);

// The directory holding the lock `base` (its name in `name`).
result<sys::fd> open_parent(const std::string& base, std::string& name);

}  // namespace offload_lock::detail::registry_files
