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

// How long the keeper of a holder whose process has exited (an unreaped
// zombie) is given to release the lock itself before a waiter takes it,
// when the keeper is not known gone: `run` releases while its CMD is still
// a zombie, within milliseconds.
inline constexpr std::int64_t exited_grace_ms = 1'000;

// Sets r's boot, namespaces and the start of r.pid, when this machine can
// say them all; leaves them empty otherwise (the record is then judged by
// its lease alone).
void stamp_here(record& r);

enum class fate {
  elsewhere,  // not this machine's, or not judged here (its lease decides)
  alive,
  exited,     // a zombie (exited, not yet reaped) whose keeper may still release
  gone,       // dead and reaped, or the pid reused, or a zombie whose keeper is gone
  unknown,    // this machine's, but something could not be read
};
fate judge_here(const record& r);

}  // namespace offload_lock::detail::etcd

#endif  // OFFLOAD_LOCK_SRC_ETCD_SAME_MACHINE_HPP
