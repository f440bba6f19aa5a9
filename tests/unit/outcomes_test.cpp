// The one table of outcomes (src/cli/exit_codes.hpp) against every other
// place that numbers the same outcomes: the C API's header and behaviour,
// offload_lock::errc, compat/node's exitCodes, compat/go's gpulock-inspect
// and doc/command.md's exit-code table. Each test case fails when its side drifts.
#include <unistd.h>

#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cli/exit_codes.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/offload_lock.h"
#include "support.hpp"

namespace cli = offload_lock::cli;
namespace ol = offload_lock;
using namespace olt;

namespace {

const fs::path source_dir = OFFLOAD_LOCK_SOURCE_DIR;

const cli::outcome* row_named(std::string_view name) {
  for (const auto& o : cli::outcomes)
    if (o.name == name) return &o;
  return nullptr;
}

// The row holding `e`, and where in it.
const cli::outcome* row_of(ol::errc e, std::size_t& index) {
  for (const auto& o : cli::outcomes)
    for (std::size_t k = 0; k < o.errcs.size(); ++k)
      if (o.errcs[k] == e) {
        index = k;
        return &o;
      }
  return nullptr;
}

// not_owner -> notOwner
std::string camel_case(std::string_view snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

// The C API's result constants as offload_lock.h spells them: NAME = N.
std::map<std::string, int> c_header_constants() {
  std::map<std::string, int> out;
  std::stringstream text(read_file(source_dir / "include/offload_lock/offload_lock.h"));
  const std::regex member(R"(^\s*(OFFLOAD_LOCK_[A-Z_]+)\s*=\s*(-?[0-9]+))");
  // The enum after "/* Results. */" (flags are declared in enums of their own).
  bool in_results = false;
  for (std::string line; std::getline(text, line);) {
    if (line.find("/* Results. */") != std::string::npos) in_results = true;
    if (!in_results) continue;
    std::smatch m;
    if (std::regex_search(line, m, member)) out[m[1]] = std::stoi(m[2]);
    if (line.find("};") != std::string::npos) break;
  }
  return out;
}

// The C API's result for an acquisition of `lock`, from another thread (the
// thread that holds a lock would pass straight through, B10).
int c_acquire(const std::string& lock, std::int64_t wait_ms, offload_lock_handle** out) {
  int rc = -1;
  std::thread t([&] { rc = offload_lock_acquire(lock.c_str(), wait_ms, "outcomes", out, nullptr, 0); });
  t.join();
  return rc;
}

std::string node_exe() {
  if (const char* env = ::getenv("OFFLOAD_LOCK_NODE"); env && *env) return env;
#ifdef OFFLOAD_LOCK_NODE
  return OFFLOAD_LOCK_NODE;
#else
  return boost::process::search_path("node").string();
#endif
}

}  // namespace

TEST_CASE("outcomes: one row per exit code, named constants from the table", "[unit]") {
  std::set<int> codes;
  std::set<std::string_view> names;
  for (const auto& o : cli::outcomes) {
    CHECK(codes.insert(o.exit_code).second);
    CHECK(names.insert(o.name).second);
    CHECK_FALSE(o.meaning.empty());
  }
  CHECK(cli::exit_ok == 0);
  CHECK(cli::exit_busy == 1);
  CHECK(cli::exit_usage == 2);
  CHECK(cli::exit_not_owner == 3);
  CHECK(cli::exit_system == 4);
  CHECK(cli::exit_lost == 5);
}

TEST_CASE("outcomes: the table against the C API (offload_lock.h and what it returns)", "[unit]") {
  // Every constant of the header is in exactly one row, with its value.
  const std::map<std::string, int> header = c_header_constants();
  REQUIRE(header.size() >= 6);
  std::map<std::string, int> table;
  for (const auto& o : cli::outcomes)
    for (const auto& c : o.c_api)
      if (!c.name.empty()) CHECK(table.emplace(std::string(c.name), c.value).second);
  // And the codes of outcomes that end the command with a signal's status.
  for (const auto& c : cli::c_api_only) CHECK(table.emplace(std::string(c.c.name), c.c.value).second);
  for (const auto& [name, value] : header) {
    INFO("offload_lock.h: " << name << " = " << value);
    REQUIRE(table.count(name));
    CHECK(table.at(name) == value);
  }
  CHECK(table.size() == header.size());
  // The same through the compiler, for the constants known here.
  const std::map<std::string, int> compiled = {
      {"OFFLOAD_LOCK_OK", OFFLOAD_LOCK_OK},       {"OFFLOAD_LOCK_BUSY", OFFLOAD_LOCK_BUSY},
      {"OFFLOAD_LOCK_TIMED_OUT", OFFLOAD_LOCK_TIMED_OUT}, {"OFFLOAD_LOCK_LOST", OFFLOAD_LOCK_LOST},
      {"OFFLOAD_LOCK_ERROR", OFFLOAD_LOCK_ERROR}, {"OFFLOAD_LOCK_INVALID", OFFLOAD_LOCK_INVALID}};
  for (const auto& [name, value] : compiled) {
    INFO(name);
    REQUIRE(table.count(name));
    CHECK(table.at(name) == value);
  }

  // Where a row pairs an errc with a C code, the C API returns that code
  // for that outcome.
  auto c_code_of = [](ol::errc e) {
    std::size_t k = 0;
    const cli::outcome* o = row_of(e, k);
    REQUIRE(o);
    REQUIRE_FALSE(o->c_api[k].name.empty());
    return o->c_api[k].value;
  };
  temp_dir d;
  make_lock(d.lock(), R"({"pid":)" + std::to_string(::getppid()) + R"(,"startedAt":)" + std::to_string(now_ms()) +
                          "}");
  offload_lock_handle* h = nullptr;
  CHECK(c_acquire(d.lock(), 0, &h) == c_code_of(ol::errc::busy));
  CHECK(c_acquire(d.lock(), 20, &h) == c_code_of(ol::errc::timed_out));
  CHECK(c_acquire(d.lock(), 0, nullptr) == c_code_of(ol::errc::bad_input));
  const std::string mine = (d.path / "mine.lock").string();
  REQUIRE(c_acquire(mine, 0, &h) == row_named("ok")->c_api[0].value);
  REQUIRE(h);
  fs::remove_all(mine);
  CHECK(offload_lock_release(h) == c_code_of(ol::errc::lost));
}

TEST_CASE("outcomes: the table against offload_lock::errc", "[unit]") {
  // Every errc the library's category knows is in exactly one row, except
  // cancelled, which ends like the signal that cancelled (128+N).
  const std::string unknown = ol::category().message(9999);
  std::set<int> known;
  for (int v = 1; v < 64; ++v)
    if (ol::category().message(v) != unknown) known.insert(v);
  REQUIRE(known.size() >= 5);  // busy, timed_out, lost, bad_input, cancelled
  std::set<int> in_table;
  for (const auto& o : cli::outcomes)
    for (ol::errc e : o.errcs)
      if (e != ol::errc{}) {
        CHECK(in_table.insert(static_cast<int>(e)).second);
        CHECK(cli::exit_code_for(e) == o.exit_code);
        CHECK(cli::exit_code_for(ol::error(e, "context")) == o.exit_code);
      }
  in_table.insert(static_cast<int>(ol::errc::cancelled));
  CHECK(in_table == known);
  CHECK(cli::exit_signal_base == 128);
  // Errors of the operating system are system errors.
  CHECK(cli::exit_code_for(ol::error(std::make_error_code(std::errc::permission_denied), "x")) == cli::exit_system);
}

TEST_CASE("outcomes: the table against compat/node's exitCodes", "[unit]") {
  const fs::path index = source_dir / "compat/node/index.mjs";
  child node(node_exe(),
             {"--input-type=module", "-e",
              "const { pathToFileURL } = await import('node:url');"
              "const m = await import(pathToFileURL(process.argv[1]).href);"
              "console.log(JSON.stringify(m.exitCodes ?? null));",
              index.string()});
  node.close_stdin();
  auto line = node.read_line(30s);
  auto status = node.wait(30s);
  INFO(node.err_text());
  REQUIRE(status == 0);
  REQUIRE(line);
  const nlohmann::json got = nlohmann::json::parse(*line);
  INFO("compat/node exitCodes: " << *line);
  REQUIRE(got.is_object());
  CHECK(got.size() == cli::outcomes.size());
  for (const auto& o : cli::outcomes) {
    const std::string key = camel_case(o.name);
    INFO(key);
    REQUIRE(got.contains(key));
    CHECK(got[key] == o.exit_code);
  }
}

TEST_CASE("outcomes: the table against compat/go's gpulock-inspect", "[unit]") {
  // gpulock-inspect answers "is it held?": held is the command's ok, free
  // its busy (as `status` exits), usage its usage.
  const std::map<std::string, std::string> meaning = {{"Held", "ok"}, {"Free", "busy"}, {"Usage", "usage"}};
  std::stringstream text(read_file(source_dir / "compat/go/cmd/gpulock-inspect/main.go"));
  const std::regex constant(R"(^\s*exit([A-Z][A-Za-z0-9]*)\s*=\s*([0-9]+)\s*$)");
  std::set<std::string> seen;
  for (std::string line; std::getline(text, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, constant)) continue;
    const std::string name = m[1];
    INFO("exit" << name << " = " << m[2]);
    REQUIRE(meaning.count(name));  // a new Go exit code needs its row here
    const cli::outcome* o = row_named(meaning.at(name));
    REQUIRE(o);
    CHECK(std::stoi(m[2]) == o->exit_code);
    seen.insert(name);
  }
  CHECK(seen.size() == meaning.size());
}

TEST_CASE("outcomes: the table against doc/command.md", "[unit]") {
  std::stringstream text(read_file(source_dir / "doc" / "command.md"));
  bool in_section = false;
  std::map<int, std::string> rows;
  const std::regex row(R"(^\| ([0-9]+) \| (.*) \|$)");
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Exit codes";
    std::smatch m;
    if (in_section && std::regex_match(line, m, row)) CHECK(rows.emplace(std::stoi(m[1]), m[2]).second);
  }
  REQUIRE_FALSE(rows.empty());
  CHECK(rows.size() == cli::outcomes.size());
  for (const auto& o : cli::outcomes) {
    INFO(o.name);
    REQUIRE(rows.count(o.exit_code));
    CHECK(rows.at(o.exit_code) == std::string(o.meaning));
  }
}
