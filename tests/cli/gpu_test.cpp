// Slots are physical GPUs: what CUDA_VISIBLE_DEVICES allows, what CMD is
// told, and a machine without GPUs or with a nvidia-smi that hangs. A
// stand-in nvidia-smi on PATH plays a machine with four GPUs; real
// offload-lock processes throughout.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

std::string uuid_of(int k) { return "GPU-" + std::to_string(k) + "a0c7e1d-5f3b-4e8a-9d10-3c55e0f1b2a" + std::to_string(k); }

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A stand-in nvidia-smi in d/bin answering exactly the three documented
// forms from files the test may rewrite (list.txt, gpus.csv, apps.csv), and
// logging each call's arguments to d/nvidia-smi.log. Any other form exits 9.
struct fake_nvidia_smi {
  const temp_dir& d;
  fs::path bin;
  explicit fake_nvidia_smi(const temp_dir& dir, const std::string& body = "") : d(dir), bin(dir.path / "bin") {
    fs::create_directories(bin);
    const std::string q = "'" + d.str() + "/";
    write_file(bin / "nvidia-smi",
               body.empty()
                   ? "#!/bin/sh\necho \"$*\" >> " + q + "nvidia-smi.log'\ncase \"$*\" in\n"
                     "  -L) exec cat " + q + "list.txt' ;;\n"
                     "  '--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu "
                     "--format=csv,noheader,nounits') exec cat " + q + "gpus.csv' ;;\n"
                     "  '--query-compute-apps=gpu_uuid,pid,process_name,used_memory "
                     "--format=csv,noheader,nounits') exec cat " + q + "apps.csv' ;;\n"
                     "  *) exit 9 ;;\nesac\n"
                   : body);
    fs::permissions(bin / "nvidia-smi", fs::owner_all);
    std::string list, gpus;
    for (int k = 0; k < 4; ++k) {
      list += "GPU " + std::to_string(k) + ": NVIDIA Stand-in (UUID: " + uuid_of(k) + ")\n";
      gpus += std::to_string(k) + ", " + uuid_of(k) + ", NVIDIA Stand-in, " + std::to_string(100 * k) + ", 24564, " +
              std::to_string(10 * k) + "\n";
    }
    write_file(d.path / "list.txt", list);
    write_file(d.path / "gpus.csv", gpus);
    write_file(d.path / "apps.csv", "");
  }
  // The environment of a command on this machine: the stand-in first on
  // PATH, no CUDA variables unless given.
  env_changes env(const std::optional<std::string>& visible = std::nullopt) const {
    return {{"PATH", bin.string() + ":/usr/bin:/bin"},
            {"CUDA_VISIBLE_DEVICES", visible},
            {"CUDA_DEVICE_ORDER", std::nullopt}};
  }
  std::string log() const { return fs::exists(d.path / "nvidia-smi.log") ? read_file(d.path / "nvidia-smi.log") : ""; }
};

// What CMD of `run` sees: its CUDA variables, its slot and its lock path.
const std::vector<std::string> show_env = {
    "--", "sh", "-c", "echo \"$CUDA_VISIBLE_DEVICES ${CUDA_DEVICE_ORDER-unset} $OFFLOAD_LOCK_GPU $OFFLOAD_LOCK_PATH\""};

std::vector<std::string> run_showing(const temp_dir& d, std::vector<std::string> a) {
  a.insert(a.begin(), "run");
  a.insert(a.end(), show_env.begin(), show_env.end());
  return with_lock(d, a);
}

// A `hold` started with `env`; returns its slot once it holds one.
int held_slot(child& h) {
  auto line = h.read_line();
  REQUIRE(line);
  REQUIRE_THAT(*line, Catch::StartsWith("acquired "));
  return json::parse(line->substr(9))["gpu"].get<int>();
}

}  // namespace

