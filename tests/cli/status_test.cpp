// Who holds the GPU and who waits: the waiter registry, `status` for people,
// for programs (--json) and for dashboards (--prometheus), `status --watch`,
// the status line of a waiting command, and GPU slots (--gpus / --gpu).
// Real processes throughout; terminals are real pseudo-terminals from
// script(1).
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) out.push_back(l);
  return out;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Everything a child writes to stdout until it exits.
std::string all_output(child& c) {
  std::string out;
  while (auto l = c.read_line()) out += *l + "\n";
  return out;
}

// A shell command line with each word quoted, for script(1).
std::string shell_words(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) {
    s += s.empty() ? "'" : " '";
    for (char c : w) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += "'";
  }
  return s;
}

// Runs `words` on a fresh pseudo-terminal; stdout of the child is what the
// terminal showed.
std::unique_ptr<child> on_terminal(const std::vector<std::string>& words) {
  return std::make_unique<child>("/usr/bin/script", std::vector<std::string>{"-qfec", shell_words(words), "/dev/null"});
}

// The registry entries next to the lock (in every user's directory of
// `.gpu.lock.queue`), whatever they say.
std::size_t registry_files(const temp_dir& d) {
  const fs::path top = d.path / ".gpu.lock.queue";
  if (!fs::exists(top)) return 0;
  std::size_t n = 0;
  for (fs::recursive_directory_iterator it(top), end; it != end; ++it)
    if (fs::is_regular_file(it->status()) && it->path().extension() == ".json") ++n;
  return n;
}

bool waiter_listed(const std::string& lock, int pid) {
  for (const auto& w : ol::waiters(lock))
    if (w.pid == pid) return true;
  return false;
}

// The lock at d, taken by this process with `label` (the waiting tests'
// holder). Its loss, where a test takes it away, is expected.
ol::lock held_by(const temp_dir& d, const std::string& label) {
  ol::lock_options o;
  o.path = d.lock();
  o.label = label;
  o.on_lost = [](const ol::error&) {};
  auto l = ol::lock::acquire(o);
  REQUIRE(l);
  return std::move(*l);
}

// CPU time a process has used so far (user + system), from /proc.
std::int64_t cpu_ms(int pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream ss(stat.substr(stat.rfind(')') + 2));
  std::string field;
  std::int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && ss >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * 1000 / ::sysconf(_SC_CLK_TCK);
}

std::string host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

TEST_CASE("status lists the holder and the waiters, oldest first, and killed waiters drop out", "[cli][status]") {
  temp_dir d;
  auto l = held_by(d, "render-video");

  child w1(cli_exe(), with_lock(d, {"run", "--label", "train", "--", "true"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), w1.pid()); }));
  child w2(cli_exe(), with_lock(d, {"run", "--label", "second", "--", "true"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), w2.pid()); }));
  child w3(cli_exe(), with_lock(d, {"run", "--label", "doomed", "--", "true"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), w3.pid()); }));
  CHECK(registry_files(d) == 3);

  // A waiter killed outright leaves its file behind, and is not listed.
  w3.kill(SIGKILL);
  REQUIRE(w3.wait());
  CHECK(registry_files(d) == 3);

  auto r = run_cli(with_lock(d, {"status"}));
  CHECK(r.code == 0);
  auto ls = lines_of(r.out);
  REQUIRE(ls.size() == 4);
  CHECK(ls[3] == "lock: " + d.lock());
  const std::string h = host();
  CHECK_THAT(ls[0], Catch::Matches("held by render-video \\(pid " + std::to_string(::getpid()) + ", host " + h +
                                   "\\) for [0-9]+(ms|s)"));
  CHECK_THAT(ls[1], Catch::Matches("waiting: train \\(pid " + std::to_string(w1.pid()) + ", host " + h +
                                   "\\) for [0-9]+(ms|s), #1"));
  CHECK_THAT(ls[2], Catch::Matches("waiting: second \\(pid " + std::to_string(w2.pid()) + ", host " + h +
                                   "\\) for [0-9]+(ms|s), #2"));

  r = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(r.code == 0);
  json j = json::parse(r.out);
  CHECK(j["held"] == true);
  CHECK(j["label"] == "render-video");
  REQUIRE(j["waiters"].size() == 2);
  CHECK(j["waiters"][0]["pid"] == w1.pid());
  CHECK(j["waiters"][0]["label"] == "train");
  CHECK(j["waiters"][0]["host"] == h);
  CHECK(j["waiters"][0]["gpu"].is_null());
  CHECK(j["waiters"][0]["gpus"] == 1);
  CHECK(j["waiters"][1]["pid"] == w2.pid());
  CHECK(j["waiters"][0]["since"].get<std::int64_t>() <= j["waiters"][1]["since"].get<std::int64_t>());
  CHECK(j["waiters"][0]["waitedMs"].get<std::int64_t>() >= j["waiters"][1]["waitedMs"].get<std::int64_t>());
  CHECK(j["waiters"][0]["since"].get<std::int64_t>() <= now_ms());

  // A waiter whose --wait runs out leaves the queue and removes its file.
  auto gone = run_cli(with_lock(d, {"acquire", "--wait", "300ms", "--label", "impatient"}));
  CHECK(gone.code == 1);
  // Leaving, it also removed the killed waiter's file.
  CHECK(registry_files(d) == 2);

  // Through the queue (in either order): each waiter leaves it when it
  // takes the lock, and the last one out removes the directory.
  REQUIRE_FALSE(l.release());
  CHECK(w1.wait() == 0);
  CHECK(w2.wait() == 0);
  CHECK(ol::waiters(d.lock()).empty());
  CHECK_FALSE(fs::exists(d.path / ".gpu.lock.queue"));

  r = run_cli(with_lock(d, {"status"}));
  CHECK(r.code == 1);
  CHECK(r.out == "free\nlock: " + d.lock() + "\n");
}

