// gpulease claims, row by row: what Go's json.Unmarshal into gpulease's
// record type accepts and what it makes of it (each row was checked
// against Go 1.19's encoding/json; tests/interop/lease_parse.test.mjs runs
// the same kind of corpus through the Go stand-in), and the bytes
// offload-lock writes.
#include <catch2/catch.hpp>
#include <string>

#include "gpulease/record.hpp"

using namespace offload_lock::detail::gpulease;

namespace {

std::string nest(int depth) { return "{\"x\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}"; }

}  // namespace

TEST_CASE("lease claims parse as Go parses them", "[unit][lease]") {
  struct row {
    std::string name, bytes;
    bool ok;
    std::uint64_t epoch = 0;
    std::int64_t pid = 0, start = 0;
    std::string cls = {}, reason = {};
  };
  const std::string full =
      R"({"epoch":7,"class":"media","holder":{"pid":42,"start_time_ms":9001},"reason":"render","acquired_at_ms":1,"expires_at_ms":2,"renewed_at_ms":3})";
  std::vector<row> rows = {
      {"gpulease's own bytes", full, true, 7, 42, 9001, "media", "render"},
      {"null is no error and all zero", "null", true},
      {"white space around the value", " \t\r\n{\"epoch\":3}\n", true, 3},
      {"keys fold case", R"({"EPOCH":4,"Class":"text","HOLDER":{"PID":5}})", true, 4, 5, 0, "text"},
      {"the long s and the Kelvin sign fold to ASCII",
       "{\"holder\":{\"\xC5\xBFtart_time_m\xC5\xBF\":7},\"rea\xC5\xBFon\":\"\xE2\x84\xAA\"}", true, 0, 0, 7, "",
       "\xE2\x84\xAA"},
      {"the last occurrence wins", R"({"epoch":1,"EPOCH":2})", true, 2},
      {"holders merge field by field", R"({"Holder":{"Pid":4},"epoch":2,"holder":{"start_time_ms":9}})", true, 2, 4, 9},
      {"a type error is an error even when a later key is fine", R"({"epoch":"x","epoch":5})", false},
      {"a type error after a good key too", R"({"epoch":5,"epoch":"x"})", false},
      {"a type error inside the holder", R"({"epoch":5,"holder":{"pid":"x"},"epoch":6})", false},
      {"null leaves a field alone", R"({"epoch":3,"epoch":null,"holder":null,"class":null})", true, 3},
      {"unknown keys are ignored, whatever they hold",
       R"({"epoch":1,"x":{"a":[1,2,{"b":null}]},"pid":"s","startedAt":1.5})", true, 1},
      {"an epoch of -0 is an error (unsigned)", R"({"epoch":-0})", false},
      {"a pid of -0 is 0", R"({"holder":{"pid":-0}})", true},
      {"a negative pid", R"({"holder":{"pid":-3}})", true, 0, -3},
      {"an exponent is not an integer", R"({"epoch":1e0})", false},
      {"a fraction is not an integer", R"({"acquired_at_ms":1.0})", false},
      {"the largest epoch", R"({"epoch":18446744073709551615})", true, 18446744073709551615ULL},
      {"one past it", R"({"epoch":18446744073709551616})", false},
      {"the largest pid", R"({"holder":{"pid":9223372036854775807}})", true, 0, 9223372036854775807LL},
      {"one past it", R"({"holder":{"pid":9223372036854775808}})", false},
      {"an array for the holder", R"({"holder":[]})", false},
      {"a number for the holder", R"({"epoch":5,"holder":5})", false},
      {"an object for a string", R"({"class":{}})", false},
      {"a number for a string", R"({"reason":5})", false},
      {"a boolean for a number", R"({"epoch":true})", false},
      {"an array at the top", "[]", false},
      {"a number at the top", "5", false},
      {"a string at the top", "\"x\"", false},
      {"empty", "", false},
      {"a byte-order mark", "\xEF\xBB\xBF{}", false},
      {"trailing bytes", R"({"epoch":1}x)", false},
      {"two values", "{} {}", false},
      {"a comment", "{/*x*/}", false},
      {"invalid UTF-8 is read as U+FFFD",
       "{\"reason\":\"a\xFF"
       "b\"}",
       true, 0, 0, 0, "",
       "a\xEF\xBF\xBD"
       "b"},
      {"one U+FFFD per bad byte", "{\"reason\":\"\xE2\x82\"}", true, 0, 0, 0, "", "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"a lone high surrogate is U+FFFD", R"({"reason":"\ud800x"})", true, 0, 0, 0, "", "\xEF\xBF\xBDx"},
      {"a lone low surrogate, then a pair", R"({"reason":"\udc00\ud800\udc00"})", true, 0, 0, 0, "",
       "\xEF\xBF\xBD\xF0\x90\x80\x80"},
      {"a high surrogate before a letter escape", R"({"reason":"\ud800\u0041"})", true, 0, 0, 0, "",
       "\xEF\xBF\xBD"
       "A"},
      {"NUL escaped in a string", R"({"class":"\u0000"})", true, 0, 0, 0, std::string(1, '\0')},
      {"a raw control character", "{\"class\":\"\x01\"}", false},
      {"nesting at Go's limit", nest(10000), true},
      {"nesting one past it", nest(10001), false},
      {"a v1 record parses with nothing of the lease", R"({"pid":4242,"startedAt":1764470000000,"token":"t"})", true},
  };
  for (const auto& r : rows) {
    INFO(r.name);
    auto got = parse_record(r.bytes);
    REQUIRE(got.has_value() == r.ok);
    if (!r.ok) continue;
    CHECK(got->epoch == r.epoch);
    CHECK(got->pid == r.pid);
    CHECK(got->start_ticks == r.start);
    CHECK(got->lease_class == r.cls);
    CHECK(got->reason == r.reason);
  }
}

TEST_CASE("lease claims are written as gpulease writes them", "[unit][lease]") {
  record r;
  r.epoch = 3;
  r.lease_class = "media";
  r.pid = 5;
  r.start_ticks = 6;
  r.reason = "a<b>&\xE2\x80\xA8\xFF\"\\\x01\n";
  r.acquired_at_ms = 1;
  r.expires_at_ms = 2;
  r.renewed_at_ms = 3;
  // Go 1.19's json.Marshal of the same record, byte for byte.
  CHECK(
      serialize_record(r) ==
      R"({"epoch":3,"class":"media","holder":{"pid":5,"start_time_ms":6},"reason":"a\u003cb\u003e\u0026\u2028\ufffd\"\\\u0001\n","acquired_at_ms":1,"expires_at_ms":2,"renewed_at_ms":3})");
  r.reason.clear();
  r.job_id = "j";
  r.origin = "o";
  CHECK(
      serialize_record(r) ==
      R"({"epoch":3,"class":"media","holder":{"pid":5,"start_time_ms":6},"job_id":"j","origin":"o","acquired_at_ms":1,"expires_at_ms":2,"renewed_at_ms":3})");
  auto back = parse_record(serialize_record(r));
  REQUIRE(back);
  CHECK(back->job_id == "j");
  CHECK(back->origin == "o");
  CHECK(back->renewed_at_ms == 3);
}

