// The command-line grammar: durations, pids, and every malformed input
// getting a one-line usage error.
#include <catch2/catch.hpp>

#include <csignal>

#include "cli/args.hpp"

using namespace offload_lock;
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
  // Compounds, largest unit first, as Go's time.ParseDuration writes them.
  CHECK(parse_duration("1h30m") == milliseconds(5'400'000));
  CHECK(parse_duration("2m30s") == milliseconds(150'000));
  CHECK(parse_duration("1d") == milliseconds(86'400'000));
  CHECK(parse_duration("1d12h") == milliseconds(129'600'000));
  CHECK(parse_duration("1m0.5s") == milliseconds(60'500));
  CHECK(parse_duration("1h0m0s") == milliseconds(3'600'000));
  CHECK(parse_duration("1s250ms") == milliseconds(1250));
  for (const char* bad : {"", "-1", "-0", "+5", "1e3", "abc", "5x", "5 s", " 5", "1..2", ".", "ms", "s", "inf", "nan",
                          "0x10", "1msms", "99999999999999999999", "400000000000", "Forever", "1h1h", "30m1h",
                          "1m30", "1h 30m", "h1", "1w", "1d-1h", "5000d", ".m", "1s.5"}) {
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

TEST_CASE("yield signals", "[unit][cli]") {
  CHECK(parse_signal("USR1") == SIGUSR1);
  CHECK(parse_signal("SIGUSR1") == SIGUSR1);
  CHECK(parse_signal("usr1") == SIGUSR1);
  CHECK(parse_signal("SigTerm") == SIGTERM);
  for (const auto& [name, sig] : std::vector<std::pair<std::string, int>>{
           {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},
           {"ALRM", SIGALRM}, {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"URG", SIGURG}, {"PWR", SIGPWR},
           {"XCPU", SIGXCPU}}) {
    INFO(name);
    CHECK(parse_signal(name) == sig);
    CHECK(parse_signal("SIG" + name) == sig);
  }
  CHECK(parse_signal("1") == 1);
  CHECK(parse_signal("10") == 10);
  CHECK(parse_signal("64") == 64);
  // KILL and STOP cannot be caught, so CMD could not yield to them.
  for (const std::string& bad : {std::string(""), std::string("0"), std::string("65"), std::string("100"),
                                std::to_string(SIGKILL), std::to_string(SIGSTOP), std::string("KILL"),
                                std::string("SIGSTOP"), std::string("SIG"), std::string("CHLD"), std::string("USR3"),
                                std::string("-1"), std::string(" 1"), std::string("TERM "), std::string("SIGSIGTERM")}) {
    INFO(bad);
    CHECK_FALSE(parse_signal(bad));
  }
  args r;
  REQUIRE_FALSE(parse({"run", "--yield-signal", "usr2", "--", "true"}, r));
  CHECK(r.yield_signal == SIGUSR2);
  args bad;
  CHECK(parse({"run", "--yield-signal", "KILL", "--", "true"}, bad));
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

TEST_CASE("options as --opt=value, short options, help [COMMAND]", "[unit][cli]") {
  args a;
  REQUIRE_FALSE(parse({"--lock=/x", "--ttl=10m", "-j", "acquire", "--wait=1h30m", "--pid=42", "--label=a=b"}, a));
  CHECK(a.lock_path == "/x");
  CHECK(a.ttl == milliseconds(600000));
  CHECK(a.json);
  CHECK(a.wait == milliseconds(5'400'000));
  CHECK(a.pid == 42);
  CHECK(a.label == "a=b");  // only the first '=' splits
  args s;
  REQUIRE_FALSE(parse({"-q", "run", "-w", "5s", "-l", "x", "--gpus=4", "--on-lost=term", "--", "echo", "--wait=1"}, s));
  CHECK(s.quiet);
  CHECK(s.wait == milliseconds(5000));
  CHECK(s.label == "x");
  CHECK(s.gpus == 4);
  CHECK(s.on_lost_term);
  CHECK(s.cmd == std::vector<std::string>{"echo", "--wait=1"});  // CMD's arguments are CMD's
  args e;
  CHECK(parse({"release", "--token=", "--force"}, e));  // an empty inline value is empty, and refused
  args h;
  REQUIRE_FALSE(parse({"help"}, h));
  CHECK(h.help);
  CHECK(h.command.empty());
  args hr;
  REQUIRE_FALSE(parse({"help", "run"}, hr));
  CHECK(hr.help);
  CHECK(hr.command == "run");
  for (const auto& name : command_names()) {
    INFO(name);
    args c;
    REQUIRE_FALSE(parse({"help", name}, c));
    // Every command's synopsis is in the overview, as its own help begins.
    const std::string own = command_help(name);
    CHECK(usage().find("  " + own.substr(13, own.find('\n') - 13) + "\n") != std::string::npos);
  }
}

TEST_CASE("an unknown command or option names the nearest one", "[unit][cli]") {
  auto error_of = [](const std::vector<std::string>& argv) {
    args a;
    return parse(argv, a).value_or("");
  };
  CHECK_THAT(error_of({"staus"}), Catch::Contains("unknown command 'staus' (did you mean 'status'?)"));
  CHECK_THAT(error_of({"wait_free"}), Catch::Contains("(did you mean 'wait-free'?)"));
  CHECK_THAT(error_of({"hlep"}), Catch::Contains("(did you mean 'help'?)"));
  CHECK_THAT(error_of({"help", "relase"}), Catch::Contains("(did you mean 'release'?)"));
  CHECK_THAT(error_of({"status", "--prom"}), Catch::Contains("(did you mean '--prometheus'?)"));
  CHECK_THAT(error_of({"acquire", "--wiat", "5"}), Catch::Contains("for acquire (did you mean '--wait'?)"));
  CHECK_THAT(error_of({"run", "--lable=x", "--", "true"}), Catch::Contains("(did you mean '--label'?)"));
  CHECK_THAT(error_of({"--jsno", "status"}), Catch::Contains("(did you mean '--json'?)"));
  CHECK(error_of({"xyzzy"}).find("did you mean") == std::string::npos);  // nothing near: no guess
  CHECK(error_of({"status", "--wait"}).find("did you mean") == std::string::npos);  // another command's option
  CHECK_THAT(error_of({"--json=yes", "status"}), Catch::Contains("--json takes no value"));
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
      {"--json=1", "status"},
      {"acquire", "--wait="},
      {"acquire", "--wait=1h1h"},
      {"help", "bogus"},
      {"help", "run", "status"},
      {"help", "--json"},
      {"status", "--watch=yes"},
      {"acquire", "-w"},
      {"acquire", "-x"},
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