TEST_CASE("a killed waiter's entry does not outlive the next acquisition", "[cli][status]") {
  temp_dir d;
  auto l = held_by(d, "holder");
  child w(cli_exe(), with_lock(d, {"run", "--label", "doomed", "--", "true"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), w.pid()); }));
  w.kill(SIGKILL);
  REQUIRE(w.wait());
  CHECK(registry_files(d) == 1);
  CHECK(ol::waiters(d.lock()).empty());
  REQUIRE_FALSE(l.release());
  // One acquisition that never waits sweeps it, and the empty registry.
  CHECK(run_cli(with_lock(d, {"run", "--", "true"})).code == 0);
  CHECK_FALSE(fs::exists(d.path / ".gpu.lock.queue"));
}

TEST_CASE("status --prometheus writes the textfile-collector format", "[cli][status]") {
  temp_dir d;
  auto free_r = run_cli(with_lock(d, {"status", "--prometheus"}));
  CHECK(free_r.code == 0);
  const std::string lock_label = "lock=\"" + d.lock() + "\"";
  CHECK_THAT(free_r.out, Catch::Contains("offload_lock_held{" + lock_label + ",gpu=\"0\"} 0\n"));
  CHECK_THAT(free_r.out, Catch::Contains("offload_lock_waiters{" + lock_label + "} 0\n"));
  CHECK_THAT(free_r.out, Catch::Contains("offload_lock_oldest_wait_seconds{" + lock_label + "} 0.000\n"));
  CHECK_THAT(free_r.out, !Catch::Contains("offload_lock_holder_pid{"));

  auto l = held_by(d, "say \"hi\"\\now");  // quotes and a backslash, escaped in the label value
  child w(cli_exe(), with_lock(d, {"run", "--label", "queued", "--", "true"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), w.pid()); }));

  auto r = run_cli(with_lock(d, {"status", "--prometheus"}));
  CHECK(r.code == 0);
  // Every family has HELP and TYPE before its samples; every sample is
  // name{labels} value.
  const std::regex sample(R"(^(offload_lock_[a-z_]+)\{([a-z]+="([^"\\]|\\.)*"(,[a-z]+="([^"\\]|\\.)*")*)\} (-?[0-9]+(\.[0-9]+)?)$)");
  std::set<std::string> typed;
  std::map<std::string, std::string> values;
  for (const auto& line : lines_of(r.out)) {
    INFO(line);
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      // From the history: counters (named _total) and the wait histogram;
      // of now: gauges.
      const bool counter = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
      const bool histogram = name == "offload_lock_wait_seconds";
      CHECK_THAT(line, Catch::EndsWith(counter ? " counter" : histogram ? " histogram" : " gauge"));
      typed.insert(name);
      continue;
    }
    std::smatch m;
    REQUIRE(std::regex_match(line, m, sample));
    // A histogram's samples are its family's name with _bucket, _sum or _count.
    std::string family = m[1].str();
    for (const std::string suffix : {"_bucket", "_sum", "_count"})
      if (!typed.count(family) && family.size() > suffix.size() &&
          family.compare(family.size() - suffix.size(), suffix.size(), suffix) == 0)
        family.erase(family.size() - suffix.size());
    CHECK(typed.count(family) == 1);
    values[m[1].str()] = m[m.size() - 2].str();
  }
  CHECK(values["offload_lock_held"] == "1");
  CHECK(values["offload_lock_holder_pid"] == std::to_string(::getpid()));
  CHECK(std::stod(values["offload_lock_held_seconds"]) >= 0);
  CHECK(values["offload_lock_holder_info"] == "1");
  CHECK(values["offload_lock_waiters"] == "1");
  CHECK(std::stod(values["offload_lock_oldest_wait_seconds"]) > 0);
  CHECK_THAT(r.out, Catch::Contains("label=\"say \\\"hi\\\"\\\\now\""));
  REQUIRE_FALSE(l.release());
  CHECK(w.wait() == 0);
}

