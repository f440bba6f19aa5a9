// The gpulease lease in the C API's struct (offload_lock_lease_info), both
// ways: for offload_lock_lease_inspect and the progress callback, and back
// for offload_lock_describe_wait.
#ifndef OFFLOAD_LOCK_SRC_C_API_LEASE_HPP
#define OFFLOAD_LOCK_SRC_C_API_LEASE_HPP

#include "offload_lock/lease.hpp"
#include "offload_lock/offload_lock.h"

namespace offload_lock::detail {

// Zeroes `out`, then fills it (strings cut to their fields).
void fill_c_lease(offload_lock_lease_info& out, const lease_info& i);
// What fill_c_lease wrote, as far as the fields hold it.
lease_info lease_of_c(const offload_lock_lease_info& c);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_C_API_LEASE_HPP