TEST_CASE("slots are physical GPUs: CUDA_VISIBLE_DEVICES picks which, CMD gets the GPU's UUID", "[cli][gpus]") {
  temp_dir d;
  fake_nvidia_smi smi(d);
  // The reported defect: with CUDA_VISIBLE_DEVICES=2,3 two jobs were handed
  // one GPU. Now each takes the slot of a GPU it may use, by identity.
  child first(cli_exe(), with_lock(d, {"hold", "--gpus", "4", "--label", "first"}), smi.env("2,3"));
  CHECK(held_slot(first) == 2);
  auto r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env("2,3"));
  CHECK(r.code == 0);
  CHECK(r.out == uuid_of(3) + " unset 3 " + d.lock() + ".gpu3\n");
  CHECK(r.err.empty());
  // Both allowed slots held: busy, although slots 0 and 1 are free.
  child second(cli_exe(), with_lock(d, {"hold", "--gpus", "4", "--label", "second"}), smi.env("3,2"));
  CHECK(held_slot(second) == 3);
  r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env("2,3"));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy: the 2 GPU slots of " + d.lock() + " that CUDA_VISIBLE_DEVICES allows are held"));
  CHECK_FALSE(fs::exists(d.lock()));
  CHECK_FALSE(fs::exists(d.lock() + ".gpu1"));
  // Another user's list names other cards: other slots, at the same time.
  r = run_cli(run_showing(d, {"--gpus", "auto", "--wait", "0"}), smi.env("1"));
  CHECK(r.out == uuid_of(1) + " unset 1 " + d.lock() + ".gpu1\n");
  // By UUID, or a unique prefix of one, as CUDA accepts them.
  r = run_cli(run_showing(d, {"--gpus", "auto", "--wait", "0"}), smi.env(uuid_of(0).substr(0, 9)));
  CHECK(r.out == uuid_of(0) + " unset 0 " + d.lock() + "\n");
  // The list allows slot 2 of --gpus 3 only; 2 is held.
  r = run_cli(run_showing(d, {"--gpus", "3", "--wait", "0"}), smi.env("2,3"));
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("busy: " + d.lock() + ".gpu2 is held by first"));
  // Without the variable every slot is open: the first free one.
  r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env());
  CHECK(r.out == uuid_of(0) + " unset 0 " + d.lock() + "\n");
  first.close_stdin();
  second.close_stdin();
  CHECK(first.wait() == 0);
  CHECK(second.wait() == 0);
  // Exactly the documented forms were asked for (the stand-in refuses others).
  CHECK(smi.log().find("-L\n") != std::string::npos);
  CHECK(count_of(smi.log(), "\n") == count_of(smi.log(), "-L\n"));
}

TEST_CASE("cli: --gpu K outside CUDA_VISIBLE_DEVICES, or a list that allows no slot, is a usage error", "[cli][gpus]") {
  temp_dir d;
  fake_nvidia_smi smi(d);
  auto usage = [&](const std::vector<std::string>& a, const std::string& visible, const std::string& says) {
    auto r = run_cli(run_showing(d, a), smi.env(visible));
    INFO(visible << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(count_of(r.err, "\n") == 1);
    CHECK_THAT(r.err, Catch::Contains(says));
  };
  usage({"--gpu", "1"}, "7", "--gpu 1 is outside CUDA_VISIBLE_DEVICES=7, which allows no GPU ('7' names no GPU");
  usage({"--gpu", "1"}, "2,3", "--gpu 1 is outside CUDA_VISIBLE_DEVICES=2,3, which allows GPUs 2, 3");
  usage({"--gpus", "2"}, "2,3", "CUDA_VISIBLE_DEVICES=2,3 allows GPUs 2, 3, none of the 2 GPU slots (0 to 1)");
  usage({"--gpus", "4"}, "", "CUDA_VISIBLE_DEVICES= allows no GPU");
  usage({"--gpus", "4"}, "-1", "allows no GPU");
  usage({"--gpu", "0"}, "GPU-ffff", "'GPU-ffff' names no GPU of this machine");
  CHECK_FALSE(fs::exists(d.lock()));
  // Inside the list: fine; an entry past a bad one is ignored, with a warning.
  auto r = run_cli(run_showing(d, {"--gpu", "1", "--wait", "0"}), smi.env("1"));
  CHECK(r.code == 0);
  CHECK(r.out == uuid_of(1) + " unset 1 " + d.lock() + ".gpu1\n");
  r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env("3,bogus,0"));
  CHECK(r.code == 0);
  CHECK(r.out == uuid_of(3) + " unset 3 " + d.lock() + ".gpu3\n");
  CHECK_THAT(r.err, Catch::Contains("'bogus' names no GPU of this machine; CUDA ignores it and the entries after it"));
  // Commands that take no slot are not restricted.
  CHECK(run_cli(with_lock(d, {"status", "--gpus", "4"}), smi.env("7")).code == 1);
  CHECK(run_cli(with_lock(d, {"release", "--gpu", "1"}), smi.env("7")).code == 0);
}

