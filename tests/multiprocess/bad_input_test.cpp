// Bad input, end to end with real files: every kind of meta.json on disk,
// every odd thing at the lock path, malformed command lines, a full file
// system. Each gets its documented outcome (doc/operations.md "Bad input"): a clear
// error or the documented judgment; never a crash, a hang, or the deletion
// of something that is not a lock.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "offload_lock/lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;
using nlohmann::json;

namespace {

// A refusal comes at once, whatever --wait says: the commands are given a
// long wait, and "at once" is any time well inside it (a loaded machine
// starts a command slowly; a refusal that waited would take the whole 90 s).
constexpr const char* kRefusalWait = "90s";
constexpr ms kAtOnce = 45s;

// The names in a directory, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (fs::directory_iterator it(dir), end; it != end; ++it) out.push_back(it->path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void backdate(const std::string& lock, std::int64_t ms) {
  const auto meta = fs::path(lock) / "meta.json";
  if (fs::exists(fs::symlink_status(meta))) set_mtime(meta, now_ms() - ms);
  set_mtime(lock, now_ms() - ms);
}

void one_line_error(const cli_result& r) {
  INFO(r.err);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.rfind("offload-lock: ", 0) == 0);
}

}  // namespace

TEST_CASE("every kind of meta.json on disk gets its documented judgment", "[multiprocess][bad-input]") {
  boost::process::child sleeper("/bin/sleep", "120");
  const std::string pid = std::to_string(sleeper.id());
  const std::string now = std::to_string(now_ms());
  const std::string valid = "{\"pid\":" + pid + ",\"startedAt\":" + now + "}";
  // unparseable: stale once older than the grace (B3); held_ttl: judged by
  // the TTL alone (held for an hour); stale: stale at once.
  enum class outcome { unparseable, held_ttl, stale };
  struct row {
    const char* name;
    std::string bytes;
    outcome expect;
  };
  std::vector<row> rows = {
      {"empty", "", outcome::unparseable},
      {"partial", "{\"pid\":" + pid, outcome::unparseable},
      {"not JSON", "hello", outcome::unparseable},
      {"a byte-order mark", "\xEF\xBB\xBF" + valid, outcome::unparseable},
      {"trailing garbage", valid + "x", outcome::unparseable},
      {"null", "null", outcome::unparseable},
      {"an array", "[]", outcome::held_ttl},
      {"pid as a string", "{\"pid\":\"" + pid + "\",\"startedAt\":" + now + "}", outcome::held_ttl},
      {"pid as a float", "{\"pid\":" + pid + ".5,\"startedAt\":" + now + "}", outcome::stale},
      {"pid 0", "{\"pid\":0,\"startedAt\":" + now + "}", outcome::held_ttl},
      {"pid negative", "{\"pid\":-7,\"startedAt\":" + now + "}", outcome::held_ttl},
      {"pid above 2^31", "{\"pid\":4294967296,\"startedAt\":" + now + "}", outcome::stale},
      {"pid missing", "{\"startedAt\":" + now + "}", outcome::held_ttl},
      {"a dead pid", "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":" + now + "}", outcome::stale},
      {"startedAt as a string", "{\"pid\":" + pid + ",\"startedAt\":\"yesterday\"}", outcome::held_ttl},
      {"startedAt in the future", "{\"pid\":" + pid + ",\"startedAt\":" + std::to_string(now_ms() + 86'400'000) + "}",
       outcome::held_ttl},
      {"startedAt missing", "{\"pid\":" + pid + "}", outcome::held_ttl},
      {"10 MB of data", "{\"pid\":" + pid + ",\"startedAt\":" + now + ",\"pad\":\"" + std::string(10 << 20, 'x') + "\"}",
       outcome::unparseable},
      {"deeply nested JSON", std::string(200000, '[') + std::string(200000, ']'), outcome::unparseable},
      {"invalid UTF-8 outside strings", "{\"pid\":" + pid + ",\xff}", outcome::unparseable},
      {"invalid UTF-8 inside a string", "{\"pid\":" + pid + ",\"startedAt\":" + now + ",\"label\":\"a\xff\xfe\"}",
       outcome::held_ttl},
  };
  for (const auto& r : rows) {
    SECTION(r.name) {
      temp_dir d;
      write_file(d.path / "precious", "not a lock");
      make_lock(d.lock(), r.bytes);
      const bool fresh_held = r.expect != outcome::stale;

      auto start = std::chrono::steady_clock::now();
      ol::info i = ol::inspect(d.lock());
      // Bounded work, whatever the bytes: reads stop at 1 MiB and nesting at 256 levels. A
      // quadratic parse of the 10 MB row would take minutes; a loaded machine, not 20 s.
      CHECK(std::chrono::steady_clock::now() - start < 20s);
      CHECK(i.held == fresh_held);
      if (r.expect == outcome::stale) CHECK(i.stale_reason);

      // The command shows the same judgment, one line of JSON, no crash.
      auto st = run_cli({"--lock", d.lock(), "--json", "status"});
      CHECK(st.code == (fresh_held ? 0 : 1));
      REQUIRE(std::count(st.out.begin(), st.out.end(), '\n') == 1);
      json j = json::parse(st.out);
      CHECK(j["held"] == fresh_held);

      auto now_try = ol::lock::acquire(d.lock(), 0ms);
      CHECK(static_cast<bool>(now_try) == !fresh_held);
      if (!now_try) {
        CHECK(now_try.error() == ol::errc::busy);
        // Older than the grace: an unparseable meta is reclaimed, a parseable
        // one with a live (or no) pid is still within its TTL.
        backdate(d.lock(), 10'000);
        auto later = ol::lock::acquire(d.lock(), 0ms);
        CHECK(static_cast<bool>(later) == (r.expect == outcome::unparseable));
        if (later) CHECK(read_file(fs::path(d.lock()) / "meta.json") == later->meta_json());
      }
      CHECK(read_file(d.path / "precious") == "not a lock");
    }
  }
  sleeper.terminate();
  sleeper.wait();
}

TEST_CASE("meta.json that is a symlink or a FIFO is never followed and never blocks", "[multiprocess][bad-input]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "120");
  fs::create_directory(d.lock());
  SECTION("a symlink to a file holding a live holder's meta") {
    write_file(d.path / "elsewhere.json", "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":1}");
    fs::create_symlink(d.path / "elsewhere.json", fs::path(d.lock()) / "meta.json");
  }
  SECTION("a FIFO") {
    REQUIRE(::mkfifo((fs::path(d.lock()) / "meta.json").c_str(), 0600) == 0);
  }
  backdate(d.lock(), 10'000);
  auto start = std::chrono::steady_clock::now();
  ol::info i = ol::inspect(d.lock());
  CHECK(std::chrono::steady_clock::now() - start < 20s);  // a FIFO is not waited on
  CHECK_FALSE(i.pid);  // what the link points to is never read
  // Not a lock's meta.json: refused, with the lock left as it is.
  auto r = run_cli({"--lock", d.lock(), "acquire", "--wait", kRefusalWait}, {}, 2 * kAtOnce);
  CHECK(r.code == 4);
  one_line_error(r);
  CHECK_THAT(r.err, Catch::Contains(d.lock()) && Catch::Contains("not part of a lock"));
  CHECK(std::chrono::steady_clock::now() - start < kAtOnce);
  CHECK(fs::exists(fs::symlink_status(fs::path(d.lock()) / "meta.json")));
  if (fs::exists(d.path / "elsewhere.json")) CHECK_THAT(read_file(d.path / "elsewhere.json"), Catch::StartsWith("{\"pid\""));
  sleeper.terminate();
  sleeper.wait();
}

TEST_CASE("odd things at the lock path are refused, never followed, never deleted", "[multiprocess][bad-input]") {
  temp_dir d;
  const fs::path lock = d.lock();
  // A real lock directory elsewhere, stale (dead holder), and a plain file.
  const fs::path other = d.path / "other.lock";
  make_lock(other.string(), "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
  write_file(d.path / "file", "precious");
  std::string what;
  SECTION("a regular file") {
    write_file(lock, "precious");
    what = "not a directory";
  }
  SECTION("a symlink to a (stale) lock directory") {
    fs::create_symlink(other, lock);
    what = "symbolic link";
  }
  SECTION("a symlink to a file") {
    fs::create_symlink(d.path / "file", lock);
    what = "symbolic link";
  }
  SECTION("a dangling symlink") {
    fs::create_symlink(d.path / "nowhere", lock);
    what = "symbolic link";
  }
  const auto before = names_in(d.path);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"acquire", "--wait", kRefusalWait}, {"run", "--wait", kRefusalWait, "--", "true"}, {"release", "--force"}}) {
    std::vector<std::string> full = {"--lock", lock.string()};
    full.insert(full.end(), args.begin(), args.end());
    auto start = std::chrono::steady_clock::now();
    auto r = run_cli(full, {}, 2 * kAtOnce);
    INFO(args[0]);
    CHECK(r.code == 4);
    one_line_error(r);
    CHECK_THAT(r.err, Catch::Contains(lock.string()) && Catch::Contains(what));
    CHECK(std::chrono::steady_clock::now() - start < kAtOnce);
  }
  auto lib = ol::lock::acquire(lock.string(), 0ms);
  REQUIRE_FALSE(lib);
  CHECK(lib.error().code() == std::errc::not_a_directory);
  auto st = run_cli({"--lock", lock.string(), "--json", "status"});
  CHECK(st.code == 1);
  CHECK_THAT(json::parse(st.out)["stale"].get<std::string>(), Catch::Contains(what));
  // Everything is where it was.
  CHECK(names_in(d.path) == before);
  CHECK(read_file(d.path / "file") == "precious");
  CHECK(fs::exists(other / "meta.json"));
}

TEST_CASE("a directory holding other files is not a lock: never deleted", "[multiprocess][bad-input]") {
  temp_dir d;
  const fs::path lock = d.lock();
  fs::create_directory(lock);
  std::string entry;
  SECTION("no meta.json, a file of someone's (a mistyped GPU_LOCK)") {
    write_file(lock / "notes.txt", "keep me");
    entry = "notes.txt";
  }
  SECTION("a dead holder's meta.json and a subdirectory") {
    write_file(lock / "meta.json", "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
    fs::create_directory(lock / "data");
    write_file(lock / "data" / "x", "keep me");
    entry = "data";
  }
  SECTION("a dead holder's meta.json and a symlink out of it") {
    write_file(lock / "meta.json", "{\"pid\":" + std::to_string(dead_pid()) + ",\"startedAt\":1}");
    write_file(d.path / "target", "keep me");
    fs::create_symlink(d.path / "target", lock / "link");
    entry = "link";
  }
  backdate(lock.string(), 10'000);
  const auto inside = names_in(lock);
  auto start = std::chrono::steady_clock::now();
  auto r = run_cli({"--lock", lock.string(), "acquire", "--wait", kRefusalWait}, {}, 2 * kAtOnce);
  CHECK(r.code == 4);
  one_line_error(r);
  CHECK_THAT(r.err, Catch::Contains(lock.string()) && Catch::Contains("'" + entry + "'") &&
                        Catch::Contains("not part of a lock"));
  CHECK(std::chrono::steady_clock::now() - start < kAtOnce);
  auto forced = run_cli({"--lock", lock.string(), "release", "--force"});
  CHECK(forced.code == 4);
  CHECK_THAT(forced.err, Catch::Contains("not part of a lock"));
  auto lib = ol::lock::acquire(lock.string(), 0ms);
  REQUIRE_FALSE(lib);
  CHECK(lib.error().code() == std::errc::directory_not_empty);
  // Nothing moved, nothing removed, nothing of ours left beside it.
  CHECK(names_in(lock) == inside);
  CHECK(names_in(d.path) == std::vector<std::string>(fs::exists(d.path / "target") ? std::vector<std::string>{"gpu.lock", "target"}
                                                                                    : std::vector<std::string>{"gpu.lock"}));
  for (fs::recursive_directory_iterator it(lock), end; it != end; ++it)
    if (fs::is_regular_file(it->symlink_status()) && it->path().filename() != "meta.json")
      CHECK(read_file(it->path()) == "keep me");
}

TEST_CASE("a dead mkdir-fallback holder's temporary meta is part of its lock and is reclaimed", "[multiprocess][bad-input]") {
  temp_dir d;
  fs::create_directory(d.lock());
  write_file(fs::path(d.lock()) / ".meta.json.0123abcd", "{\"pid\":1,\"sta");
  backdate(d.lock(), 10'000);
  auto l = ol::lock::acquire(d.lock(), 0ms);
  REQUIRE(l);
  CHECK(names_in(d.lock()) == std::vector<std::string>{"meta.json"});
}

TEST_CASE("lock names: too long is a clear error, non-ASCII works end to end", "[multiprocess][bad-input]") {
  temp_dir d;
  SECTION("a name that leaves no room for the staging names, or is over NAME_MAX, or a path over PATH_MAX") {
    for (const std::string& p : {(d.path / std::string(228, 'n')).string(), (d.path / std::string(300, 'n')).string(),
                                 d.str() + "/" + std::string(5000 / 100, 'x') + [] {
                                   std::string s;
                                   for (int i = 0; i < 100; ++i) s += "/" + std::string(49, 'y');
                                   return s;
                                 }()}) {
      auto r = run_cli({"--lock", p, "run", "--wait", "0", "--", "true"});
      CHECK(r.code == 4);
      one_line_error(r);
      CHECK_THAT(r.err, Catch::Contains("too long"));
      if (p.size() < 1000) CHECK_THAT(r.err, Catch::Contains("at most 227"));
      auto st = run_cli({"--lock", p, "status"});
      CHECK(st.code == 4);
      one_line_error(st);
    }
    CHECK(names_in(d.path).empty());
  }
  SECTION("the longest name that fits") {
    std::string p = (d.path / std::string(227, 'n')).string();
    auto r = run_cli({"--lock", p, "run", "--wait", "0", "--", "sh", "-c", "test -f \"$OFFLOAD_LOCK_PATH/meta.json\""});
    CHECK(r.code == 0);
    CHECK(names_in(d.path).empty());
  }
  SECTION("non-ASCII (UTF-8) names") {
    fs::path dir = d.path / "gpu-\xE6\x97\xA5\xE6\x9C\xAC-\xC3\xBC";
    fs::create_directory(dir);
    std::string p = (dir / "verrou-\xC3\xA9t\xC3\xA9.lock").string();
    child h(cli_exe(), {"--lock", p, "hold", "--label", "rendu \xC3\xA9t\xC3\xA9"});
    auto line = h.read_line();
    REQUIRE(line);
    REQUIRE(line->rfind("acquired ", 0) == 0);
    CHECK(json::parse(line->substr(9))["path"] == p);
    auto st = run_cli({"--lock", p, "status"});
    CHECK(st.code == 0);
    CHECK_THAT(st.out, Catch::Contains("rendu \xC3\xA9t\xC3\xA9"));
    CHECK(run_cli({"--lock", p, "acquire", "--wait", "0"}).code == 1);
    h.close_stdin();
    CHECK(h.wait() == 0);
    CHECK(run_cli({"--lock", p, "run", "--", "true"}).code == 0);
    CHECK(names_in(dir).empty());
  }
}

TEST_CASE("a missing parent, and control characters in paths and labels, stay one line", "[multiprocess][bad-input]") {
  temp_dir d;
  std::string missing = (d.path / "no\nsuch" / "gpu.lock").string();
  auto r = run_cli({"--lock", missing, "acquire", "--wait", "0"});
  CHECK(r.code == 4);
  one_line_error(r);
  CHECK_THAT(r.err, Catch::Contains("no\\nsuch") && Catch::Contains("No such file"));
  // A missing parent is an error for every command, never a free GPU: a
  // `wait-free && send-work` gate must not pass on a typo.
  const std::string parent = (d.path / "no\nsuch").string();
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"status"}, {"wait-free", "--wait", "0"}, {"release"}, {"--json", "status"}}) {
    std::vector<std::string> args = {"--lock", missing};
    args.insert(args.end(), cmd.begin(), cmd.end());
    auto m = run_cli(args);
    INFO(cmd[0]);
    CHECK(m.code == 4);
    if (cmd[0] == "--json") {
      auto j = nlohmann::json::parse(m.out);
      CHECK(j["held"] == false);
      CHECK_THAT(j["error"].get<std::string>(), Catch::Contains(parent) && Catch::Contains("does not exist"));
    } else {
      one_line_error(m);
      CHECK_THAT(m.err, Catch::Contains("no\\nsuch") && Catch::Contains("does not exist"));
    }
  }

  // Someone's label with a newline and a terminal escape sequence.
  boost::process::child sleeper("/bin/sleep", "60");
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms()) +
                          ",\"label\":\"evil\\n\\u001b[2Jlabel\"}");
  auto st = run_cli({"--lock", d.lock(), "status"});
  CHECK(st.code == 0);
  CHECK(std::count(st.out.begin(), st.out.end(), '\n') == 2);  // the status line and the path
  CHECK(st.out.find('\x1b') == std::string::npos);
  CHECK_THAT(st.out, Catch::Contains("evil\\n\\x1b[2Jlabel"));
  auto busy = run_cli({"--lock", d.lock(), "acquire", "--wait", "0"});
  CHECK(busy.code == 1);
  one_line_error(busy);
  CHECK(busy.err.find('\x1b') == std::string::npos);
  sleeper.terminate();
  sleeper.wait();
}

TEST_CASE("cli: every malformed duration, pid, flag and missing value exits 2 with one line", "[multiprocess][bad-input][cli]") {
  std::vector<std::vector<std::string>> bad;
  const std::vector<std::string> durations = {"", "-1", "+5", "1e3", "abc", "5x", "5 s", "1..2", ".", "ms", "inf",
                                              "nan", "0x10", "99999999999999999999", "1w", "1h1h", "1\n2"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> duration_flags = {
      {"--wait", {"acquire"}}, {"--wait", {"run", "--"}}, {"--wait", {"hold"}}, {"--wait", {"wait-free"}},
      {"--poll", {"wait-free"}}};
  for (const auto& v : durations) {
    bad.push_back({"--ttl", v, "status"});
    for (const auto& [flag, cmd] : duration_flags) {
      std::vector<std::string> a = {cmd[0], flag, v};
      if (cmd[0] == "run") a.insert(a.end(), {"--", "true"});
      bad.push_back(a);
    }
  }
  for (const char* v : {"", "0", "-1", "2147483648", "12a", "1.0", " 1", "99999999999", "0x10", "1\n"}) {
    bad.push_back({"acquire", "--pid", v});
    bad.push_back({"release", "--pid", v});
  }
  // Every flag that takes a value, given none.
  for (const auto& a : std::vector<std::vector<std::string>>{
           {"status", "--lock"}, {"status", "--ttl"}, {"acquire", "--wait"}, {"acquire", "--pid"},
           {"acquire", "--label"}, {"release", "--token"}, {"release", "--pid"}, {"run", "--busy-exit"},
           {"run", "--on-lost"}, {"wait-free", "--poll"}, {"hold", "--wait"}})
    bad.push_back(a);
  // Flags that do not belong, unknown flags and commands, missing commands.
  for (const auto& a : std::vector<std::vector<std::string>>{
           {}, {"--json"}, {"nope"}, {"no\nsuch"}, {"--bogus", "status"}, {"status", "--force"}, {"path", "--wait", "1"},
           {"hold", "--pid", "1"}, {"status", "extra"}, {"run"}, {"run", "--"}, {"run", "--on-lost", "maybe", "--", "true"},
           {"run", "--busy-exit", "256", "--", "true"}, {"release", "--pid", "1", "--token", "t"}, {"--lock", "", "status"},
           {"acquire", "--label", std::string(2000, 'x')}})
    bad.push_back(a);
  for (const auto& a : bad) {
    std::string joined;
    for (const auto& s : a) joined += "[" + s + "] ";
    INFO(joined);
    auto r = run_cli(a);
    CHECK(r.code == 2);
    one_line_error(r);
    CHECK(r.out.empty());
  }
}

TEST_CASE("out of space while writing meta.json: the partial lock is removed and the error named", "[multiprocess][bad-input]") {
  if (!running_as_root()) OLT_NOT_RUN("needs root to mount a small tmpfs");
  temp_dir d;
  const fs::path mnt = d.path / "small";
  fs::create_directory(mnt);
  // In a mount namespace of its own, so the tmpfs goes away with it: fill a
  // 64 KiB tmpfs, then take the lock there (renameat2, then the mkdir fallback).
  for (bool fallback : {false, true}) {
    INFO((fallback ? "mkdir fallback" : "renameat2"));
    const std::string script =
        "mount -t tmpfs -o size=64k tmpfs \"$1\" || exit 99; "
        "head -c 1048576 /dev/zero > \"$1/fill\" 2>/dev/null; "
        "\"$2\" --lock \"$1/gpu.lock\" run --wait 0 -- true; code=$?; "
        "ls -A \"$1\" >&2; exit $code";
    child c("/usr/bin/unshare", {"-m", "sh", "-c", script, "sh", mnt.string(), cli_exe()},
            {{"OFFLOAD_LOCK_NO_RENAMEAT2", fallback ? std::optional<std::string>("1") : std::nullopt}});
    c.close_stdin();
    auto code = c.wait(30s);
    std::string err = c.err_text();
    INFO(err);
    REQUIRE(code != 99);
    CHECK(code == 4);
    CHECK_THAT(err, Catch::Contains("offload-lock: ") && Catch::Contains(mnt.string() + "/gpu.lock") &&
                        Catch::Contains("No space left on device"));
    // What ls printed: the filler alone; no lock, no staging directory.
    CHECK(err.substr(err.find('\n') + 1) == "fill\n");
  }
}

TEST_CASE("a lock directory removed while it is listed is absent, not unknown", "[multiprocess][bad-input]") {
  // A claim without meta.json yet (a v1 runner between its mkdir and its
  // write): its contents are listed. Removed after the open and before the
  // listing, the directory lists as ENOENT; that is no failure to read but
  // the lock gone.
  temp_dir d;
  fs::create_directory(d.lock());
  child st(cli_exe(), {"--lock", d.lock(), "status"}, {{"OFFLOAD_LOCK_TEST_STOP_AT", "look.listing"}});
  REQUIRE(eventually([&] { return process_state(st.pid()) == 'T'; }, 60s));
  fs::remove(d.lock());
  st.kill(SIGCONT);
  const auto code = st.wait(60s);
  INFO(st.err_text());
  CHECK(code == std::optional<int>(1));
  CHECK(st.err_text().find("cannot tell") == std::string::npos);
}
