// `offload-lock doctor` warns wherever every other command refuses: its
// verdict on the lock path is the library's, so what `run` refuses with
// exit 4, doctor never calls ok. Real directories, real commands.
#include <catch2/catch.hpp>

#include "support.hpp"

using namespace olt;

namespace {

// doctor with GPU_LOCK set to `lock` and nothing else that could warn
// differently from one machine to another left to chance in what is checked.
cli_result doctor_with(const std::string& lock) {
  return run_cli({"doctor"}, {{"GPU_LOCK", lock}, {"TMPDIR", std::nullopt}});
}

}  // namespace

TEST_CASE("doctor warns about a setgid directory that every command refuses as the lock", "[cli][doctor]") {
  temp_dir d;
  // install -d -m 2770 of the operations guide, with GPU_LOCK naming the
  // directory itself instead of a lock inside it.
  const fs::path shared = d.path / "gpu-lock";
  fs::create_directory(shared);
  fs::permissions(shared, static_cast<fs::perms>(02770));
  const cli_result run = run_cli({"run", "--wait", "0", "--", "true"}, {{"GPU_LOCK", shared.string()}});
  INFO(run.err);
  REQUIRE(run.code == 4);

  const cli_result r = doctor_with(shared.string());
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("warn  lock: refusing to use " + shared.string() + " as the lock: it is a setgid"));
  CHECK_THAT(r.out, Catch::Contains(shared.string() + "/gpu.lock"));
  CHECK_THAT(r.out, !Catch::Contains("ok    lock:"));
  CHECK(fs::is_directory(shared));  // looked at, never touched
}

TEST_CASE("doctor warns about a lock path whose parent does not exist", "[cli][doctor]") {
  temp_dir d;
  const std::string lock = (d.path / "no-such-dir" / "gpu.lock").string();
  const cli_result r = doctor_with(lock);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("warn  lock: the parent directory " + (d.path / "no-such-dir").string() +
                                    " of lock " + lock + " does not exist"));
  CHECK_THAT(r.out, !Catch::Contains("ok    lock:"));
  CHECK_THAT(r.out, !Catch::Contains("(free)"));
}

TEST_CASE("doctor warns about a relative lock path", "[cli][doctor]") {
  temp_dir d;
  // A relative path to a place that exists from here, so that nothing but
  // its being relative is wrong with it.
  const std::string lock = fs::relative(d.path / "gpu.lock", fs::current_path()).string();
  REQUIRE(lock.front() != '/');
  cli_result r = doctor_with(lock);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("warn  path: " + lock + " is a relative path (from GPU_LOCK): each program "
                                    "resolves it against its own working directory"));
  // --lock is named as the source when it gave the path.
  r = run_cli({"--lock", lock, "doctor"}, {{"GPU_LOCK", std::nullopt}});
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("warn  path: " + lock + " is a relative path (from --lock)"));
  // The same place, absolute: no such warning.
  r = doctor_with((d.path / "gpu.lock").string());
  CHECK_THAT(r.out, Catch::Contains("ok    path: " + (d.path / "gpu.lock").string() + " (rule: GPU_LOCK"));
  CHECK_THAT(r.out, Catch::Contains("ok    lock: GPU_LOCK names " + (d.path / "gpu.lock").string() +
                                    ": nothing there now (free)"));
}
