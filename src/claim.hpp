// Taking the lock (doc/protocol.md A2 step 1 with B1): a lock directory that is
// never visible without its complete meta.json.
#ifndef OFFLOAD_LOCK_SRC_CLAIM_HPP
#define OFFLOAD_LOCK_SRC_CLAIM_HPP

#include <memory>
#include <string>

#include "gpulease/hold.hpp"
#include "lock_dir.hpp"

namespace offload_lock::detail {

struct claim {
  bool taken = false;  // false: something is at the path already (busy)
  sys::fd dir;         // the taken directory
  sys::fd meta;        // its meta.json, open for writing, holding the OFD write lock
  sys::file_id id;
  // A claim in a directory shared with gpulease (shared_dir.hpp): the lease
  // that same meta.json holds, and the bytes written into it.
  std::unique_ptr<gpulease::lease_hold> lease;
  std::string written;
};

// The mode meta.json is made with (before the umask): writable by its owner
// only, so that no one else can take the write lock that proves the holder
// alive (doc/protocol.md B7's proof of life; doc/operations.md "Sharing /tmp").
inline constexpr unsigned meta_mode = 0644;

// One attempt: builds the directory and its complete meta.json (`bytes`)
// under a private staging name, keeps meta.json open with an OFD write lock
// on it (the holder's proof of life), then moves the directory into place
// with RENAME_NOREPLACE. Where the file system refuses
// that flag, falls back to mkdir plus a meta.json written under a temporary
// name and renamed in. A system error names the file that failed; the
// staging directory is removed on every failure path.
result<claim> try_claim(const target& t, const std::string& bytes);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_CLAIM_HPP
