// doc/protocol.md A1: the lock path, as Node resolves it, and when Go disagrees.
#include <catch2/catch.hpp>
#include <map>

#include "offload_lock/path.hpp"

namespace ol = offload_lock;

namespace {
ol::env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("path rules of A1, with the Go reader's view", "[unit][path]") {
  struct row {
    const char* name;
    std::string override_path;
    std::map<std::string, std::string> env;
    std::string path;
    ol::path_rule rule;
    std::string go_path;
  };
  const std::string dflt = "/tmp/local-offload-gpu.lock";
  std::vector<row> rows = {
      {"nothing set", "", {}, dflt, ol::path_rule::default_tmp, dflt},
      {"TMPDIR", "", {{"TMPDIR", "/var/t"}}, "/var/t/local-offload-gpu.lock", ol::path_rule::tmpdir_env,
       "/var/t/local-offload-gpu.lock"},
      {"TMPDIR trailing slash", "", {{"TMPDIR", "/var/t/"}}, "/var/t/local-offload-gpu.lock",
       ol::path_rule::tmpdir_env, "/var/t/local-offload-gpu.lock"},
      {"TMPDIR two trailing slashes (path.join cleans)", "", {{"TMPDIR", "/var/t//"}},
       "/var/t/local-offload-gpu.lock", ol::path_rule::tmpdir_env, "/var/t/local-offload-gpu.lock"},
      {"TMPDIR is /", "", {{"TMPDIR", "/"}}, "/local-offload-gpu.lock", ol::path_rule::tmpdir_env,
       "/local-offload-gpu.lock"},
      {"TMPDIR with dot segments", "", {{"TMPDIR", "/var/./x/../t"}}, "/var/t/local-offload-gpu.lock",
       ol::path_rule::tmpdir_env, "/var/t/local-offload-gpu.lock"},
      {"TMPDIR relative", "", {{"TMPDIR", "rel/dir"}}, "rel/dir/local-offload-gpu.lock", ol::path_rule::tmpdir_env,
       "rel/dir/local-offload-gpu.lock"},
      {"TMP only: Go disagrees (D7)", "", {{"TMP", "/var/tmp2"}}, "/var/tmp2/local-offload-gpu.lock",
       ol::path_rule::tmp_env, dflt},
      {"TEMP only: Go disagrees", "", {{"TEMP", "/var/tmp3"}}, "/var/tmp3/local-offload-gpu.lock",
       ol::path_rule::temp_env, dflt},
      {"TMP before TEMP", "", {{"TMP", "/a"}, {"TEMP", "/b"}}, "/a/local-offload-gpu.lock", ol::path_rule::tmp_env,
       dflt},
      {"TMPDIR before TMP and TEMP", "", {{"TMPDIR", "/d"}, {"TMP", "/a"}, {"TEMP", "/b"}},
       "/d/local-offload-gpu.lock", ol::path_rule::tmpdir_env, "/d/local-offload-gpu.lock"},
      {"empty TMPDIR falls through to TMP", "", {{"TMPDIR", ""}, {"TMP", "/a"}}, "/a/local-offload-gpu.lock",
       ol::path_rule::tmp_env, dflt},
      {"empty everything", "", {{"TMPDIR", ""}, {"TMP", ""}, {"TEMP", ""}}, dflt, ol::path_rule::default_tmp, dflt},
      {"GPU_LOCK wins over tmpdirs", "", {{"GPU_LOCK", "/srv/gpu.lock"}, {"TMPDIR", "/d"}}, "/srv/gpu.lock",
       ol::path_rule::gpu_lock_env, "/srv/gpu.lock"},
      {"GPU_LOCK taken as it is", "", {{"GPU_LOCK", "/srv//x/"}}, "/srv//x/", ol::path_rule::gpu_lock_env,
       "/srv//x/"},
      {"empty GPU_LOCK ignored", "", {{"GPU_LOCK", ""}, {"TMPDIR", "/d"}}, "/d/local-offload-gpu.lock",
       ol::path_rule::tmpdir_env, "/d/local-offload-gpu.lock"},
      {"override wins over all", "/o/l", {{"GPU_LOCK", "/srv/gpu.lock"}, {"TMPDIR", "/d"}}, "/o/l",
       ol::path_rule::override_path, "/o/l"},
  };
  for (const auto& r : rows) {
    SECTION(r.name) {
      auto res = ol::resolve_path(r.override_path, env_of(r.env));
      CHECK(res.path == r.path);
      CHECK(res.rule == r.rule);
      CHECK(res.go_path == r.go_path);
      CHECK(res.go_disagrees() == (r.path != r.go_path));
    }
  }
}

TEST_CASE("clean_path folds like path.join and filepath.Join", "[unit][path]") {
  CHECK(ol::clean_path("/a//b/./c/") == "/a/b/c");
  CHECK(ol::clean_path("/../a") == "/a");
  CHECK(ol::clean_path("a/../../b") == "../b");
  CHECK(ol::clean_path("") == ".");
  CHECK(ol::clean_path("./") == ".");
  CHECK(ol::clean_path("/") == "/");
}

TEST_CASE("resolve_path reads the process environment", "[unit][path]") {
  ::setenv("GPU_LOCK", "/from/env.lock", 1);
  CHECK(ol::resolve_path().path == "/from/env.lock");
  CHECK(ol::resolve_path("/explicit").path == "/explicit");
  ::unsetenv("GPU_LOCK");
  CHECK(ol::resolve_path().rule != ol::path_rule::gpu_lock_env);
}
