// What every view makes of the gpulease lease: claims parsed exactly as Go's
// encoding/json parses them (through the stand-in), and `status`, `status
// --json` and `doctor` naming a holder (doc/protocol-gpulease.md, "The claim",
// "Views").
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "gpulease/record.hpp"
#include "lease_support.hpp"

using namespace olt;

TEST_CASE("lease: claims parse here exactly as Go's encoding/json parses them", "[multiprocess][lease]") {
  temp_dir d;
  gl::record r;
  r.epoch = 31;
  r.lease_class = "media";
  r.pid = 4242;
  r.start_ticks = 987654;
  r.reason = "r<&>\xE2\x80\xA8";
  r.origin = "o";
  r.job_id = "j";
  r.acquired_at_ms = 1764470000000;
  r.expires_at_ms = 1764473600000;
  r.renewed_at_ms = 1764470000001;
  const std::string claim = gl::serialize_record(r);
  const std::string both = gl::append_record(R"({"pid":4242,"startedAt":1764470000000,"token":"t"})", r);
  std::vector<std::string> corpus = {claim,
                                     both,
                                     "null",
                                     "",
                                     " ",
                                     "[]",
                                     "{}",
                                     "5",
                                     "\"x\"",
                                     "\xEF\xBB\xBF{}",
                                     R"({"epoch":1}x)",
                                     R"({"EPOCH":4,"Class":"text","HOLDER":{"PID":5}})",
                                     R"({"epoch":1,"EPOCH":2})",
                                     R"({"epoch":"x","epoch":5})",
                                     R"({"epoch":5,"epoch":"x"})",
                                     R"({"epoch":-0})",
                                     R"({"holder":{"pid":-0}})",
                                     R"({"epoch":1e0})",
                                     R"({"epoch":18446744073709551615})",
                                     R"({"epoch":18446744073709551616})",
                                     R"({"holder":{"pid":9223372036854775808}})",
                                     R"({"holder":[]})",
                                     R"({"holder":5})",
                                     R"({"reason":"\ud800x"})",
                                     R"({"reason":"\udc00\ud800\udc00"})",
                                     R"({"reason":"\ud800\u0041"})",
                                     "{\"reason\":\"a\xFF"
                                     "b\xE2\x82\"}",
                                     "{\"holder\":{\"\xC5\xBFtart_time_m\xC5\xBF\":7}}",
                                     R"({"epoch":3,"epoch":null,"holder":null,"class":null})",
                                     R"({"x":{"a":[1,{"b":[true,false,null]}]},"epoch":2})",
                                     "{\"class\":\"\x01\"}",
                                     R"({"class":"\u0000"})",
                                     R"({"acquired_at_ms":-9223372036854775808})",
                                     R"({"acquired_at_ms":-9223372036854775809})",
                                     "{\"x\":" + std::string(9999, '[') + std::string(9999, ']') + "}",
                                     "{\"x\":" + std::string(10000, '[') + std::string(10000, ']') + "}"};
  // Every prefix of the record for both protocols (a claim read mid-write),
  // and the record with one byte changed at every place (deterministic).
  for (std::size_t n = 0; n < both.size(); ++n) corpus.push_back(both.substr(0, n));
  const char subs[] = {'"', '{', '}', '-', '0', ' ', 'E', '\\', ',', ':'};
  for (std::size_t n = 0; n < claim.size(); ++n) {
    std::string m = claim;
    m[n] = subs[n % sizeof subs];
    corpus.push_back(m);
  }
  std::vector<std::string> args = {"parse"};
  for (std::size_t k = 0; k < corpus.size(); ++k) {
    const fs::path f = d.path / ("c" + std::to_string(k));
    write_file(f, corpus[k]);
    args.push_back(f.string());
  }
  child go(standin_exe(), args);
  std::size_t agreed = 0;
  for (std::size_t k = 0; k < corpus.size(); ++k) {
    auto line = go.read_line();
    REQUIRE(line);
    const auto want = nlohmann::json::parse(*line);
    const auto got = gl::parse_record(corpus[k]);
    INFO("input #" << k << ": " << corpus[k].substr(0, 120));
    REQUIRE(got.has_value() == want["ok"].get<bool>());
    if (got) {
      CHECK(std::to_string(got->epoch) == want["epoch"].get<std::string>());
      CHECK(got->lease_class == want["class"].get<std::string>());
      CHECK(got->pid == want["pid"].get<std::int64_t>());
      CHECK(got->start_ticks == want["start"].get<std::int64_t>());
      CHECK(got->reason == want["reason"].get<std::string>());
      CHECK(got->origin == want["origin"].get<std::string>());
      CHECK(got->job_id == want["jobId"].get<std::string>());
      CHECK(got->acquired_at_ms == want["acquiredAt"].get<std::int64_t>());
      CHECK(got->expires_at_ms == want["expiresAt"].get<std::int64_t>());
      CHECK(got->renewed_at_ms == want["renewedAt"].get<std::int64_t>());
    }
    ++agreed;
  }
  CHECK(go.wait() == 0);
  CHECK(agreed == corpus.size());
}

