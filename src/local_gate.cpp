// The in-process queue of threads (local_gate.hpp, doc/protocol.md B10).
#include "local_gate.hpp"

#include <algorithm>
#include <atomic>
#include <map>

#include "os/files.hpp"
#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

std::mutex& gate_registry_mu() {
  static std::mutex m;
  return m;
}

std::map<std::string, std::weak_ptr<local_gate>>& gate_registry() {
  static std::map<std::string, std::weak_ptr<local_gate>> r;
  return r;
}

// fork() copies only the calling thread: a mutex another thread held at that
// moment would stay locked in the child forever. So the registry's mutex
// and every live gate's are taken around fork (the registry's first, as
// everywhere), and let go on both sides.
std::vector<std::shared_ptr<local_gate>>& held_for_fork() {
  static std::vector<std::shared_ptr<local_gate>> v;
  return v;
}

void fork_prepare() {
  gate_registry_mu().lock();
  auto& held = held_for_fork();
  for (auto& [key, weak] : gate_registry())
    if (auto g = weak.lock()) held.push_back(std::move(g));
  for (const auto& g : held) g->mu.lock();
}

void fork_after() {
  auto& held = held_for_fork();
  for (const auto& g : held) g->mu.unlock();
  held.clear();
  gate_registry_mu().unlock();
}

struct fork_guard {
  fork_guard() noexcept { sys::on_fork(fork_prepare, fork_after, fork_after); }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif

}  // namespace

std::uint64_t this_thread_serial() {
  static std::atomic<std::uint64_t> next{1};
  thread_local const std::uint64_t mine = next.fetch_add(1);
  return mine;
}

void local_gate::own_process() {
  const std::int64_t me = sys::self_pid();
  if (pid_ == me) return;
  if (pid_ != 0) {
    // A forked copy: the parent's threads and holdings are not this
    // process's. (The held state's descriptors in the child point at
    // /dev/null already: os/files.hpp guard_from_fork.)
    queue_.clear();
    owned_ = false;
    owner_ = 0;
    depth = 0;
    held.reset();
    forget_inherited();
  }
  pid_ = me;
}

local_gate::entered local_gate::enter(int priority, const deadline& until, const std::vector<int>& cancel_fds,
                                      bool* waited) {
  std::unique_lock<std::mutex> g(mu);
  own_process();
  const std::uint64_t me = this_thread_serial();
  if (owned_ && owner_ == me) {
    // B10: a nested acquisition on the thread that holds the lock. The
    // owner that does not hold it yet is inside its own wait (an
    // on_progress callback): it would wait for itself.
    if (!held && inherited_token.empty()) return entered::busy;
    ++depth;
    return entered::nested;
  }
  if (!owned_ && queue_.empty()) {
    owned_ = true;
    owner_ = me;
    depth = 1;
    return entered::owner;
  }
  if (until.trying()) return entered::busy;
  if (waited) *waited = true;
  // Behind other threads: in the lock's order, each on a pipe of its own so
  // that a leave wakes only the next one, and the wait can watch the cancel
  // descriptors too.
  auto pipe = sys::make_pipe();
  if (!pipe) return entered::busy;
  const std::uint64_t ticket = next_ticket_++;
  queue_.insert(std::find_if(queue_.begin(), queue_.end(), [&](const waiting& q) { return q.priority < priority; }),
                waiting{priority, ticket, pipe->second.get()});
  auto leave_queue = [&] {
    queue_.erase(std::find_if(queue_.begin(), queue_.end(), [&](const waiting& q) { return q.ticket == ticket; }));
    if (!owned_) wake_front();
  };
  std::vector<int> fds = {pipe->first.get()};
  fds.insert(fds.end(), cancel_fds.begin(), cancel_fds.end());
  for (;;) {
    if (!owned_ && queue_.front().ticket == ticket) {
      queue_.pop_front();
      owned_ = true;
      owner_ = me;
      depth = 1;
      return entered::owner;
    }
    if (until.expired()) {
      leave_queue();
      return entered::timed_out;
    }
    g.unlock();
    const int woke = sys::wait_any(fds, until.left());
    g.lock();
    if (woke > 0) {
      leave_queue();
      return entered::cancelled;
    }
    sys::drain(pipe->first.get());
  }
}

void local_gate::wake_front() {
  if (!queue_.empty()) sys::notify(queue_.front().wake);
}

void local_gate::leave() {
  std::lock_guard<std::mutex> g(mu);
  own_process();
  owned_ = false;
  owner_ = 0;
  depth = 0;
  wake_front();
}

std::shared_ptr<local_gate> gate_for(const target& t) {
  std::string key = t.name;
  if (auto id = parent_identity(t)) key = std::to_string(id->dev) + ":" + std::to_string(id->ino) + "/" + t.name;
  std::lock_guard<std::mutex> g(gate_registry_mu());
  auto& slot = gate_registry()[key];
  auto gate = slot.lock();
  if (!gate) {
    gate = std::make_shared<local_gate>();
    slot = gate;
  }
  return gate;
}

}  // namespace offload_lock::detail
