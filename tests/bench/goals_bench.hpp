// Section 9 of the benchmark: the goals of the one-acquisition work and of
// the queue's trust rules, each printed with its figure beside the figures
// of older builds measured in the same run. Older builds are driven through
// their shared library (dlopen in a child process per participant), so
// every build runs the same loop; a build not given is "not measured".
#ifndef OFFLOAD_LOCK_BENCH_GOALS_BENCH_HPP
#define OFFLOAD_LOCK_BENCH_GOALS_BENCH_HPP

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace bench::goals {

// A build to compare with: its name as printed ("0.1") and its liboffload_lock.so.
struct build {
  std::string name, lib;
};

// Reads NAME=PATH, PATH being a shared library, a build directory holding
// liboffload_lock.so, or an offload-lock command with the library beside
// it. nullopt and `error` (one line) when PATH leads to no library.
std::optional<build> parse_baseline(const std::string& arg, std::string& error);

struct setup {
  std::string self;  // this program, re-executed for the participants
  std::string dir;   // a fresh directory of the run
  std::string run_dir;  // the run's top directory (opened to another user when planting as one)
  build current;     // this build
  std::vector<build> baselines;
  bool quick = false;
  const nlohmann::ordered_json* earlier = nullptr;  // what sections 1-7 recorded (their figures are reused)
};

using printer = std::function<void(const std::string&)>;

// Runs the section; returns its JSON (rows and a goal list).
nlohmann::ordered_json run(const setup& s, const printer& print);

// The participants: `offload-lock-bench --child g-...` (goals_children.cpp).
int run_child(int argc, char** argv);

}  // namespace bench::goals

#endif  // OFFLOAD_LOCK_BENCH_GOALS_BENCH_HPP