TEST_CASE("status --watch prints the board again on each change, woken by events", "[cli][status]") {
  temp_dir d;
  // Off a terminal the watcher's only timer is a 60 s safety re-check, so
  // each block below arriving within a few seconds was woken by an event.
  child watch(cli_exe(), with_lock(d, {"status", "--watch"}));
  CHECK(watch.read_line() == "free");

  auto l = held_by(d, "first");
  CHECK(watch.read_line(5s) == "");
  auto held = watch.read_line(5s);
  REQUIRE(held);
  CHECK_THAT(*held, Catch::StartsWith("held by first (pid " + std::to_string(::getpid())));

  child w(cli_exe(), with_lock(d, {"hold", "--label", "queued"}));
  CHECK(watch.read_line(5s) == "");
  CHECK_THAT(watch.read_line(5s).value_or(""), Catch::StartsWith("held by first"));
  CHECK_THAT(watch.read_line(5s).value_or(""), Catch::StartsWith("waiting: queued (pid " + std::to_string(w.pid())));

  // The waiter dies: its pid's exit wakes the watcher.
  w.kill(SIGKILL);
  CHECK(watch.read_line(5s) == "");
  CHECK_THAT(watch.read_line(5s).value_or(""), Catch::StartsWith("held by first"));

  REQUIRE_FALSE(l.release());
  CHECK(watch.read_line(5s) == "");
  CHECK(watch.read_line(5s) == "free");
  // Nothing changes, nothing is printed, and it sleeps rather than spins.
  const std::int64_t cpu_before = cpu_ms(watch.pid());
  CHECK(watch.read_line(1500ms) == std::nullopt);
  CHECK(cpu_ms(watch.pid()) - cpu_before < 150);

  watch.kill(SIGTERM);
  CHECK(watch.wait() == 0);
}

TEST_CASE("status --watch on a terminal redraws in place", "[cli][status]") {
  temp_dir d;
  auto l = held_by(d, "render-video");
  auto t = on_terminal({"timeout", "--preserve-status", "-s", "TERM", "2.5", cli_exe(), "--lock", d.lock(), "status", "--watch"});
  std::string out = all_output(*t);
  CHECK(t->wait() == 0);
  INFO(out);
  // Cleared and drawn at least twice (the held-for time moves every second).
  CHECK(count_of(out, "\x1b[H\x1b[2J") >= 2);
  CHECK(count_of(out, "held by render-video (pid " + std::to_string(::getpid())) >= 2);
  CHECK_THAT(out, Catch::Contains("(watching " + d.lock() + "; Ctrl-C ends)"));
}

TEST_CASE("a waiting command keeps one status line up to date on a terminal", "[cli][status]") {
  temp_dir d;
  auto l = held_by(d, "render-video");
  auto t = on_terminal({cli_exe(), "--lock", d.lock(), "run", "--label", "tty-job", "--", "echo", "ran"});
  // Two seconds into its wait (it says so in the registry) it has drawn the
  // line more than once.
  REQUIRE(eventually([&] {
    auto ws = ol::waiters(d.lock());
    return ws.size() == 1 && ws[0].waited >= 2200ms;
  }));
  REQUIRE_FALSE(l.release());
  std::string out = all_output(*t);
  CHECK(t->wait() == 0);
  INFO(out);
  const std::string line = "\r\x1b[Koffload-lock: waiting ";
  CHECK(count_of(out, line) >= 2);
  CHECK_THAT(out, Catch::Contains("for render-video (pid " + std::to_string(::getpid())));
  CHECK_THAT(out, Catch::Contains(line + "2s for render-video"));
  // The line is cleared before CMD's own output, which starts a clean line.
  CHECK_THAT(out, Catch::Contains("\r\x1b[Kran\r\n"));
  // One line in place: no newline until CMD's.
  CHECK(count_of(out, "\n") == 1);
}

