// lock::acquire() behind the public class: the plan, the in-process gate
// (B10), a claim passed down by a parent (B11), then the acquisition.
#ifndef OFFLOAD_LOCK_SRC_ACQUIRE_HPP
#define OFFLOAD_LOCK_SRC_ACQUIRE_HPP

#include <memory>
#include <string>

#include "local_gate.hpp"
#include "offload_lock/lock.hpp"

namespace offload_lock::detail {

namespace etcd {
class hold;
}

// One acquisition as a `lock` sees it: the owner of the process's claim, a
// nested acquisition on the owner thread, or a claim passed down by a
// parent. `pid`: the process it was made in (a forked child's copy does
// nothing, and touches no mutex the fork may have copied locked).
struct handle {
  std::shared_ptr<local_gate> gate;
  bool outermost = false;
  bool released = false;
  int gpu = 0;
  std::int64_t pid = 0;
  // An etcd lock's acquisition (etcd/lock.hpp): then `gate` is null, and
  // every member of `lock` asks this instead.
  std::shared_ptr<etcd::hold> remote;
  // Its record in the fleet view (etcd/fleet.hpp); 0: none.
  std::uint64_t fleet_id = 0;
};

// lock::acquire() behind the public class (it is the class's friend).
struct acquirer {
  // Takes one slot's lock or the first free of several. `base`: the
  // resolved lock path (slot 0's).
  static result<lock> acquire(const lock_options& opt, const std::string& base);
  // A lock object over one acquisition.
  static lock make(const std::shared_ptr<local_gate>& gate, bool outermost, int gpu);
  // A lock object over an etcd acquisition (lock.cpp).
  static lock make_remote(std::shared_ptr<etcd::hold> h, bool outermost);
};

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_ACQUIRE_HPP
