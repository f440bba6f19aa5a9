// The test binary: Catch2's runner, plus child modes that the multi-process
// tests start as real peer processes (`offload_lock_tests --child MODE ...`).
// A child talks to the test over stdin/stdout lines.
#define CATCH_CONFIG_RUNNER
#include <pthread.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "offload_lock/lock.hpp"

namespace {

namespace ol = offload_lock;

// hold PATH WAIT_MS [TTL_MS]: take the lock through the library, say
// "acquired PID TOKEN" (or "busy", "timed_out", "error MESSAGE"), then obey
// lines: "release" -> "released" | "lost"; "still" -> "held" | "not held".
// At EOF the lock object's destructor releases.
int child_hold(int argc, char** argv) {
  if (argc < 2) return 2;
  ol::lock_options o;
  o.path = argv[0];
  o.wait = std::stoll(argv[1]) < 0 ? ol::wait_forever : ol::milliseconds(std::stoll(argv[1]));
  if (argc > 2) o.ttl = ol::milliseconds(std::stoll(argv[2]));
  o.label = "test-child";
  o.on_lost = [](const ol::error&) { std::cout << "on_lost" << std::endl; };
  auto l = ol::lock::acquire(o);
  if (!l) {
    const auto& e = l.error();
    if (e == ol::errc::busy) std::cout << "busy" << std::endl;
    else if (e == ol::errc::timed_out) std::cout << "timed_out" << std::endl;
    else std::cout << "error " << e.message() << std::endl;
    return 1;
  }
  std::cout << "acquired " << l->pid() << " " << l->token() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "release") {
      std::cout << (l->release() ? "lost" : "released") << std::endl;
    } else if (line == "still") {
      std::cout << (l->still_held() ? "held" : "not held") << std::endl;
    }
  }
  return 0;
}

// main-exits SECONDS: says "ready", then the main thread ends by itself
// while another thread lives on for SECONDS: /proc shows the process as a
// zombie all that time.
int child_main_exits(int argc, char** argv) {
  if (argc < 1) return 2;
  const int seconds = std::stoi(argv[0]);
  std::thread([seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    std::_Exit(0);
  }).detach();
  std::cout << "ready" << std::endl;
  pthread_exit(nullptr);
}

// cycle PATH N: acquire and release N times (waiting forever), then "done".
int child_cycle(int argc, char** argv) {
  if (argc < 2) return 2;
  long n = std::stol(argv[1]);
  for (long i = 0; i < n; ++i) {
    auto l = ol::lock::acquire(argv[0]);
    if (!l) {
      std::cout << "error " << l.error().message() << std::endl;
      return 1;
    }
    if (auto e = l->release()) {
      std::cout << "lost " << e.message() << std::endl;
      return 1;
    }
  }
  std::cout << "done" << std::endl;
  return 0;
}

}  // namespace

// tests/multiprocess/fault_test.cpp; weak, since the interop test binary
// shares this main without the fault tests.
int child_fault(int argc, char** argv) __attribute__((weak));
// tests/multiprocess/trust_test.cpp, likewise.
int child_trust(int argc, char** argv) __attribute__((weak));
// tests/multiprocess/fault_sweep_test.cpp, likewise.
int child_fault_sweep(int argc, char** argv) __attribute__((weak));
// tests/multiprocess/lease_test.cpp, likewise.
int child_lease(int argc, char** argv) __attribute__((weak));
// tests/multiprocess/handoff_test.cpp, likewise.
int child_handoff(int argc, char** argv) __attribute__((weak));

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") {
    std::string mode = argv[2];
    if (mode == "hold") return child_hold(argc - 3, argv + 3);
    if (mode == "cycle") return child_cycle(argc - 3, argv + 3);
    if (mode == "main-exits") return child_main_exits(argc - 3, argv + 3);
    if (mode == "fault" && child_fault) return child_fault(argc - 3, argv + 3);
    if (mode == "trust" && child_trust) return child_trust(argc - 3, argv + 3);
    if (mode == "fault-sweep" && child_fault_sweep) return child_fault_sweep(argc - 3, argv + 3);
    if (mode == "lease" && child_lease) return child_lease(argc - 3, argv + 3);
    if (mode == "handoff" && child_handoff) return child_handoff(argc - 3, argv + 3);
    std::cerr << "unknown child mode " << mode << "\n";
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