TEST_CASE("without nvidia-smi: --gpus auto says so once, CMD gets the index in PCI bus order", "[cli][gpus]") {
  if (fs::exists("/proc/driver/nvidia/gpus")) return;  // a real driver counts the GPUs
  temp_dir d;
  fake_nvidia_smi smi(d, "#!/bin/sh\nexit 1\n");
  auto r = run_cli(run_showing(d, {"--gpus", "auto", "--wait", "0"}), smi.env());
  CHECK(r.code == 0);
  CHECK(r.out == "0 PCI_BUS_ID 0 " + d.lock() + "\n");
  CHECK(count_of(r.err, "no GPU found") == 1);
  CHECK(count_of(r.err, "\n") == 1);
  // A caller's own device order does not change what the index means.
  auto s0 = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(s0);
  env_changes env = smi.env();
  env["CUDA_DEVICE_ORDER"] = "FASTEST_FIRST";
  r = run_cli(run_showing(d, {"--gpus", "2", "--wait", "0"}), env);
  CHECK(r.out == "1 PCI_BUS_ID 1 " + d.lock() + ".gpu1\n");
  CHECK(r.err.empty());
  // Indices are taken as given; a UUID cannot be told apart from none.
  r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env("3"));
  CHECK(r.out == "3 PCI_BUS_ID 3 " + d.lock() + ".gpu3\n");
  r = run_cli(run_showing(d, {"--gpus", "4", "--wait", "0"}), smi.env(uuid_of(2)));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("(nvidia-smi cannot be run to list them)"));
  // --quiet silences the note.
  r = run_cli(with_lock(d, {"--quiet", "acquire", "--gpus", "auto", "--wait", "0", "--pid", std::to_string(::getpid())}),
              smi.env());
  CHECK(r.code == 1);
  CHECK(r.err.empty());
}

TEST_CASE("a nvidia-smi that hangs is given up after its time limit", "[cli][gpus]") {
  if (fs::exists("/proc/driver/nvidia/gpus")) return;
  temp_dir d;
  fake_nvidia_smi smi(d, "#!/bin/sh\nexec sleep 60\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cli(run_showing(d, {"--gpus", "auto", "--wait", "0"}), smi.env());
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.code == 0);
  CHECK(r.out == "0 PCI_BUS_ID 0 " + d.lock() + "\n");
  CHECK_THAT(r.err, Catch::Contains("no GPU found"));
  // Given up after its 5 s, not after the stand-in's 60 s: generous, since a
  // loaded machine starts the command and the shell slowly.
  CHECK(took < 40s);
}

TEST_CASE("a nvidia-smi that closes its output and stays is killed at its time limit", "[cli][gpus]") {
  // The limit is on the process, not on its output: nvidia-smi that closes
  // stdout at once and keeps running (a wedged driver) must not hold up
  // status for as long as it lives (60 s here; each ask is 5 s at most).
  temp_dir d;
  fake_nvidia_smi smi(d, "#!/bin/sh\nexec >&-\nexec sleep 60\n");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_cli(with_lock(d, {"status"}), smi.env(), 90s);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(r.code == 1);
  CHECK(r.out.rfind("free\n", 0) == 0);
  // A bound far above the limit of the asks status makes and far below the
  // stand-in's 60 s, so a loaded machine does not miss it.
  CHECK(took < 40s);
}