namespace {

// Swaps two directories atomically (renameat2 RENAME_EXCHANGE): the lock is
// replaced by another holder's in one step.
void exchange(const fs::path& a, const fs::path& b) {
  REQUIRE(::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), 2 /* RENAME_EXCHANGE */) == 0);
}

}  // namespace

TEST_CASE("off a terminal a waiting command says when the holder changes and reminds now and then", "[cli][status]") {
  temp_dir d;
  auto l = held_by(d, "first-holder");
  child c(cli_exe(), with_lock(d, {"run", "--remind", "300ms", "--label", "log-job", "--", "echo", "ran"}));
  REQUIRE(eventually([&] { return c.err_text().find("still waiting for first-holder") != std::string::npos; }));
  CHECK_THAT(c.err_text(), Catch::StartsWith("offload-lock: waiting for first-holder (pid " + std::to_string(::getpid())));
  CHECK_THAT(c.err_text(), Catch::Contains("; waited "));
  CHECK_THAT(c.err_text(), !Catch::Contains("\r"));

  // Another holder's lock replaces this one in one step.
  fs::path other = d.path / "other";
  fs::create_directory(other);
  write_file(other / "meta.json",
             "{\"pid\":" + std::to_string(::getpid()) + ",\"startedAt\":" + std::to_string(now_ms()) +
                 ",\"label\":\"second-holder\"}");
  exchange(d.lock(), other);
  REQUIRE(eventually([&] { return c.err_text().find("waiting for second-holder") != std::string::npos; }));
  fs::remove_all(d.lock());
  CHECK(c.read_line() == "ran");
  CHECK(c.wait() == 0);

  // --quiet: not a word, though it waited.
  CHECK(l.release() == ol::errc::lost);
  auto l2 = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l2);
  child q(cli_exe(), with_lock(d, {"--quiet", "run", "--remind", "100ms", "--", "echo", "ran"}));
  REQUIRE(eventually([&] {
    auto ws = ol::waiters(d.lock());
    return ws.size() == 1 && ws[0].waited >= 500ms;
  }));
  REQUIRE_FALSE(l2->release());
  CHECK(q.read_line() == "ran");
  CHECK(q.wait() == 0);
  CHECK(q.err_text().empty());
}

