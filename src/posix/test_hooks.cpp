// The test switches and crash points (os/test_hooks.hpp), read once per
// process from the environment.
#include "os/test_hooks.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

namespace {

bool switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

struct switches {
  bool no_inotify = switch_on("OFFLOAD_LOCK_NO_INOTIFY");
  bool no_pidfd = switch_on("OFFLOAD_LOCK_NO_PIDFD");
  bool no_renameat2 = switch_on("OFFLOAD_LOCK_NO_RENAMEAT2");
};
const switches& the_switches() {
  static const switches s;
  return s;
}

struct crash_spec {
  std::string step;  // empty: crash points are off (normal use)
  long nth = 1;
  mutable std::atomic<long> seen{0};
  crash_spec() {
    const char* v = std::getenv("OFFLOAD_LOCK_TEST_CRASH_AT");
    if (!v || !*v) return;
    step = v;
    if (auto at = step.find('@'); at != std::string::npos) {
      nth = std::max(1L, std::strtol(step.c_str() + at + 1, nullptr, 10));
      step.resize(at);
    }
  }
};
const crash_spec& crash_config() {
  static const crash_spec spec;
  return spec;
}
// OFFLOAD_LOCK_TEST_STOP_AT=STEP[,STEP...]: the steps at which this process
// stops itself (SIGSTOP), every time it reaches one, so that a test can act
// while it stands still there and then let it go on (SIGCONT).
struct stop_spec {
  std::vector<std::string> steps;
  stop_spec() {
    const char* v = std::getenv("OFFLOAD_LOCK_TEST_STOP_AT");
    if (!v) return;
    std::stringstream in(v);
    for (std::string s; std::getline(in, s, ',');)
      if (!s.empty()) steps.push_back(s);
  }
  bool has(const std::string& step) const { return std::find(steps.begin(), steps.end(), step) != steps.end(); }
};
const stop_spec& stop_config() {
  static const stop_spec spec;
  return spec;
}

[[noreturn]] void crash_now() {
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

}  // namespace

bool feature_enabled(feature f) {
  const switches& s = the_switches();
  switch (f) {
    case feature::inotify: return !s.no_inotify;
    case feature::pidfd: return !s.no_pidfd;
    case feature::renameat2: return !s.no_renameat2;
  }
  return true;
}

void crash_point(const char* step) {
  const stop_spec& s = stop_config();
  if (!s.steps.empty() && s.has(step)) (void)::raise(SIGSTOP);
  const crash_spec& c = crash_config();
  if (c.step.empty() || c.step != step) return;
  if (c.seen.fetch_add(1) + 1 == c.nth) crash_now();
}

void crash_point(const char* op, const char* step) {
  if (crash_config().step.empty() && stop_config().steps.empty()) return;
  crash_point((std::string(op) + "." + step).c_str());
}

std::int64_t clock_skew_ms() {
  // The file is re-read each time, so a test can step this process's wall
  // clock while it waits; its name is read once.
  static const std::string file = [] {
    const char* v = std::getenv("OFFLOAD_LOCK_TEST_CLOCK_SKEW_FILE");
    return std::string(v ? v : "");
  }();
  if (file.empty()) return 0;
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return std::stoll(ss.str());
  } catch (...) {
    return 0;
  }
}

}  // namespace offload_lock::detail::sys
