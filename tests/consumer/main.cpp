// A consumer of offload-lock, compiled as C++17 against the public headers
// only: takes the lock at argv[1], checks it through inspect(), releases it.
#include <offload_lock/lock.hpp>
#include <offload_lock/mutex.hpp>
#include <offload_lock/path.hpp>
#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  auto l = offload_lock::lock::acquire(argv[1], std::chrono::seconds(10));
  if (!l) {
    std::cerr << "acquire: " << l.error().message() << "\n";
    return 1;
  }
  if (!offload_lock::inspect(argv[1]).held) return 1;
  if (l->release()) return 1;
  offload_lock::lock_options o;
  o.path = argv[1];
  offload_lock::gpu_mutex gpu(o);
  { std::lock_guard<offload_lock::gpu_mutex> g(gpu); }
  std::cout << "consumer ok (offload-lock " << offload_lock::version() << ")\n";
  return 0;
}
