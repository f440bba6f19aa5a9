// Where the gpulease lease lives (doc/protocol-gpulease.md, "Where the lease
// lives"), and what a lock directory shared with gpulease holds of it ("GPU_LOCK
// shared by both"). Pure: no file system.
#include <catch2/catch.hpp>

#include "gpulease/location.hpp"
#include "gpulease/record.hpp"
#include "gpulease/shared.hpp"

using namespace offload_lock::detail::gpulease;

TEST_CASE("lease location: first match wins, as gpulease resolves it", "[unit][lease]") {
  struct row {
    const char* name;
    lease_inputs in;
    std::string dir, gpu_dir, root;
    lease_source source;
  };
  auto in = [](std::optional<std::string> x, std::optional<std::string> gpu_lock, std::optional<std::string> root,
               std::optional<std::string> state, std::string cwd = "/work") {
    lease_inputs i;
    i.explicit_dir = std::move(x);
    i.gpu_lock = std::move(gpu_lock);
    i.lease_root = std::move(root);
    i.state_dir = std::move(state);
    i.cwd = std::move(cwd);
    return i;
  };
  const std::vector<row> rows = {
      {"nothing set: the machine-wide default", in({}, {}, {}, {}), "/var/lib/local-offload/gpu/lease",
       "/var/lib/local-offload/gpu", "/var/lib/local-offload", lease_source::default_root},
      {"LOCAL_OFFLOAD_STATE_DIR", in({}, {}, {}, "/srv/lo"), "/srv/lo/gpu/lease", "/srv/lo/gpu", "/srv/lo",
       lease_source::state_dir},
      {"OFFLOAD_LOCK_LEASE_ROOT before it", in({}, {}, "/srv/a", "/srv/b"), "/srv/a/gpu/lease", "/srv/a/gpu", "/srv/a",
       lease_source::lease_root},
      {"GPU_LOCK before both: the lease directory itself", in({}, "/tmp/local-offload-gpu.lock", "/srv/a", "/srv/b"),
       "/tmp/local-offload-gpu.lock", "/tmp", "", lease_source::gpu_lock},
      {"an explicit directory before all", in("/x/lease", "/tmp/g", {}, {}), "/x/lease", "/x", "",
       lease_source::explicit_dir},
      {"values are trimmed; empty ones skipped", in({}, "  \t", " /srv/c/ ", {}), "/srv/c/gpu/lease", "/srv/c/gpu",
       "/srv/c", lease_source::lease_root},
      {"relative paths join the working directory, cleaned", in({}, "locks/../gpu.lock//", {}, {}), "/work/gpu.lock",
       "/work", "", lease_source::gpu_lock},
      {"GPU_LOCK at the top: its counter at /", in({}, "/gpu.lock", {}, {}), "/gpu.lock", "/", "",
       lease_source::gpu_lock},
  };
  for (const auto& r : rows) {
    INFO(r.name);
    const auto loc = resolve_lease(r.in);
    CHECK(loc.dir == r.dir);
    CHECK(loc.gpu_dir == r.gpu_dir);
    CHECK(loc.root == r.root);
    CHECK(loc.source == r.source);
    CHECK(loc.refused.empty());
  }
}

TEST_CASE("lease location: gpulease refuses cloud-synced paths", "[unit][lease]") {
  CHECK_THAT(sync_root_reason("/home/u/OneDrive - Contoso/state"), Catch::Contains("onedrive - contoso"));
  CHECK_THAT(sync_root_reason("C:\\Users\\x\\Dropbox (Personal)\\lo"), Catch::Contains("dropbox (personal)"));
  CHECK_FALSE(sync_root_reason("/mnt/iCloudDrive/x").empty());
  CHECK_FALSE(sync_root_reason("/home/u/Google Drive/x").empty());
  CHECK_FALSE(sync_root_reason("/srv/ mega /x").empty());
  CHECK(sync_root_reason("/srv/dropbox-exporter/x").empty());
  CHECK(sync_root_reason("/srv/megabytes").empty());
  lease_inputs i;
  i.state_dir = "/home/u/Nextcloud/lo";
  CHECK_THAT(resolve_lease(i).refused, Catch::Contains("nextcloud"));
}

TEST_CASE("lease names: what gpulease makes besides the claim", "[unit][lease]") {
  CHECK(heartbeat_name(17) == "hb.17");
  CHECK(unloaded_name(17) == "unloaded.17");
  for (const char* n : {"hb.3", "hb.3.99-abc.tmp", "unloaded.3", ".writeprobe-12345"}) CHECK(is_gpulease_name(n));
  for (const char* n : {"meta.json", ".meta.json.x", "hb", "unloaded", "epoch", "epoch.lock", "in-cs"})
    CHECK_FALSE(is_gpulease_name(n));
}

TEST_CASE("a lock directory shared with gpulease", "[unit][lease]") {
  record r;
  r.epoch = 5;
  r.lease_class = "media";
  r.pid = 77;
  const std::string claim = serialize_record(r);
  const std::string v1 = R"({"pid":77,"startedAt":1764470000000,"token":"t"})";
  const std::string both = append_record(v1, r);
  struct row {
    const char* name;
    std::vector<std::string> names;
    std::optional<std::string> meta;
    bool claim, v1_record, lease_files;
  };
  const std::vector<row> rows = {
      {"a v1 lock", {"meta.json"}, v1, false, false, false},
      {"an offload-lock lock mid-fallback", {"meta.json", ".meta.json.123-abc"}, v1, false, false, false},
      {"a gpulease claim", {"meta.json", "hb.5"}, claim, true, false, true},
      {"one record for both", {"meta.json"}, both, true, true, false},
      {"gpulease's empty container after a release", {}, std::nullopt, false, false, false},
      {"a container with another lease's heartbeat", {"hb.4", "unloaded.4"}, std::nullopt, false, false, true},
      {"a claim with epoch 0 is not a claim",
       {"meta.json"},
       std::string(R"({"epoch":0,"holder":{"pid":77}})"),
       false,
       false,
       false},
      {"an unparseable meta.json beside a heartbeat", {"meta.json", "hb.9"}, std::string("{"), false, false, true},
  };
  for (const auto& w : rows) {
    INFO(w.name);
    const auto m = lease_marks_of(w.names, w.meta);
    CHECK(m.claim == w.claim);
    CHECK(m.v1_record == w.v1_record);
    CHECK(m.lease_files == w.lease_files);
    CHECK(never_reclaim_whole(m) == (w.claim || w.lease_files));
    CHECK(incomplete_claim_grace_ms(m, 2'000) == (w.lease_files ? 10'000 : 2'000));
  }
  CHECK(lease_marks_of({"unloaded.2", "hb.10"}, std::nullopt).first_lease_file == "hb.10");
  for (const char* n : {"meta.json", ".meta.json.claim-1-a", "hb.3", "unloaded.3", ".writeprobe-1"})
    CHECK(allowed_in_shared_lock_dir(n));
  for (const char* n : {"in-cs", "epoch", "notes.txt"}) CHECK_FALSE(allowed_in_shared_lock_dir(n));
}
