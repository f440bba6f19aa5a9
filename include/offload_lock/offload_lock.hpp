// offload-lock's C++ API, all of it: include this, or the one header you need.
//   error.hpp    outcomes and system errors, result<T>
//   path.hpp     where the lock lives (doc/protocol.md A1)
//   inspect.hpp  looking at the lock; waiting until it is free
//   describe.hpp the grammar of durations and priorities; the words for a
//                holder, a state and a wait
//   gpus.hpp     the machine's GPUs (nvidia-smi), CUDA_VISIBLE_DEVICES
//   waiters.hpp  who waits for it
//   slots.hpp    one lock per GPU
//   lock.hpp     taking, holding and releasing it
//   release.hpp  releasing by token or pid, from another process
//   mutex.hpp    a Lockable for std::lock_guard and std::unique_lock
//   watch.hpp    waking a status board when the lock may have changed
//   history.hpp  who held it, for how long, and who waited (where it is kept)
//   lease.hpp    the gpulease lease of current upstream runners: where, who holds it
// The C API is offload_lock.h.
#ifndef OFFLOAD_LOCK_OFFLOAD_LOCK_HPP
#define OFFLOAD_LOCK_OFFLOAD_LOCK_HPP

#include "offload_lock/describe.hpp"
#include "offload_lock/error.hpp"
#include "offload_lock/etcd.hpp"
#include "offload_lock/gpus.hpp"
#include "offload_lock/history.hpp"
#include "offload_lock/inspect.hpp"
#include "offload_lock/lease.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/mutex.hpp"
#include "offload_lock/path.hpp"
#include "offload_lock/policy.hpp"
#include "offload_lock/release.hpp"
#include "offload_lock/slots.hpp"
#include "offload_lock/waiters.hpp"
#include "offload_lock/watch.hpp"

#endif  // OFFLOAD_LOCK_OFFLOAD_LOCK_HPP