TEST_CASE("status shows each slot's GPU and names processes using it without the lock", "[cli][gpus][status]") {
  temp_dir d;
  fake_nvidia_smi smi(d);
  // Slot 0: held by a hold, which uses the GPU, while another process uses
  // it too. Slot 1: held by this process, whose child uses the GPU.
  child h(cli_exe(), with_lock(d, {"hold", "--gpu", "0", "--label", "render"}), smi.env());
  REQUIRE(h.read_line());
  auto s1 = ol::lock::acquire(ol::gpu_slot_path(d.lock(), 1), 0ms);
  REQUIRE(s1);
  child rogue("/bin/sleep", {"60"});
  child ours("/bin/sleep", {"60"});
  write_file(d.path / "apps.csv",
             uuid_of(0) + ", " + std::to_string(h.pid()) + ", /opt/bin/render, 4096\n" +
             uuid_of(0) + ", " + std::to_string(rogue.pid()) + ", /usr/local/bin/llama-swap, 5222\n" +
             uuid_of(1) + ", " + std::to_string(ours.pid()) + ", trainer, [N/A]\n" +
             uuid_of(3) + ", 424242, \x1b]0;pwned\x07, 1\n");
  auto r = run_cli(with_lock(d, {"status", "--gpus", "4"}), smi.env());
  INFO(r.out << r.err);
  CHECK(r.code == 1);  // slots 2 and 3 are free
  CHECK_THAT(r.out, Catch::Contains("gpu0: held by render (pid " + std::to_string(h.pid())));
  CHECK_THAT(r.out, Catch::Contains("\n  GPU 0 (NVIDIA Stand-in): 0 MiB of 24.0 GiB used, 0% busy\n"));
  CHECK_THAT(r.out, Catch::Contains("\n    render (pid " + std::to_string(h.pid()) + ") uses 4.0 GiB on GPU 0, holding the lock\n"));
  CHECK_THAT(r.out, Catch::Contains("\n    llama-swap (pid " + std::to_string(rogue.pid()) + ") uses 5.1 GiB on GPU 0 without the lock\n"));
  CHECK_THAT(r.out, Catch::Contains("\n    trainer (pid " + std::to_string(ours.pid()) + ") uses GPU 1, holding the lock\n"));
  CHECK_THAT(r.out, Catch::Contains("  GPU 2 (NVIDIA Stand-in): 200 MiB of 24.0 GiB used, 20% busy\n"));
  // What nvidia-smi says reaches the terminal escaped.
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK_THAT(r.out, Catch::Contains("\\x1b]0;pwned\\x07 (pid 424242) uses 1 MiB on GPU 3 without the lock"));
  CHECK(r.err.empty());

  // --json: a device per slot, and at the top level for slot 0.
  json j = json::parse(run_cli(with_lock(d, {"--json", "status", "--gpus", "4"}), smi.env()).out);
  REQUIRE(j["slots"].size() == 4);
  CHECK(j["device"] == j["slots"][0]["device"]);
  const json& dev = j["slots"][0]["device"];
  CHECK(dev["index"] == 0);
  CHECK(dev["uuid"] == uuid_of(0));
  CHECK(dev["name"] == "NVIDIA Stand-in");
  CHECK(dev["memoryUsedMiB"] == 0);
  CHECK(dev["memoryTotalMiB"] == 24564);
  CHECK(dev["utilizationPct"] == 0);
  REQUIRE(dev["processes"].size() == 2);
  CHECK(dev["processes"][0] == json{{"pid", h.pid()}, {"name", "/opt/bin/render"}, {"memoryMiB", 4096}, {"holdsLock", true}});
  CHECK(dev["processes"][1]["holdsLock"] == false);
  CHECK(j["slots"][1]["device"]["processes"][0]["memoryMiB"].is_null());
  CHECK(j["slots"][1]["device"]["processes"][0]["holdsLock"] == true);
  CHECK(j["slots"][3]["device"]["processes"][0]["name"] == "\x1b]0;pwned\x07");

  // --prometheus: the four gauges, by gpu.
  r = run_cli(with_lock(d, {"status", "--prometheus", "--gpus", "4"}), smi.env());
  const std::string l0 = "{lock=\"" + d.lock() + "\",gpu=\"0\"}";
  const std::string l2 = "{lock=\"" + d.lock() + "\",gpu=\"2\"}";
  CHECK_THAT(r.out, Catch::Contains("# TYPE offload_lock_gpu_memory_used_bytes gauge\n"));
  CHECK_THAT(r.out, Catch::Contains("offload_lock_gpu_memory_used_bytes" + l2 + " 209715200\n"));
  CHECK_THAT(r.out, Catch::Contains("offload_lock_gpu_memory_total_bytes" + l0 + " 25757220864\n"));
  CHECK_THAT(r.out, Catch::Contains("offload_lock_gpu_utilization_ratio" + l2 + " 0.20\n"));
  CHECK_THAT(r.out, Catch::Contains("offload_lock_gpu_unlocked_processes" + l0 + " 1\n"));
  CHECK_THAT(r.out, Catch::Contains("offload_lock_gpu_unlocked_processes" + l2 + " 0\n"));

  // nvidia-smi failing: no device lines, devices null, the lock board as before.
  fake_nvidia_smi broken(d, "#!/bin/sh\nexit 1\n");
  r = run_cli(with_lock(d, {"status", "--gpus", "4"}), broken.env());
  CHECK(r.out.find("GPU 0") == std::string::npos);
  CHECK(count_of(r.out, "\n") == 5);
  j = json::parse(run_cli(with_lock(d, {"--json", "status"}), broken.env()).out);
  CHECK(j["device"].is_null());
  h.close_stdin();
  CHECK(h.wait() == 0);
  rogue.kill(SIGKILL);
  ours.kill(SIGKILL);
}

