// Idle holders: the site policy's idle rule (offload_lock/policy.hpp,
// "idleAfter"). A holding process whose policy sets it has its GPU looked at
// (nvidia-smi) by one process-wide thread; once the GPU has shown it idle
// (gpus.hpp shows_idle) for idleAfter without a break, the holder marks its
// own meta.json with an extended attribute saying since when, the history
// records it, and, when the policy says so, the holder is asked to yield.
// The mark goes when the GPU shows it busy again. Readers (inspect) read the
// mark: an attribute of the claim's own file, it goes with the claim and
// changes nothing any other participant reads. Without nvidia-smi, or on a
// file system that keeps no user attributes, nothing is marked.
#ifndef OFFLOAD_LOCK_SRC_IDLE_HPP
#define OFFLOAD_LOCK_SRC_IDLE_HPP

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "heartbeat.hpp"

namespace offload_lock::detail {

// The attribute on a holder's meta.json: the epoch ms (decimal) since which
// its GPU has shown it idle.
inline constexpr const char* idle_attr = "user.offload_lock.idle_since";
// The longest mark ever written (an epoch ms in decimal), what a reader reads.
inline constexpr std::size_t idle_mark_cap = 24;

// The mark's value read back: epoch ms; nullopt for anything else (it is
// untrusted like the rest of the lock directory).
std::optional<std::int64_t> parse_idle_mark(const std::string& value);

// How often the GPU is looked at for a rule of `idle_after_ms`: a quarter of
// it, between 250 ms and 30 s.
std::int64_t idle_sample_ms(std::int64_t idle_after_ms);

// Watches `s` (held, with s.idle_after_ms > 0) until its hold ends.
// `lock_path` is slot 0's, whose history every slot shares.
void watch_idle(const std::shared_ptr<held_state>& s, const std::string& lock_path);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_IDLE_HPP
