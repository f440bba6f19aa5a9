// The library side of waiting in company: several GPU slots, the waiter
// registry as waiters() reads it, and progress reports while waiting.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

TEST_CASE("gpus = 3: threads take distinct slots, and a fourth waits for whichever frees first", "[multiprocess][gpus]") {
  temp_dir d;
  ol::lock_options o;
  o.path = d.lock();
  o.gpus = 3;
  o.wait = 0ms;
  // Three threads each take a slot and hold it until told which slot to free.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> slots_taken;
  int paths_right = 0, released_ok = 0;  // checked on the test's thread (Catch is not thread-safe)
  int free_slot = -1;
  bool finish = false;
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&] {
      auto l = ol::lock::acquire(o);
      std::unique_lock<std::mutex> g(mu);
      slots_taken.push_back(l ? l->gpu() : -1);
      if (l && l->path() == ol::gpu_slot_path(d.lock(), l->gpu())) ++paths_right;
      cv.notify_all();
      cv.wait(g, [&] { return finish || (l && free_slot == l->gpu()); });
      if (l && free_slot == l->gpu() && !l->release()) ++released_ok;
    });
  {
    std::unique_lock<std::mutex> g(mu);
    REQUIRE(cv.wait_for(g, kPrompt, [&] { return slots_taken.size() == 3; }));
    CHECK(std::set<int>(slots_taken.begin(), slots_taken.end()) == std::set<int>{0, 1, 2});
    CHECK(paths_right == 3);
  }
  CHECK(ol::gpu_slot_path(d.lock(), 0) == d.lock());
  CHECK(ol::gpu_slot_path(d.lock(), 2) == d.lock() + ".gpu2");
  CHECK(ol::lock::acquire(o).error() == ol::errc::busy);

  std::atomic<int> got{-1};
  std::thread fourth([&] {
    ol::lock_options w = o;
    w.wait = 20s;
    auto l = ol::lock::acquire(w);
    if (l) got = l->gpu();
  });
  // Free slot 1 once the fourth waits on the files.
  REQUIRE(eventually([&] { return !ol::waiters(d.lock()).empty(); }));
  {
    std::lock_guard<std::mutex> g(mu);
    free_slot = 1;
    cv.notify_all();
  }
  fourth.join();
  CHECK(got == 1);
  {
    std::lock_guard<std::mutex> g(mu);
    finish = true;
    cv.notify_all();
  }
  for (auto& t : ts) t.join();
  CHECK(released_ok == 1);
}

TEST_CASE("waiters() lists a waiting acquisition with its label and slot until it holds", "[multiprocess][gpus]") {
  temp_dir d;
  const std::string slot2 = ol::gpu_slot_path(d.lock(), 2);
  child holder(self_exe(), {"--child", "hold", slot2, "0"});
  auto line = holder.read_line();
  REQUIRE(line);
  REQUIRE_THAT(*line, Catch::StartsWith("acquired " + std::to_string(holder.pid())));
  std::atomic<int> got{-1};
  std::thread t([&] {
    ol::lock_options o;
    o.path = d.lock();
    o.gpus = 3;
    o.gpu = 2;
    o.label = "lib-waiter";
    o.wait = 20s;
    auto l = ol::lock::acquire(o);
    got = l ? l->gpu() : -2;
  });
  REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == 1; }));
  auto w = ol::waiters(d.lock()).at(0);
  CHECK(w.pid == ::getpid());
  CHECK(w.label == "lib-waiter");
  CHECK(w.gpu == 2);
  CHECK(w.gpus == 3);
  CHECK(w.since <= now_ms());
  CHECK(w.since > now_ms() - 20'000);
  CHECK(ol::waiters(slot2).empty());  // the registry is slot 0's
  holder.write_line("release");
  CHECK(holder.read_line() == "released");
  t.join();
  CHECK(got == 2);
  CHECK(ol::waiters(d.lock()).empty());
  CHECK_FALSE(fs::exists(d.path / ".gpu.lock.queue"));
}

TEST_CASE("on_progress reports the holder at once, then the time passing", "[multiprocess]") {
  temp_dir d;
  child holder(self_exe(), {"--child", "hold", d.lock(), "0"});
  REQUIRE(holder.read_line());
  std::mutex mu;
  std::vector<ol::wait_progress> seen;
  std::thread releaser([&] {
    eventually([&] {
      std::lock_guard<std::mutex> g(mu);
      return seen.size() >= 4;
    });
    holder.write_line("release");
  });
  ol::lock_options o;
  o.path = d.lock();
  o.wait = 30s;
  o.progress_every = 100ms;
  o.on_progress = [&](const ol::wait_progress& p) {
    std::lock_guard<std::mutex> g(mu);
    seen.push_back(p);
  };
  auto l = ol::lock::acquire(o);
  releaser.join();
  REQUIRE(l);
  REQUIRE(seen.size() >= 4);
  CHECK(seen[0].changed);
  REQUIRE(seen[0].holders.size() == 1);
  CHECK(seen[0].holders[0].pid == holder.pid());
  CHECK(seen[0].holders[0].label == "test-child");
  for (std::size_t i = 1; i < 4; ++i) {
    CHECK_FALSE(seen[i].changed);
    CHECK(seen[i].waited > seen[i - 1].waited);
    CHECK(seen[i].holders[0].held_for > seen[i - 1].holders[0].held_for);
    CHECK(seen[i].waited - seen[i - 1].waited >= 90ms);
  }
}

TEST_CASE("GPU options out of range are bad input", "[unit][gpus]") {
  temp_dir d;
  ol::lock_options o;
  o.path = d.lock();
  o.wait = 0ms;
  o.gpus = 0;
  CHECK(ol::lock::acquire(o).error() == ol::errc::bad_input);
  o.gpus = ol::max_gpus + 1;
  CHECK(ol::lock::acquire(o).error() == ol::errc::bad_input);
  o.gpus = 3;
  o.gpu = ol::max_gpus;
  CHECK(ol::lock::acquire(o).error() == ol::errc::bad_input);
  o.gpu = 1;
  o.allowed_gpus = {0};  // a restriction only means something among several
  CHECK(ol::lock::acquire(o).error() == ol::errc::bad_input);
  CHECK_FALSE(fs::exists(d.lock()));
  // gpu K names slot K alone, whatever gpus says (`--gpu 3` beyond the
  // count a discovery found): neither the command nor the C API adjusts it.
  o.allowed_gpus.clear();
  o.gpu = 3;
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  CHECK(l->gpu() == 3);
  CHECK(fs::exists(ol::gpu_slot_path(d.lock(), 3)));
}