TEST_CASE("one meta.json for both protocols", "[unit][lease]") {
  record r;
  r.epoch = 9;
  r.lease_class = "text";
  r.pid = 4242;
  const std::string v1 = R"({"pid":4242,"startedAt":1764470000000,"token":"abc"})";
  const std::string both = append_record(v1, r);
  // The v1 prefix is untouched (doc/protocol.md B2), the lease's keys follow.
  CHECK(both.rfind(R"({"pid":4242,"startedAt":1764470000000,"token":"abc","epoch":9,"class":"text",)", 0) == 0);
  auto back = parse_record(both);
  REQUIRE(back);
  CHECK(back->epoch == 9);
  CHECK(back->pid == 4242);
  CHECK(append_record("{}", r) == serialize_record(r));
  CHECK(append_record(" { } ", r) == serialize_record(r));
}

TEST_CASE("heartbeats and counters parse as strconv does", "[unit][lease]") {
  CHECK(parse_go_int("1764470000000") == 1764470000000);
  CHECK(parse_go_int(" \t+42\n") == 42);
  CHECK(parse_go_int("-42") == -42);
  CHECK(parse_go_int("\xC2\xA0"
                     "7\xE3\x80\x80") == 7);  // NBSP and the ideographic space are white space to Go
  CHECK(parse_go_int("9223372036854775807") == INT64_MAX);
  CHECK(parse_go_int("-9223372036854775808") == INT64_MIN);
  CHECK_FALSE(parse_go_int("9223372036854775808"));
  CHECK_FALSE(parse_go_int(""));
  CHECK_FALSE(parse_go_int("+"));
  CHECK_FALSE(parse_go_int("1_000"));
  CHECK_FALSE(parse_go_int("0x10"));
  CHECK_FALSE(parse_go_int("12 3"));
  CHECK_FALSE(parse_go_int("1.5"));
  CHECK(parse_go_uint("17\n") == 17u);
  CHECK(parse_go_uint("18446744073709551615") == UINT64_MAX);
  CHECK_FALSE(parse_go_uint("18446744073709551616"));
  CHECK_FALSE(parse_go_uint("+1"));
  CHECK_FALSE(parse_go_uint("-0"));
  CHECK_FALSE(parse_go_uint(" "));
  CHECK(trim_space("\xC2\x85x\xE2\x80\xAF") == "x");
  CHECK(trim_space("\xE2\x80\x8B"
                   "x") ==
        "\xE2\x80\x8B"
        "x");  // U+200B is not white space
}
