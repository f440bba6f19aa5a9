// What the commands that take the lock (acquire, run and hold) share:
// their options, with the site policy applied; what a failed acquisition
// says and exits with; the slot taken; a wait abandoned by a signal; a
// loss in words.
#ifndef OFFLOAD_LOCK_SRC_CLI_ACQUIRING_HPP
#define OFFLOAD_LOCK_SRC_CLI_ACQUIRING_HPP

#include <optional>
#include <string>

#include "cli/args.hpp"
#include "cli/gpus.hpp"
#include "offload_lock/lock.hpp"
#include "posix/signals.hpp"

namespace offload_lock::cli {

// The options of an acquisition on the command line, its waiting line
// included, with the site policy of the lock applied
// (offload_lock/policy.hpp), what it changed said unless --quiet; nullopt,
// the reason said, when the policy is invalid (exit_usage, as for a bad
// option).
std::optional<lock_options> options_with_policy(const args& a, const gpu_plan& gpus, const std::string& path);

// What a failed acquisition with options `o` says: for busy and timed out,
// whom it lost to, as the library describes the lock.
std::string failure_message(const error& e, const args& a, const lock_options& o, const std::string& path);
// Exit code and message for a failed acquisition with options `o`: for
// busy and timed out, `busy_code`, and nothing said under --quiet.
int acquire_failed(const error& e, const args& a, const lock_options& o, const std::string& path, int busy_code);

// The lock path of the slot a lock holds.
std::string held_path(const std::string& path, const lock& l);

// What a loss reported by the library (errc::lost) lost, in words: the
// lock at its context's path, or the gpulease lease taken with it.
bool is_lease_loss(const error& e);
std::string lost_words(const error& e);

// A wait abandoned by a signal (`sig`, the one taken from the queue; 0:
// none was) ends like being killed by it.
int cancelled_exit(const args& a, const std::string& what, int sig = os::take_signal());

}  // namespace offload_lock::cli

#endif  // OFFLOAD_LOCK_SRC_CLI_ACQUIRING_HPP
