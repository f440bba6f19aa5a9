// The acquire loop (PROTOCOL A2): try the claim, judge what holds the path,
// reclaim it when stale, otherwise wait for a change; over one lock or over
// the first free of several GPU slots.
#ifndef OFFLOAD_LOCK_SRC_ACQUIRE_HPP
#define OFFLOAD_LOCK_SRC_ACQUIRE_HPP

#include <memory>
#include <string>

#include "local_gate.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::detail {

// One acquisition as a `lock` sees it: the owner of the process's claim, a
// nested acquisition on the owner thread, or a claim passed down by a parent.
struct handle {
  std::shared_ptr<local_gate> gate;
  bool outermost = false;
  bool released = false;
  int gpu = 0;
};

// lock::acquire() behind the public class (it is the class's friend).
struct acquirer {
  // Checks the slot options, then takes one slot's lock or the first free
  // of several. `base`: the resolved lock path (slot 0's).
  static result<lock> acquire(const lock_options& opt, const std::string& base);
  // A lock object over one acquisition.
  static lock make(const std::shared_ptr<local_gate>& gate, bool outermost, int gpu);
};

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_ACQUIRE_HPP
