// The in-process queue of threads (local_gate.hpp, PROTOCOL B10).
#include "local_gate.hpp"

#include <atomic>
#include <map>

#include "os/process.hpp"

namespace offload_lock::detail {

namespace {

std::mutex& gate_registry_mu() {
  static std::mutex m;
  return m;
}

// fork() copies only the calling thread: a registry mutex another thread held
// at that moment would stay locked in the child forever, and the child's
// first acquisition would hang on it. So it is taken around fork.
struct fork_guard {
  fork_guard() noexcept {
    sys::on_fork([] { gate_registry_mu().lock(); }, [] { gate_registry_mu().unlock(); },
                 [] { gate_registry_mu().unlock(); });
  }
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

std::shared_ptr<local_gate> gate_for(const target& t) {
  std::mutex& registry_mu = gate_registry_mu();
  static std::map<std::string, std::weak_ptr<local_gate>> registry;
  std::string key = t.name;
  if (auto st = sys::stat_fd(t.parent.get(), t.path))
    key = std::to_string(st->id.dev) + ":" + std::to_string(st->id.ino) + "/" + t.name;
  std::lock_guard<std::mutex> g(registry_mu);
  auto& slot = registry[key];
  auto gate = slot.lock();
  if (!gate) {
    gate = std::make_shared<local_gate>();
    slot = gate;
  }
  return gate;
}

}  // namespace offload_lock::detail
