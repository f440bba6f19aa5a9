// The parsers of nvidia-smi's output and of CUDA_VISIBLE_DEVICES: what each
// well-formed line gives, and that malformed or hostile output is dropped
// or bounded rather than believed.
#include <unistd.h>

#include <catch2/catch.hpp>

#include "offload_lock/gpus.hpp"

using namespace offload_lock;

namespace {

const char* four_gpus =
    "GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-0aaaaaaa-1111-2222-3333-444444444444)\n"
    "GPU 1: NVIDIA GeForce RTX 4090 (UUID: GPU-1bbbbbbb-1111-2222-3333-444444444444)\n"
    "GPU 2: NVIDIA A100-SXM4-40GB (UUID: GPU-2ccccccc-1111-2222-3333-444444444444)\n"
    "  MIG 1g.5gb      Device  0: (UUID: MIG-2ccccccc-0000-0000-0000-000000000001)\n"
    "  MIG 1g.5gb      Device  1: (UUID: MIG-2ccccccc-0000-0000-0000-000000000002)\n"
    "GPU 3: NVIDIA GeForce RTX 4090 (UUID: GPU-3ddddddd-1111-2222-3333-444444444444)\n";

}  // namespace

TEST_CASE("nvidia-smi -L gives index, name, UUID and MIG devices", "[unit][cli][gpus]") {
  auto g = parse_gpu_list(four_gpus);
  REQUIRE(g.size() == 4);
  CHECK(g[0].index == 0);
  CHECK(g[0].name == "NVIDIA GeForce RTX 4090");
  CHECK(g[0].uuid == "GPU-0aaaaaaa-1111-2222-3333-444444444444");
  CHECK(g[2].name == "NVIDIA A100-SXM4-40GB");
  CHECK(g[2].mig_uuids.size() == 2);
  CHECK(g[3].index == 3);
  CHECK(g[3].mig_uuids.empty());
  // Out of order, duplicated, malformed, hostile: sorted, first one kept, dropped.
  g = parse_gpu_list(
      "No devices were found\nGPU 1: B (UUID: GPU-b)\nGPU 0: A (UUID: GPU-a)\nGPU 1: again (UUID: GPU-c)\n"
      "GPU x: bad\nGPU 99999: big (UUID: GPU-d)\nGPU 5: \x1b]0;evil\x07 (UUID: GPU-$(rm -rf /))\n");
  REQUIRE(g.size() == 3);
  CHECK(g[0].uuid == "GPU-a");
  CHECK(g[1].name == "B");
  CHECK(g[2].index == 5);
  CHECK(g[2].uuid.empty());  // not a UUID nvidia-smi would print
  CHECK(parse_gpu_list("").empty());
  std::string junk(300, 'x');
  junk += '\n';  // (appended, not operator+: GCC 12 warns falsely there)
  CHECK(parse_gpu_list(junk).empty());
  auto longname = parse_gpu_list("GPU 0: " + std::string(5000, 'n') + " (UUID: GPU-a)\n");
  REQUIRE(longname.size() == 1);
  CHECK(longname[0].name.size() <= 256);
}

TEST_CASE("the CSV queries give memory, utilization and compute processes", "[unit][cli][gpus]") {
  auto g = parse_gpu_list(four_gpus);
  merge_gpu_query(g,
                  "0, GPU-0aaaaaaa-1111-2222-3333-444444444444, NVIDIA GeForce RTX 4090, 5222, 24564, 37\n"
                  "1, GPU-1bbbbbbb-1111-2222-3333-444444444444, NVIDIA GeForce RTX 4090, 0, 24564, 0\n"
                  "2, GPU-2ccccccc-1111-2222-3333-444444444444, NVIDIA A100, [N/A], [N/A], [Not Supported]\n"
                  "garbage line\n"
                  "3, GPU-3ddddddd-1111-2222-3333-444444444444, NVIDIA GeForce RTX 4090, 12, 24564, 250\n");
  CHECK(g[0].memory_used_mib == 5222);
  CHECK(g[0].memory_total_mib == 24564);
  CHECK(g[0].utilization_pct == 37);
  CHECK(g[1].utilization_pct == 0);
  CHECK_FALSE(g[2].memory_used_mib);
  CHECK_FALSE(g[2].utilization_pct);
  CHECK_FALSE(g[3].utilization_pct);  // above 100%: not believed
  merge_apps_query(g,
                   "GPU-0aaaaaaa-1111-2222-3333-444444444444, 77, llama-swap, 5120\n"
                   "GPU-0aaaaaaa-1111-2222-3333-444444444444, 78, /opt/a,b/render, [N/A]\n"
                   "GPU-unknown, 79, nowhere, 1\n"
                   "GPU-1bbbbbbb-1111-2222-3333-444444444444, -5, negative, 1\n"
                   "GPU-1bbbbbbb-1111-2222-3333-444444444444, 99999999999, huge, 1\n");
  REQUIRE(g[0].processes.size() == 2);
  CHECK(g[0].processes[0].pid == 77);
  CHECK(g[0].processes[0].name == "llama-swap");
  CHECK(g[0].processes[0].memory_mib == 5120);
  CHECK(g[0].processes[1].name == "/opt/a,b/render");  // a comma inside the name
  CHECK_FALSE(g[0].processes[1].memory_mib);
  CHECK(g[1].processes.empty());
  // Without -L the query alone lists the GPUs.
  std::vector<gpu_device> q;
  merge_gpu_query(q, "1, GPU-b, Name, with comma, 1, 2, 3\n0, GPU-a, A, 4, 5, 6\n");
  REQUIRE(q.size() == 2);
  CHECK(q[0].index == 0);
  CHECK(q[1].name == "Name, with comma");
  CHECK(q[1].uuid == "GPU-b");
}

