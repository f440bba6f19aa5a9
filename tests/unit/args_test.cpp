// The command-line grammar: durations, pids, and every malformed input
// getting a one-line usage error.
#include <catch2/catch.hpp>

#include "cli/args.hpp"

using namespace offload_lock::cli;
using std::chrono::milliseconds;

TEST_CASE("durations", "[unit][cli]") {
  CHECK(parse_duration("0") == milliseconds(0));
  CHECK(parse_duration("5") == milliseconds(5000));
  CHECK(parse_duration("1.5") == milliseconds(1500));
  CHECK(parse_duration(".25") == milliseconds(250));
  CHECK(parse_duration("250ms") == milliseconds(250));
  CHECK(parse_duration("2s") == milliseconds(2000));
  CHECK(parse_duration("1.5m") == milliseconds(90000));
  CHECK(parse_duration("1h") == milliseconds(3600000));
  CHECK(parse_duration("0.0001s") == milliseconds(1));  // a positive wait stays positive
  CHECK(parse_duration("forever") == milliseconds::max());
  for (const char* bad : {"", "-1", "-0", "+5", "1e3", "abc", "5x", "5 s", " 5", "1..2", ".", "ms", "s", "inf", "nan",
                          "0x10", "1msms", "99999999999999999999", "400000000000", "Forever", "1d"}) {
    INFO(bad);
    CHECK_FALSE(parse_duration(bad));
  }
}

TEST_CASE("pids", "[unit][cli]") {
  CHECK(parse_pid("1") == 1);
  CHECK(parse_pid("2147483647") == 2147483647);
  for (const char* bad : {"", "0", "-1", "2147483648", "12a", "1.0", " 1", "99999999999"}) {
    INFO(bad);
    CHECK_FALSE(parse_pid(bad));
  }
}

TEST_CASE("well-formed command lines", "[unit][cli]") {
  args a;
  REQUIRE_FALSE(parse({"--lock", "/x", "--ttl", "10m", "--json", "acquire", "--wait", "5s", "--pid", "42", "--label",
                       "render"},
                      a));
  CHECK(a.lock_path == "/x");
  CHECK(a.ttl == milliseconds(600000));
  CHECK(a.json);
  CHECK(a.command == "acquire");
  CHECK(a.wait == milliseconds(5000));
  CHECK(a.pid == 42);
  CHECK(a.label == "render");

  args r;
  REQUIRE_FALSE(parse({"run", "--wait", "0", "--busy-exit", "75", "--", "sh", "-c", "echo --wait"}, r));
  CHECK(r.busy_exit == 75);
  CHECK(r.cmd == std::vector<std::string>{"sh", "-c", "echo --wait"});

  args r2;
  REQUIRE_FALSE(parse({"run", "true", "--label", "x"}, r2));  // everything after CMD belongs to CMD
  CHECK(r2.cmd == std::vector<std::string>{"true", "--label", "x"});

  args g;
  REQUIRE_FALSE(parse({"status", "--quiet", "--lock", "/y"}, g));  // global flags after the command too
  CHECK(g.quiet);
  CHECK(g.lock_path == "/y");

  args s;
  REQUIRE_FALSE(parse({"status", "--watch", "--gpus", "3"}, s));
  CHECK(s.watch);
  CHECK(s.gpus == 3);
  CHECK_FALSE(s.gpus_auto);
  args p;
  REQUIRE_FALSE(parse({"status", "--prometheus", "--gpu", "2"}, p));
  CHECK(p.prometheus);
  CHECK(p.gpu == 2);
  CHECK(p.gpus == 1);

  args h;
  REQUIRE_FALSE(parse({"hold", "--gpus", "auto", "--remind", "30s"}, h));
  CHECK(h.gpus_auto);
  CHECK(h.remind == milliseconds(30000));
  args h2;
  REQUIRE_FALSE(parse({"run", "--gpus", "4", "--gpu", "3", "--remind", "0", "--", "true"}, h2));
  CHECK(h2.gpus == 4);
  CHECK(h2.gpu == 3);
  CHECK(h2.remind == milliseconds(0));
}

TEST_CASE("every malformed command line is a one-line usage error", "[unit][cli]") {
  std::vector<std::vector<std::string>> bad = {
      {},
      {"frobnicate"},
      {"frob\nnicate"},           // the argument is quoted, escaped: still one line
      {"status", "--js\r\non"},
      {"--bogus", "status"},
      {"status", "--bogus"},
      {"--lock"},
      {"--lock", "", "status"},
      {"--ttl", "0", "status"},
      {"--ttl", "abc", "status"},
      {"acquire", "--wait"},
      {"acquire", "--wait", "soon"},
      {"acquire", "--pid", "0"},
      {"acquire", "--pid", "abc"},
      {"acquire", "--pid", "-4"},
      {"acquire", "--token", "t"},
      {"release", "--pid", "1", "--token", "t"},
      {"release", "--token", ""},
      {"release", "--wait", "1"},
      {"status", "extra"},
      {"path", "--wait", "1"},
      {"run"},
      {"run", "--"},
      {"run", "--busy-exit", "256", "--", "true"},
      {"run", "--busy-exit", "x", "--", "true"},
      {"hold", "--pid", "1"},
      {"wait-free", "--poll", "0"},
      {"wait-free", "--poll", "forever"},
      {"acquire", "--label", std::string(2000, 'x')},
      {"run", "--gpus", "0", "--", "true"},
      {"run", "--gpus", "x", "--", "true"},
      {"acquire", "--gpus", "1025"},
      {"acquire", "--gpus"},
      {"acquire", "--gpu", "-1"},
      {"acquire", "--gpu", "1024"},
      {"acquire", "--gpus", "3", "--gpu", "3"},
      {"status", "--watch", "--prometheus"},
      {"--json", "status", "--prometheus"},
      {"wait-free", "--gpus", "2"},
      {"path", "--watch"},
      {"acquire", "--watch"},
      {"acquire", "--remind", "soon"},
      {"status", "--remind", "1s"},
  };
  for (const auto& argv : bad) {
    std::string joined;
    for (const auto& s : argv) joined += s + " ";
    INFO(joined);
    args a;
    auto e = parse(argv, a);
    REQUIRE(e);
    CHECK_FALSE(e->empty());
    CHECK(e->find('\n') == std::string::npos);
  }
}