TEST_CASE("status --watch asks nvidia-smi and keeps watching", "[cli][gpus][status]") {
  temp_dir d;
  fake_nvidia_smi smi(d);
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  child w(cli_exe(), with_lock(d, {"status", "--watch"}), smi.env());
  CHECK_THAT(w.read_line().value_or(""), Catch::StartsWith("held by "));
  CHECK_THAT(w.read_line().value_or(""), Catch::StartsWith("  GPU 0 (NVIDIA Stand-in)"));
  // nvidia-smi's exit does not end the watch; the next change is shown.
  CHECK_FALSE(w.read_line(1500ms));
  CHECK_FALSE(w.exited());
  REQUIRE_FALSE(l->release());
  CHECK(w.read_line() == "");
  CHECK(w.read_line() == "free");
  w.kill(SIGTERM);
  CHECK(w.wait() == 0);
}

TEST_CASE("doctor checks the setup: exit 0 when all is well, 1 with warnings, --json", "[cli][doctor]") {
  temp_dir d;
  fake_nvidia_smi smi(d);
  env_changes env = smi.env();
  env["GPU_LOCK"] = std::nullopt;
  auto r = run_cli(with_lock(d, {"doctor"}), env);
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("ok    path: " + d.lock() + " (rule: "));
  CHECK_THAT(r.out, Catch::Contains("ok    go: Go readers resolve the same path\n"));
  CHECK_THAT(r.out, Catch::Contains("ok    lock: " + d.lock() + ": nothing there now (free)\n"));
  CHECK_THAT(r.out, Catch::Contains("ok    parent: " + d.str() + ": owner "));
  CHECK_THAT(r.out, Catch::Contains("ok    reclaim: "));
  for (const char* f : {"inotify", "pidfd", "rename_noreplace", "ofd_locks"})
    CHECK_THAT(r.out, Catch::Contains(std::string("ok    ") + f + ": works here\n"));
  CHECK_THAT(r.out, Catch::Contains("ok    nvidia-smi: 4 GPUs (--gpus auto: 4 slots)\n"));
  CHECK_THAT(r.out, Catch::EndsWith("all well\n"));
  // Nothing is left behind by the probes.
  for (const auto& e : fs::directory_iterator(d.path))
    CHECK(e.path().filename().string().find("doctor") == std::string::npos);

  // GPU_LOCK naming a directory that is not a lock; Go's rule elsewhere; no nvidia-smi.
  const fs::path notes = d.path / "project";
  fs::create_directory(notes);
  write_file(notes / "notes.txt", "x");
  fake_nvidia_smi none(d, "#!/bin/sh\nexit 1\n");
  env = none.env();
  env["GPU_LOCK"] = notes.string();
  r = run_cli({"doctor"}, env);
  CHECK(r.code == 1);
  // doctor says what every command would: the library's own refusal.
  CHECK_THAT(r.out, Catch::Contains("warn  lock: refusing to use " + notes.string() +
                                    " as the lock: it is a directory holding 'notes.txt', which is not part of a lock"));
  CHECK_THAT(r.out, Catch::Contains("warn  nvidia-smi: nvidia-smi -L cannot be run"));
  CHECK_THAT(r.out, Catch::EndsWith("2 warnings\n"));
  env = none.env();
  env["GPU_LOCK"] = std::nullopt;
  env["TMPDIR"] = std::nullopt;
  env["TMP"] = d.str();
  json j = json::parse(run_cli({"--json", "doctor"}, env).out);
  CHECK(j["path"] == d.str() + "/local-offload-gpu.lock");
  CHECK(j["warnings"] == 2);  // Go's path, and still no nvidia-smi
  bool go_warned = false;
  for (const auto& c : j["checks"]) {
    CHECK(c.contains("name"));
    CHECK(c.contains("detail"));
    if (c["name"] == "go") go_warned = c["ok"] == false;
  }
  CHECK(go_warned);
}