TEST_CASE("cli: --gpus 3 takes the first free of three slots, CUDA_VISIBLE_DEVICES, status of every slot", "[cli][gpus]") {
  temp_dir d;
  std::vector<std::unique_ptr<child>> holders;
  std::set<int> slots;
  for (int k = 0; k < 3; ++k) {
    holders.push_back(std::make_unique<child>(cli_exe(), with_lock(d, {"hold", "--gpus", "3", "--label", "h" + std::to_string(k)})));
    auto line = holders.back()->read_line();
    REQUIRE(line);
    REQUIRE_THAT(*line, Catch::StartsWith("acquired "));
    json j = json::parse(line->substr(9));
    int gpu = j["gpu"].get<int>();
    slots.insert(gpu);
    CHECK(j["path"] == ol::gpu_slot_path(d.lock(), gpu));
    CHECK(j["label"] == "h" + std::to_string(k));
  }
  CHECK(slots == std::set<int>{0, 1, 2});
  CHECK(fs::is_directory(d.lock()));
  CHECK(fs::is_directory(d.lock() + ".gpu1"));
  CHECK(fs::is_directory(d.lock() + ".gpu2"));

  // A fourth waits, for any of the three.
  child fourth(cli_exe(), with_lock(d, {"hold", "--gpus", "3", "--label", "fourth"}));
  REQUIRE(eventually([&] { return waiter_listed(d.lock(), fourth.pid()); }));
  auto r = run_cli(with_lock(d, {"status", "--gpus", "3"}));
  CHECK(r.code == 0);  // every slot held
  auto ls = lines_of(r.out);
  REQUIRE(ls.size() == 5);
  for (int k = 0; k < 3; ++k) CHECK_THAT(ls[static_cast<std::size_t>(k)], Catch::StartsWith("gpu" + std::to_string(k) + ": held by h"));
  CHECK_THAT(ls[3], Catch::StartsWith("waiting: fourth (pid " + std::to_string(fourth.pid())));
  CHECK_THAT(ls[3], Catch::EndsWith(", for any of 3 GPUs"));
  // Without --gpus, status finds the slots next to the lock.
  auto found = lines_of(run_cli(with_lock(d, {"status"})).out);
  REQUIRE(found.size() == 5);
  CHECK_THAT(found[2], Catch::StartsWith("gpu2: held by h"));
  json sj = json::parse(run_cli(with_lock(d, {"--json", "status", "--gpus", "3"})).out);
  REQUIRE(sj["slots"].size() == 3);
  CHECK(sj["slots"][2]["gpu"] == 2);
  CHECK(sj["slots"][2]["path"] == d.lock() + ".gpu2");
  CHECK(sj["waiters"][0]["gpus"] == 3);

  // A plain single-GPU participant contends on slot 0 only.
  CHECK(run_cli(with_lock(d, {"acquire", "--wait", "0"})).code == 1);

  // The holder of slot 1 leaves: the fourth takes slot 1.
  int gpu_of_h1 = -1;
  for (int k = 0; k < 3; ++k)
    if (ol::inspect(ol::gpu_slot_path(d.lock(), k)).label == "h1") gpu_of_h1 = k;
  REQUIRE(gpu_of_h1 >= 0);
  holders[1]->close_stdin();
  CHECK(holders[1]->wait() == 0);
  auto got = fourth.read_line();
  REQUIRE(got);
  CHECK(json::parse(got->substr(9))["gpu"] == gpu_of_h1);
  fourth.close_stdin();
  CHECK(fourth.wait() == 0);
  for (auto& h : holders) h->close_stdin();
  for (auto& h : holders) h->wait();
  CHECK_FALSE(fs::exists(d.lock() + ".gpu1"));
}

TEST_CASE("run --gpus exports the slot's GPU, and --gpu K asks for slot K only", "[cli][gpus]") {
  temp_dir d;
  auto s0 = ol::lock::acquire(d.lock(), 0ms);
  auto s1 = ol::lock::acquire(ol::gpu_slot_path(d.lock(), 1), 0ms);
  REQUIRE(s0);
  REQUIRE(s1);
  const std::vector<std::string> show = {"--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES $OFFLOAD_LOCK_PATH"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), show.begin(), show.end());
    return with_lock(d, a);
  };
  auto r = run_cli(with({"run", "--gpus", "3", "--wait", "0"}), {{"CUDA_VISIBLE_DEVICES", std::nullopt}});
  CHECK(r.code == 0);
  CHECK(r.out == "2 " + d.lock() + ".gpu2\n");
  // An inherited device list names the GPUs that may be taken, by index
  // (tests/cli/gpu_test.cpp has the rest): none of these three.
  r = run_cli(with({"run", "--gpus", "3", "--wait", "0"}), {{"CUDA_VISIBLE_DEVICES", "5,7,9"}});
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  // --gpu 1 is busy though slot 2 is free.
  r = run_cli(with({"run", "--gpu", "1", "--wait", "0"}));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy: " + d.lock() + ".gpu1 is held by"));
  r = run_cli(with({"run", "--gpu", "2", "--wait", "0"}), {{"CUDA_VISIBLE_DEVICES", std::nullopt}});
  CHECK(r.out == "2 " + d.lock() + ".gpu2\n");
  // Without --gpus nothing changes: slot 0, no CUDA_VISIBLE_DEVICES.
  REQUIRE_FALSE(s0->release());
  r = run_cli(with({"run", "--wait", "0"}), {{"CUDA_VISIBLE_DEVICES", std::nullopt}});
  CHECK(r.out == d.lock() + "\n");
  // All slots held: busy names them all.
  auto s0b = ol::lock::acquire(d.lock(), 0ms);
  auto s2 = ol::lock::acquire(ol::gpu_slot_path(d.lock(), 2), 0ms);
  r = run_cli(with({"run", "--gpus", "3", "--wait", "0"}));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy: all 3 GPU slots of " + d.lock() + " are held"));
}

