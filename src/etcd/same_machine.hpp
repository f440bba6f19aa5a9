// A holder of an etcd lock that runs on this very machine: its death is
// seen at once, where a holder elsewhere is known dead only when its lease
// lapses (doc/etcd.md "A holder on the same machine").
//
// A record names its pid with the boot, the pid and time namespaces and the
// process's start ticks of the machine that wrote it (stamp_here). A reader
// whose own are all the same judges the pid as the local lock judges its
// recorded holder (B6): gone when kill() says so or the pid now names a
// process started since; anything it cannot read is unknown, which is
// never gone.
#ifndef OFFLOAD_LOCK_SRC_ETCD_SAME_MACHINE_HPP
#define OFFLOAD_LOCK_SRC_ETCD_SAME_MACHINE_HPP

#include <cstdint>

#include "etcd/record.hpp"

namespace offload_lock::detail::etcd {

// How often a holder that has exited but is not yet reaped is looked at
// again: its reaping makes no event (same_machine.cpp).
inline constexpr std::int64_t exited_look_ms = 1'000;

// Sets r's boot, namespaces and the start of r.pid, when this machine can
// say them all; leaves them empty otherwise (the record is then judged by
// its lease alone).
void stamp_here(record& r);

enum class fate {
  elsewhere,  // not this machine's, or not judged here (its lease decides)
  alive,
  exited,     // exited, not yet reaped, its keeper alive or threads maybe at work: waited for
  gone,       // dead and reaped, or the pid reused, or exited with no keeper left
  unknown,    // this machine's, but something could not be read
};

struct judgment {
  fate f = fate::elsewhere;
  // The process whose exit changes the judgment, to be watched (0: none).
  std::int64_t watch = 0;
};
judgment judge_here(const record& r);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_SAME_MACHINE_HPP
