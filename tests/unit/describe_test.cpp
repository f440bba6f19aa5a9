// The library's words (offload_lock/describe.hpp): the grammar of a
// priority, and the waiting line's place and ETA. (Durations: args_test.cpp;
// the C API's view of all of them: capi/words_test.c.)
#include <catch2/catch.hpp>

#include "offload_lock/describe.hpp"
#include "offload_lock/lock.hpp"

using namespace offload_lock;
using std::chrono::milliseconds;
using std::chrono::minutes;

TEST_CASE("priorities: the command's grammar", "[unit][describe]") {
  CHECK(parse_priority("batch") == priority_batch);
  CHECK(parse_priority("normal") == 0);
  CHECK(parse_priority("interactive") == 10);
  CHECK(parse_priority("-100") == min_priority);
  CHECK(parse_priority("100") == max_priority);
  CHECK(parse_priority("7") == 7);
  for (const char* bad : {"+5", "101", "-101", "", "-", " 5", "5 ", "Batch", "1.0", "0x1", "1000"}) {
    INFO(bad);
    CHECK_FALSE(parse_priority(bad));
  }
}

TEST_CASE("the waiting line names the holder, the place in line and the ETA", "[unit][describe]") {
  info h;
  h.path = "/tmp/gpu.lock";
  h.present = h.held = true;
  h.pid = 4534;
  h.label = "render";
  h.host = "gpu1";
  h.held_for = milliseconds(312'000);
  wait_progress p;
  p.holders = {h};
  p.position = 1;
  CHECK(describe_wait(p, "/tmp/gpu.lock", {2, minutes(20)}) ==
        "render (pid 4534, host gpu1), held for 5m12s; #2 in line, ETA ~20m00s");
  // The progress's own position when the registry has none; no ETA unknown.
  CHECK(describe_wait(p, "/tmp/gpu.lock", {}) == "render (pid 4534, host gpu1), held for 5m12s; #1 in line");
  p.position = 0;
  CHECK(describe_wait(p, "/tmp/gpu.lock", {}) == "render (pid 4534, host gpu1), held for 5m12s");
  // Several slots: each named.
  info h1 = h;
  h1.path = "/tmp/gpu.lock.gpu1";
  h1.label = "train";
  h1.pid = 77;
  h1.host.clear();
  h1.held_for = milliseconds(9'000);
  p.holders = {h, h1};
  CHECK(describe_wait(p, "/tmp/gpu.lock", {}) ==
        "any of 2 GPUs: gpu0 render (pid 4534, host gpu1) 5m12s; gpu1 train (pid 77) 9s");
  CHECK(describe_state(h) == "held by render (pid 4534, host gpu1) for 5m12s");
  CHECK(describe_state(info{}) == "free");
}