TEST_CASE("acquire and release with slots, and --gpus auto counts nvidia-smi's GPUs", "[cli][gpus]") {
  temp_dir d;
  auto s0 = ol::lock::acquire(d.lock(), 0ms);
  auto s1 = ol::lock::acquire(ol::gpu_slot_path(d.lock(), 1), 0ms);
  REQUIRE(s0);
  REQUIRE(s1);
  // A stand-in nvidia-smi that reports three GPUs.
  fs::path bin = d.path / "bin";
  fs::create_directory(bin);
  write_file(bin / "nvidia-smi",
             "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n"
             "echo 'GPU 0: Stand-in (UUID: GPU-0)'\necho 'GPU 1: Stand-in (UUID: GPU-1)'\n"
             "echo 'GPU 2: Stand-in (UUID: GPU-2)'\n");
  fs::permissions(bin / "nvidia-smi", fs::owner_all);
  env_changes path_env = {{"PATH", bin.string() + ":" + std::string(::getenv("PATH"))}};
  const std::string me = std::to_string(::getpid());
  auto r = run_cli(with_lock(d, {"acquire", "--gpus", "auto", "--wait", "0", "--pid", me}), path_env);
  REQUIRE(r.code == 0);
  auto words = lines_of(r.out);
  REQUIRE(words.size() == 1);
  CHECK_THAT(words[0], Catch::Matches("[0-9a-f]{32} 2"));
  const std::string token = words[0].substr(0, 32);
  CHECK(ol::inspect(d.lock() + ".gpu2").token == token);

  // Without any GPU to count, auto means one slot: slot 0, which is busy.
  if (!fs::exists("/proc/driver/nvidia/gpus")) {
    r = run_cli(with_lock(d, {"acquire", "--gpus", "auto", "--wait", "0", "--pid", me}), {{"PATH", "/usr/bin:/bin"}});
    CHECK(r.code == 1);
  }

  // release finds the slot by token among the N; a stranger's token is refused.
  r = run_cli(with_lock(d, {"release", "--gpus", "3", "--token", "0123456789abcdef0123456789abcdef"}));
  CHECK(r.code == 3);
  CHECK_THAT(r.err, Catch::Contains("none of the 3 slots of " + d.lock() + " is held by token"));
  CHECK(run_cli(with_lock(d, {"release", "--gpus", "3", "--force"})).code == 2);
  r = run_cli(with_lock(d, {"release", "--gpus", "3", "--token", token}));
  CHECK(r.code == 0);
  CHECK_FALSE(fs::exists(d.lock() + ".gpu2"));
  CHECK(s0->still_held());
  CHECK(s1->still_held());
}

TEST_CASE("GPUs are counted once per command with --gpus auto", "[cli][gpus]") {
  // The stand-in below would not be the only one answering on a machine
  // with a real driver.
  if (fs::exists("/proc/driver/nvidia/gpus")) return;
  temp_dir d;
  // A stand-in nvidia-smi that reports three GPUs and leaves one line in a
  // counter file each time it runs.
  fs::path bin = d.path / "bin";
  fs::create_directory(bin);
  const fs::path runs = d.path / "nvidia-smi-runs";
  write_file(bin / "nvidia-smi",
             "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\necho run >> '" + runs.string() + "'\n"
             "echo 'GPU 0: Stand-in (UUID: GPU-0)'\necho 'GPU 1: Stand-in (UUID: GPU-1)'\n"
             "echo 'GPU 2: Stand-in (UUID: GPU-2)'\n");
  fs::permissions(bin / "nvidia-smi", fs::owner_all);
  env_changes path_env = {{"PATH", bin.string() + ":" + std::string(::getenv("PATH"))}};
  auto runs_seen = [&] { return fs::exists(runs) ? lines_of(read_file(runs)).size() : std::size_t{0}; };

  // Busy: every slot is held, so the run counts slots for its options and
  // again for its message.
  std::vector<ol::lock> held;
  for (int k = 0; k < 3; ++k) {
    auto l = ol::lock::acquire(ol::gpu_slot_path(d.lock(), k), 0ms);
    REQUIRE(l);
    held.push_back(std::move(*l));
  }
  auto r = run_cli(with_lock(d, {"run", "--gpus", "auto", "--wait", "0", "--", "true"}), path_env);
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy: all 3 GPU slots of " + d.lock() + " are held"));
  CHECK(runs_seen() == 1);

  fs::remove(runs);
  r = run_cli(with_lock(d, {"status", "--gpus", "auto"}), path_env);
  CHECK(r.code == 0);
  CHECK(lines_of(r.out).size() == 4);  // three slots and the path
  CHECK(runs_seen() == 1);
}