TEST_CASE("lease: status and doctor name a gpulease holder, and say where there is none", "[cli][lease]") {
  lease_root r;
  const env_changes env = {{"OFFLOAD_LOCK_LEASE_ROOT", r.root}, {"GPU_LOCK", std::nullopt}};
  const std::vector<std::string> lock = {"--lock", (r.d.path / "gpu.lock").string()};
  auto cli = [&](std::vector<std::string> args, const env_changes& e) {
    args.insert(args.begin(), lock.begin(), lock.end());
    return run_cli(args, e);
  };
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string who =
      "media lease (pid " + std::to_string(g.pid()) + ", epoch " + field(got, 2) + ", reason \"stand-in\")";
  auto st = cli({"status"}, env);
  INFO(st.out << st.err);
  CHECK_THAT(st.out, Catch::Contains("gpulease: held by " + who + " for ") && Catch::Contains("window ends in ") &&
                         Catch::Contains("(" + r.lease.string() + ")\n"));
  auto j = nlohmann::json::parse(cli({"--json", "status"}, env).out);
  CHECK(j["gpulease"]["state"] == "held");
  CHECK(j["gpulease"]["pid"] == g.pid());
  CHECK(std::to_string(j["gpulease"]["epoch"].get<std::uint64_t>()) == field(got, 2));
  CHECK(j["gpulease"]["class"] == "media");
  CHECK(j["gpulease"]["rule"] == "OFFLOAD_LOCK_LEASE_ROOT");
  CHECK(j["gpulease"]["gpuleaseReadersHeld"] == true);
  auto doc = cli({"doctor"}, env);
  CHECK_THAT(doc.out, Catch::Contains("ok    gpulease: lease directory " + r.lease.string() +
                                      " (rule OFFLOAD_LOCK_LEASE_ROOT;") &&
                          Catch::Contains("ok    gpulease_lease: held by " + who));
  g.close_stdin();
  CHECK(g.wait() == 0);
  CHECK_THAT(cli({"status"}, env).out, Catch::Contains("gpulease: free (" + r.lease.string() + ")"));

  // A claim's words reach the terminal escaped.
  {
    gl::record f = *gl::parse_record(forged(90, ::getpid(), own_ticks(), now_ms(), now_ms() + 60'000));
    f.reason = "a\nb\x1b[31m";
    write_file(r.claim, gl::serialize_record(f));
  }
  st = cli({"status"}, env);
  CHECK_THAT(st.out, Catch::Contains("reason \"a\\nb\\x1b[31m\")"));
  CHECK(st.out.find('\x1b') == std::string::npos);

  // No root: nothing shown, null in JSON, and doctor says so.
  const env_changes none = {{"OFFLOAD_LOCK_LEASE_ROOT", (r.d.path / "absent").string()}, {"GPU_LOCK", std::nullopt}};
  CHECK(cli({"status"}, none).out.find("gpulease") == std::string::npos);
  CHECK(nlohmann::json::parse(cli({"--json", "status"}, none).out)["gpulease"].is_null());
  CHECK_THAT(cli({"doctor"}, none).out, Catch::Contains("ok    gpulease: no gpulease root ("));

  // GPU_LOCK as the lock and gpulease's lease directory: said once
  // gpulease's counter shows it has been used so (offload-lock then holds
  // both there).
  temp_dir s;
  const env_changes shared = {{"GPU_LOCK", s.lock()}, {"OFFLOAD_LOCK_LEASE_ROOT", std::nullopt}};
  auto quiet = run_cli({"doctor"}, shared);
  CHECK_THAT(quiet.out, Catch::Contains("ok    gpulease: no gpulease root (GPU_LOCK would be its lease directory"));
  CHECK(quiet.out.find("gpulease_shared") == std::string::npos);
  write_file(s.path / "epoch", "3");
  auto loud = run_cli({"doctor"}, shared);
  CHECK_THAT(loud.out, Catch::Contains("ok    gpulease_shared: GPU_LOCK is the lock directory and gpulease's lease "
                                       "directory at once: offload-lock's one meta.json there is both"));
}

TEST_CASE("lease: while a gpulease holder has the GPU, status and wait-free call it busy though the lock is free",
          "[cli][lease]") {
  lease_root r;
  const env_changes env = {{"OFFLOAD_LOCK_LEASE_ROOT", r.root}, {"GPU_LOCK", std::nullopt}};
  const std::string lock = (r.d.path / "gpu.lock").string();
  auto cli = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--lock", lock});
    return run_cli(args, env);
  };
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string who = "media lease (pid " + std::to_string(g.pid()) + ", epoch " + field(got, 2) +
                          ", reason \"stand-in\")";

  // The first line answers for the GPU, and so does the exit status.
  auto st = cli({"status"});
  INFO(st.out << st.err);
  CHECK(st.code == 0);
  CHECK(st.out.rfind("held by a gpulease holder: " + who + " for ", 0) == 0);
  CHECK_THAT(st.out.substr(0, st.out.find('\n')), Catch::EndsWith("; the lock itself is free"));
  auto j = nlohmann::json::parse(cli({"--json", "status"}).out);
  CHECK(j["held"] == false);
  CHECK(j["busy"] == true);
  CHECK(j["busyBy"] == "gpulease");
  CHECK(j["slots"][0]["busy"] == true);
  CHECK_THAT(cli({"status", "--prometheus"}).out, Catch::Contains("offload_lock_busy{lock=\"" + lock + "\",gpu=\"0\"} 1"));

  auto once = cli({"wait-free", "--wait", "0"});
  CHECK(once.code == 1);
  CHECK_THAT(once.err, Catch::Contains("is held by a gpulease holder: " + who));
  auto wj = nlohmann::json::parse(cli({"--json", "wait-free", "--wait", "0"}).out);
  CHECK(wj["busy"] == true);
  CHECK(wj["busyBy"] == "gpulease");
  CHECK(wj["gpulease"]["pid"] == g.pid());

  // wait-free waits for the lease, and ends when its holder lets go.
  child w(cli_exe(), {"--lock", lock, "wait-free"}, env);
  ::usleep(300 * 1000);
  CHECK(!w.exited());
  CHECK(w.wait(ms(200)) == std::nullopt);
  g.close_stdin();
  CHECK(g.wait() == 0);
  CHECK(w.wait() == 0);

  st = cli({"status"});
  CHECK(st.code == 1);
  CHECK(st.out.rfind("free\n", 0) == 0);
  j = nlohmann::json::parse(cli({"--json", "status"}).out);
  CHECK(j["busy"] == false);
  CHECK(j["busyBy"].is_null());
  CHECK(cli({"wait-free", "--wait", "0"}).code == 0);
}

TEST_CASE("lease: a command that holds the lock and waits for the gpulease lease says what it waits for",
          "[cli][lease]") {
  lease_root r;
  const env_changes env = {{"OFFLOAD_LOCK_LEASE_ROOT", r.root}, {"GPU_LOCK", std::nullopt}};
  const std::string lock = (r.d.path / "gpu.lock").string();
  child g(standin_exe(), standin_hold(r.root));
  const std::string got = line_starting(g, "acquired");
  REQUIRE(!got.empty());
  const std::string who = "media lease (pid " + std::to_string(g.pid()) + ", epoch " + field(got, 2) +
                          ", reason \"stand-in\")";
  // Off a terminal: a line when it starts waiting, and the reminders.
  auto log = run_cli({"--lock", lock, "run", "--wait", "1500ms", "--remind", "300ms", "--", "true"}, env);
  INFO(log.err);
  CHECK(log.code == 1);
  CHECK_THAT(log.err, Catch::Contains("offload-lock: waiting for the gpulease lease: " + who + ", held for "));
  CHECK_THAT(log.err, Catch::Contains("offload-lock: still waiting for the gpulease lease: " + who));
  // With --json, the progress stream names the lease.
  auto js = run_cli({"--lock", lock, "--json", "run", "--wait", "500ms", "--", "true"}, env);
  const std::string first = js.err.substr(0, js.err.find('\n'));
  INFO(js.err);
  const auto p = nlohmann::json::parse(first);
  CHECK(p["event"] == "waiting");
  CHECK(p["holders"].empty());
  CHECK(p["gpulease"]["pid"] == g.pid());
  g.close_stdin();
  CHECK(g.wait() == 0);
}

TEST_CASE("lease: status --watch --json prints a new line when a gpulease holder takes and lets go of the lease",
          "[cli][lease]") {
  lease_root r;
  const env_changes env = {{"OFFLOAD_LOCK_LEASE_ROOT", r.root}, {"GPU_LOCK", std::nullopt}};
  child w(cli_exe(), {"--lock", (r.d.path / "gpu.lock").string(), "--json", "status", "--watch"}, env);
  auto first = w.read_line();
  REQUIRE(first);
  CHECK(nlohmann::json::parse(*first)["busy"] == false);
  // Woken by the lease directory, not by a timer (its safety look is a minute away).
  child g(standin_exe(), standin_hold(r.root));
  REQUIRE(!line_starting(g, "acquired").empty());
  // (Its claim may be seen being written first: busy, no holder yet.)
  nlohmann::json j;
  for (int k = 0; k < 3; ++k) {
    auto taken = w.read_line();
    REQUIRE(taken);
    j = nlohmann::json::parse(*taken);
    if (j["gpulease"]["pid"] == g.pid()) break;
    CHECK(j["busy"] == true);
  }
  CHECK(j["busy"] == true);
  CHECK(j["busyBy"] == "gpulease");
  CHECK(j["gpulease"]["pid"] == g.pid());
  g.close_stdin();
  CHECK(g.wait() == 0);
  std::optional<std::string> freed;
  // (A heartbeat written in between may print the same state once more.)
  for (int k = 0; k < 3 && (freed = w.read_line()); ++k)
    if (nlohmann::json::parse(*freed)["busy"] == false) break;
  REQUIRE(freed);
  CHECK(nlohmann::json::parse(*freed)["busy"] == false);
  w.kill(SIGTERM);
  w.wait();
}
