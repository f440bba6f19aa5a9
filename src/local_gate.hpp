// Threads of one process (PROTOCOL B10): they queue for a lock inside the
// process, in the order of the lock's queue (priority, then arrival), so that only one makes the file claim, and a
// nested acquisition on the holding thread passes straight through.
#ifndef OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP
#define OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "heartbeat.hpp"
#include "lock_dir.hpp"

namespace offload_lock::detail {

// A number for the calling thread that no other thread of this process ever
// had. std::thread::id values are reused once a thread ends, and a new
// thread that inherited an ended holder's id must not pass through as a
// nested acquisition.
std::uint64_t this_thread_serial();

// One gate per lock directory (parent device and inode, and name).
struct local_gate {
  std::mutex mu;
  std::condition_variable cv;
  struct waiting {
    int priority;
    std::uint64_t ticket;
  };
  // cppcheck-suppress unusedStructMember ; used as gate->queue, through a shared_ptr
  std::deque<waiting> queue;  // waiting threads, in serving order (priority, then arrival)
  std::uint64_t next_ticket = 0;
  bool owned = false;
  std::uint64_t owner = 0;          // this_thread_serial() of the owning thread
  int depth = 0;                    // acquisitions by the owner thread, nested ones included
  std::shared_ptr<held_state> held;
  std::string inherited_token;      // set when the claim is the parent process's (B11)
};

// The gate of the lock `t`, made on first use and shared while anyone uses it.
std::shared_ptr<local_gate> gate_for(const target& t);

}  // namespace offload_lock::detail

#endif  // OFFLOAD_LOCK_SRC_LOCAL_GATE_HPP
