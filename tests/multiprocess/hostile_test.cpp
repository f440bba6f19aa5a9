// A shared, hostile /tmp: locks made by another user, and names planted
// beside the lock that look like ours. Another user is uid 65534 (nobody),
// reached with setpriv; these tests need root to switch users.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

std::unique_ptr<child> as_user(int uid, const std::vector<std::string>& args) {
  std::vector<std::string> full = {"--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid), "--clear-groups",
                                   cli_exe()};
  full.insert(full.end(), args.begin(), args.end());
  return std::make_unique<child>("/usr/bin/setpriv", full);
}

}  // namespace

TEST_CASE("a lock made by another user is reported with that user's uid", "[multiprocess][hostile]") {
  if (!running_as_root()) OLT_NOT_RUN("needs root to act as another user");
  for (int uid : {65534, 65533})
    if (auto why = temp_closed_to(uid)) OLT_NOT_RUN(*why);
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);  // a shared, sticky /tmp
  auto holder = as_user(65534, {"--lock", d.lock(), "hold", "--label", "nobody's job"});
  auto line = holder->read_line();
  REQUIRE(line);
  REQUIRE(line->rfind("acquired ", 0) == 0);

  // While it lives: held, and whose it is.
  auto st = run_cli({"--lock", d.lock(), "status"});
  CHECK(st.code == 0);
  CHECK_THAT(st.out, Catch::Contains("nobody's job") && Catch::Contains("owned by uid 65534"));
  auto js = run_cli({"--lock", d.lock(), "--json", "status"});
  CHECK(json::parse(js.out)["ownerUid"] == 65534);
  CHECK(ol::inspect(d.lock()).owner_uid == 65534u);
  CHECK(run_cli({"--lock", d.lock(), "acquire", "--wait", "0"}).code == 1);

  // Once it is dead, a third user cannot remove it from the sticky directory:
  // a clear error naming the owner, at once, not a spin until --wait ends.
  holder->kill(SIGKILL);
  REQUIRE(holder->wait());
  CHECK_THAT(run_cli({"--lock", d.lock(), "status"}).out, Catch::Contains("owned by uid 65534"));
  auto start = std::chrono::steady_clock::now();
  auto other = as_user(65533, {"--lock", d.lock(), "acquire", "--wait", "60s"});
  other->close_stdin();
  CHECK(other->wait(40s) == 4);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
  std::string err = other->err_text();
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK_THAT(err, Catch::Contains("cannot remove stale lock " + d.lock()) && Catch::Contains("owned by uid 65534") &&
                      Catch::Contains("not permitted"));
  CHECK(fs::exists(fs::path(d.lock()) / "meta.json"));
}

TEST_CASE("names planted beside the lock that look like ours are never followed or emptied", "[multiprocess][hostile]") {
  temp_dir d;
  const int dead = dead_pid();
  // A moved-aside name holding someone's files, a staging name that is a
  // symlink to a directory with a meta.json in it, and one to a file.
  fs::path aside = d.path / (".gpu.lock.aside-" + std::to_string(dead) + "-aaaaaaaaaaaa");
  fs::create_directory(aside);
  write_file(aside / "meta.json", "{}");
  write_file(aside / "victim", "keep me");
  fs::path target = d.path / "target";
  fs::create_directory(target);
  write_file(target / "meta.json", "keep me");
  fs::create_symlink(target, d.path / (".gpu.lock.stage-" + std::to_string(dead) + "-bbbbbbbbbbbb"));
  write_file(d.path / "file", "keep me");
  fs::create_symlink(d.path / "file", d.path / (".gpu.lock.stage-" + std::to_string(dead) + "-cccccccccccc"));
  const auto count = [&] {
    int n = 0;
    for (fs::directory_iterator it(d.path), end; it != end; ++it) ++n;
    return n;
  };
  const int before = count();

  for (int i = 0; i < 2; ++i) {
    auto l = ol::lock::acquire(d.lock(), 0ms);
    REQUIRE(l);
    REQUIRE_FALSE(l->release());
  }
  CHECK(count() == before);
  CHECK(read_file(aside / "victim") == "keep me");
  CHECK(read_file(target / "meta.json") == "keep me");
  CHECK(read_file(d.path / "file") == "keep me");
}
