// Threads of one process (doc/protocol.md B10): they queue for a lock (one
// slot) inside the process, in the order of the lock's queue (priority,
// then arrival), so that only one makes the file claim, and a nested
// acquisition on the holding thread passes straight through.
#ifndef OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP
#define OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "heartbeat.hpp"
#include "lock_dir.hpp"
#include "timing.hpp"

namespace offload_lock::detail {

// A number for the calling thread that no other thread of this process ever
// had. std::thread::id values are reused once a thread ends, and a new
// thread that inherited an ended holder's id must not pass through as a
// nested acquisition.
std::uint64_t this_thread_serial();

// One gate per lock directory (parent device and inode, and name).
//
// fork: a forked child has only the thread that forked, so the gate it
// inherits describes threads it does not have. The first use in a child
// resets it: nothing is held or owned there (a child forked from the
// holding thread is no nested holder, and a child forked while another
// thread waited does not wait for that thread), and the gates' mutexes are
// taken around fork so that none is copied locked.
class local_gate {
 public:
  enum class entered {
    owner,      // this thread now owns the gate: it may make the file claim
    nested,     // this thread holds the lock already: pass straight through
    busy,       // a single try, and another thread owns it; or this thread is
                // inside its own wait for it (a callback): it would wait on itself
    timed_out,
    cancelled,  // one of the cancel descriptors fired
  };
  // Waits, in order of priority then arrival, until no other thread owns the
  // gate, the deadline, or a cancel descriptor (readable or hung up). The
  // owner must leave() once its acquisition fails or its lock is released.
  // With `waited`, whether it waited behind another thread.
  entered enter(int priority, const deadline& until, const std::vector<int>& cancel_fds, bool* waited = nullptr);
  // The owner gives the gate up: the next thread in line is woken.
  void leave();

  // Under `mu` (the owner's data):
  std::mutex mu;
  std::shared_ptr<held_state> held;
  std::string inherited_token;  // set when the claim is the parent process's (B11)
  // Set when this process runs under a gpulease holder's lease (GPU_LEASE_*):
  // its epoch and the variables to pass on (lease_join.hpp).
  std::uint64_t inherited_lease_epoch = 0;
  std::vector<std::pair<std::string, std::string>> inherited_lease_env;
  bool passes_through() const { return !inherited_token.empty() || inherited_lease_epoch != 0; }
  void forget_inherited() {
    inherited_token.clear();
    inherited_lease_epoch = 0;
    inherited_lease_env.clear();
  }
  int depth = 0;                // acquisitions by the owner thread, nested ones included
  // Whether the state belongs to this process (not a forked copy); resets it
  // when it does not. Call with `mu` held.
  void own_process();

 private:
  struct waiting {
    int priority;
    std::uint64_t ticket;
    int wake;  // the write end of the waiter's own pipe
  };
  void wake_front();
  std::deque<waiting> queue_;  // waiting threads, in serving order
  std::uint64_t next_ticket_ = 0;
  bool owned_ = false;
  std::uint64_t owner_ = 0;  // this_thread_serial() of the owning thread
  std::int64_t pid_ = 0;     // the process this state belongs to
};

// The gate of the lock `t`, made on first use and shared while anyone uses it.
std::shared_ptr<local_gate> gate_for(const target& t);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP
