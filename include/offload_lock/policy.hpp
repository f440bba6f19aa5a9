// The site policy: what the people who run a shared GPU decide for everyone
// who takes its lock. A JSON file beside the lock, `<lock>.policy.json`
// (`/tmp/local-offload-gpu.lock.policy.json` for the default lock), read by
// every acquisition of that lock (its GPU slots included) and honoured only
// when it is a regular file with one link, owned by root or by the owner of
// the directory the lock is in, and writable by nobody else:
//
//   {
//     "maxPriority": 0,                          the highest priority anyone may queue at
//     "userMaxPriority": {"alice": 50},          ... unless a user or one of its groups
//     "groupMaxPriority": {"render": 20},        is named: the highest of those applies
//     "defaultMaxHold": "2h",                    the maximum hold of a holder that asks none
//     "maxHold": "8h",                           the longest maximum hold anyone may have
//     "defaultExpect": "30m",                    the declared duration of one that declares none
//     "idleAfter": "20m",                        a holder its GPU shows idle this long is idle:
//     "idlePercent": 5,                          none of its processes on its GPU, at most 5% busy
//     "idleYield": true                          ... and then asked, once, to make way
//   }
//
// Every key is optional; an unknown key, a priority outside -100..100 and a
// duration that does not parse make the file invalid: every acquisition of
// the lock then fails with errc::bad_input naming the file and the key, as a
// bad option would, rather than run without the policy its site wrote. A
// file that is not trusted is ignored, and `offload-lock doctor` says why.
// The policy applies to every user, root included (root may edit it).
// (doc/operations.md, "The site policy"; tests/multiprocess/policy_test.cpp)
#ifndef OFFLOAD_LOCK_POLICY_HPP
#define OFFLOAD_LOCK_POLICY_HPP

#include <string>
#include <vector>

#include "offload_lock/error.hpp"
#include "offload_lock/export.h"
#include "offload_lock/lock.hpp"

namespace offload_lock {

enum class policy_state {
  absent,    // no policy file beside the lock
  honoured,  // trusted and valid: every acquisition applies it
  ignored,   // there, but not trusted (owner, mode, links) or not readable by this user
  invalid,   // trusted, but it does not parse: acquisitions fail
};

struct policy_report {
  std::string path;    // the policy file (beside the lock)
  policy_state state = policy_state::absent;
  std::string reason;  // ignored or invalid: why, in words
  std::string summary; // honoured: what it sets, in words ("priority at most 0, ...")
};

// The site policy of the lock at `lock_path` (slot 0's path when there are
// several GPU slots), as an acquisition of it would see it.
OFFLOAD_LOCK_API policy_report site_policy(const std::string& lock_path);

// `o` as the site policy of its lock (o.path, or the default lock) makes it:
// the priority clamped to this user's cap, the maximum hold defaulted and
// capped, the expected duration defaulted. One line per change that the
// holder should hear of goes to `notices` (a clamped priority, a maximum
// hold it did not ask for). An invalid policy is errc::bad_input naming it.
// lock::acquire applies the same itself, silently (applied twice, it
// changes nothing more); a caller calls this to know the values beforehand
// and to tell its user (`offload-lock run` times CMD's maximum hold).
OFFLOAD_LOCK_API result<lock_options> with_site_policy(const lock_options& o,
                                                       std::vector<std::string>* notices = nullptr);

}  // namespace offload_lock

#endif  // OFFLOAD_LOCK_POLICY_HPP
