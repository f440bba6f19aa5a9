// meta.json bytes: what offload-lock writes (B2, B8) and how each
// participant reads whatever it finds (A3 readMeta, A5 json.Unmarshal).
#include <catch2/catch.hpp>
#include <regex>

#include "meta.hpp"

using namespace offload_lock::detail;

TEST_CASE("serialize writes the Node bytes first, then the extra keys", "[unit][meta]") {
  meta_record r;
  r.pid = 4242;
  r.started_at = 1764470000123;
  r.token = "abc";
  r.label = "render \"video\"";
  r.host = "gpu1";
  r.boot_id = "b-1";
  r.proc_start = 1764469999000;
  r.proc_ticks = 777;
  std::string s = serialize(r);
  // The prefix the Node runners write, byte for byte (B2).
  REQUIRE(s.rfind("{\"pid\":4242,\"startedAt\":1764470000123,", 0) == 0);
  CHECK(s.find(' ') == s.find("render") + 6);  // the only space is inside the label
  CHECK(s.back() == '}');
  CHECK(s.find('\n') == std::string::npos);
  parsed_meta m = parse_meta(s);
  CHECK(m.parsed);
  CHECK_FALSE(m.node_null);
  CHECK(m.js_pid == 4242.0);
  CHECK(m.started_at == 1764470000123);
  CHECK(m.token == "abc");
  CHECK(m.label == "render \"video\"");
  CHECK(m.host == "gpu1");
  CHECK(m.boot_id == "b-1");
  CHECK(m.proc_start == 1764469999000);
  CHECK(m.proc_ticks == 777u);
  CHECK(m.tool.rfind("offload-lock/", 0) == 0);
  CHECK(m.go_ok);
  CHECK(m.go_pid == 4242);
}

TEST_CASE("serialize never throws on a label with invalid UTF-8", "[unit][meta]") {
  meta_record r;
  r.label = "bad \xff label";
  std::string s;
  REQUIRE_NOTHROW(s = serialize(r));
  CHECK(parse_meta(s).label == "bad \xEF\xBF\xBD label");
}

TEST_CASE("parse_meta reads every v1 input as Node and Go do", "[unit][meta]") {
  struct row {
    const char* name;
    std::string bytes;
    bool parsed, node_null;
    std::optional<double> js_pid;
    bool go_ok;
    std::int64_t go_pid;
  };
  std::vector<row> rows = {
      {"Node's own bytes", R"({"pid":123,"startedAt":1700000000000})", true, false, 123.0, true, 123},
      {"empty", "", false, true, {}, false, 0},
      {"partial write", R"({"pid":12)", false, true, {}, false, 0},
      {"not JSON", "hello", false, true, {}, false, 0},
      {"byte-order mark", "\xEF\xBB\xBF{\"pid\":1,\"startedAt\":2}", false, true, {}, false, 0},
      {"trailing garbage", R"({"pid":1,"startedAt":2}x)", false, true, {}, false, 0},
      {"surrounding whitespace is fine", " \n{\"pid\":1,\"startedAt\":2}\n ", true, false, 1.0, true, 1},
      {"null: Node stale, Go pid 0", "null", true, true, {}, true, 0},
      {"array: Node truthy without pid, Go error", "[]", true, false, {}, false, 0},
      {"false", "false", true, true, {}, false, 0},
      {"zero", "0", true, true, {}, false, 0},
      {"empty string", "\"\"", true, true, {}, false, 0},
      {"number 1: truthy, no pid", "1", true, false, {}, false, 0},
      {"pid as string: no pid for Node, Go error", R"({"pid":"123","startedAt":1})", true, false, {}, false, 0},
      {"pid 1.5: a number for Node, Go error", R"({"pid":1.5,"startedAt":1})", true, false, 1.5, false, 0},
      {"pid 123.0: 123 for Node, Go error", R"({"pid":123.0,"startedAt":1})", true, false, 123.0, false, 0},
      {"pid 0", R"({"pid":0,"startedAt":1})", true, false, 0.0, true, 0},
      {"pid negative", R"({"pid":-5,"startedAt":1})", true, false, -5.0, true, -5},
      {"pid above 2^31", R"({"pid":4294967296,"startedAt":1})", true, false, 4294967296.0, true, 4294967296},
      {"pid missing", R"({"startedAt":1})", true, false, {}, true, 0},
      {"pid null: Go leaves 0", R"({"pid":null,"startedAt":1})", true, false, {}, true, 0},
      {"PID in capitals: Go matches it, Node does not", R"({"PID":7,"startedAt":1})", true, false, {}, true, 7},
      {"startedAt string: Go error", R"({"pid":1,"startedAt":"x"})", true, false, 1.0, false, 1},
      {"startedAt missing", R"({"pid":1})", true, false, 1.0, true, 1},
      {"extra keys ignored", R"({"pid":9,"startedAt":1,"zzz":[1,2,{"a":null}]})", true, false, 9.0, true, 9},
      {"duplicate pid: the last wins", R"({"pid":1,"pid":2,"startedAt":1})", true, false, 2.0, true, 2},
      {"1e400 overflows", R"({"pid":1e400})", false, true, {}, false, 0},
      {"invalid UTF-8 outside strings", "{\"pid\":1,\xff}", false, true, {}, false, 0},
  };
  for (const auto& r : rows) {
    SECTION(r.name) {
      parsed_meta m = parse_meta(r.bytes);
      CHECK(m.parsed == r.parsed);
      CHECK(m.node_null == r.node_null);
      CHECK(m.js_pid == r.js_pid);
      CHECK(m.go_ok == r.go_ok);
      if (r.go_ok) CHECK(m.go_pid == r.go_pid);
    }
  }
}

TEST_CASE("parse_meta reads invalid UTF-8 inside strings as U+FFFD, like Node and Go", "[unit][meta]") {
  parsed_meta m = parse_meta("{\"pid\":5,\"startedAt\":1,\"label\":\"a\xff\xfe" "b\"}");
  CHECK(m.parsed);
  CHECK(m.js_pid == 5.0);
  CHECK(m.label == "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
}

TEST_CASE("repair_utf8 replaces maximal subparts", "[unit][meta]") {
  const std::string r = "\xEF\xBF\xBD";
  CHECK(repair_utf8("plain") == "plain");
  CHECK(repair_utf8("\xC3\xA9") == "\xC3\xA9");                 // é stays
  CHECK(repair_utf8("\xE2\x82") == r);                          // truncated 3-byte: one U+FFFD
  CHECK(repair_utf8("\xE2\x82x") == r + "x");
  CHECK(repair_utf8("\xED\xA0\x80") == r + r + r);              // a surrogate: each byte
  CHECK(repair_utf8("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");  // emoji stays
  CHECK(repair_utf8("\xC0\xAF") == r + r);                      // overlong
}

TEST_CASE("parse_meta refuses pathological nesting without recursing", "[unit][meta]") {
  std::string deep(100000, '[');
  parsed_meta m = parse_meta(deep + std::string(100000, ']'));
  CHECK_FALSE(m.parsed);
  CHECK(m.node_null);
  std::string ok = std::string(100, '[') + std::string(100, ']');
  CHECK(parse_meta(ok).parsed);
}

TEST_CASE("parse_meta takes a megabyte of data without trouble", "[unit][meta]") {
  std::string big = "{\"pid\":3,\"startedAt\":1,\"pad\":\"" + std::string(1000000, 'x') + "\"}";
  parsed_meta m = parse_meta(big);
  CHECK(m.parsed);
  CHECK(m.js_pid == 3.0);
}