TEST_CASE("CUDA_VISIBLE_DEVICES is read as CUDA reads it", "[unit][cli][gpus]") {
  const std::optional<std::vector<gpu_device>> known = parse_gpu_list(four_gpus);
  auto v = parse_visible_devices("2,3", known);
  CHECK(v.indices == std::vector<int>{2, 3});
  CHECK(v.ignored.empty());
  v = parse_visible_devices("3, 1", known);  // CUDA's order is the list's; slots keep theirs
  CHECK(v.indices == std::vector<int>{3, 1});
  v = parse_visible_devices("GPU-1bbb,GPU-3ddddddd-1111-2222-3333-444444444444", known);  // unique prefixes
  CHECK(v.indices == std::vector<int>{1, 3});
  v = parse_visible_devices("gpu-2CCC", known);
  CHECK(v.indices == std::vector<int>{2});
  // An ambiguous prefix, an unknown UUID, an index past the last GPU, -1:
  // that entry and everything after it are ignored.
  v = parse_visible_devices("0,GPU-,3", known);
  CHECK(v.indices == std::vector<int>{0});
  CHECK(v.ignored == "GPU-");
  v = parse_visible_devices("1,GPU-9999,2", known);
  CHECK(v.indices == std::vector<int>{1});
  CHECK(v.ignored == "GPU-9999");
  v = parse_visible_devices("3,7,0", known);
  CHECK(v.indices == std::vector<int>{3});
  CHECK(v.ignored == "7");
  CHECK(parse_visible_devices("-1", known).indices.empty());
  CHECK(parse_visible_devices("", known).indices.empty());
  CHECK(parse_visible_devices("  ", known).ignored.empty());
  CHECK(parse_visible_devices("1,1,2", known).indices == std::vector<int>{1, 2});
  // A MIG device is its GPU's slot, and is what CMD is to be given.
  v = parse_visible_devices("MIG-2ccccccc-0000-0000-0000-000000000002", known);
  CHECK(v.indices == std::vector<int>{2});
  CHECK(v.mig == std::vector<std::string>{"MIG-2ccccccc-0000-0000-0000-000000000002"});
  // Without nvidia-smi indices are taken as given and UUIDs name nothing.
  v = parse_visible_devices("7,5,GPU-1bbb,2", std::nullopt);
  CHECK(v.indices == std::vector<int>{7, 5});
  CHECK(v.ignored == "GPU-1bbb");
}

TEST_CASE("sizes in MiB for people", "[unit][cli][gpus]") {
  CHECK(describe_mib(0) == "0 MiB");
  CHECK(describe_mib(812) == "812 MiB");
  CHECK(describe_mib(5222) == "5.1 GiB");
  CHECK(describe_mib(24564) == "24.0 GiB");
}

TEST_CASE("a GPU shows a holder idle only with none of its processes and little utilization", "[unit][cli][gpus][idle]") {
  const std::int64_t self = ::getpid();
  gpu_device d;
  d.index = 0;
  // Utilization not reported: nothing is known, so not idle.
  CHECK_FALSE(shows_idle(d, {self}, 5));
  d.utilization_pct = 5;
  CHECK(shows_idle(d, {self}, 5));
  d.utilization_pct = 6;
  CHECK_FALSE(shows_idle(d, {self}, 5));
  d.utilization_pct = 0;
  // Another process (init descends from nobody here) leaves it idle; the
  // holder itself, or a holder that is this process's parent, does not.
  d.processes.push_back(gpu_process{1, "daemon", 10, false});
  CHECK(shows_idle(d, {self}, 5));
  d.processes.push_back(gpu_process{self, "job", 10, false});
  CHECK_FALSE(shows_idle(d, {self}, 5));
  CHECK_FALSE(shows_idle(d, {0, ::getppid()}, 5));
  CHECK(shows_idle(d, {0}, 5));
  CHECK(in_process_tree(self, ::getppid()));
  CHECK_FALSE(in_process_tree(::getppid(), self));
}
