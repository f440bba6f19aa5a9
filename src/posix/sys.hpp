// Every declaration of the seam (src/os/), for the command's own OS helpers
// in src/posix/ that build on the library's file and process calls.
#ifndef OFFLOAD_LOCK_SRC_POSIX_SYS_HPP
#define OFFLOAD_LOCK_SRC_POSIX_SYS_HPP

#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "os/types.hpp"
#include "os/watch.hpp"

#endif  // OFFLOAD_LOCK_SRC_POSIX_SYS_HPP
