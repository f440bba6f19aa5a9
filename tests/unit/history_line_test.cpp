// One line of the history: what a writer appends reads back as the same
// entry, and every shape of line the writer never makes, hostile ones
// included, is refused as malformed.
#include <catch2/catch.hpp>

#include "history_line.hpp"

using namespace offload_lock;
using namespace offload_lock::detail;

namespace {

history_entry sample() {
  history_entry e;
  e.at = 1764470000123;
  e.uid = 1000;
  e.event = "acquire";
  e.outcome = "acquired";
  e.pid = 4242;
  e.label = "render \"video\" \\ 1";
  e.host = "gpu1";
  e.gpu = 2;
  e.priority = -10;
  e.token = "0123456789abcdef0123456789abcdef";
  e.since = 1764470000000;
  e.waited_ms = 123;
  e.expect_ms = 60000;
  return e;
}

bool parses(const std::string& line) {
  history_entry e;
  return parse_history_line(line, e);
}

}  // namespace

TEST_CASE("a history line reads back as the entry it was written from", "[unit][history]") {
  history_entry e = sample();
  const std::string line = history_line(e);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(line.rfind("{\"v\":1,\"at\":1764470000123,", 0) == 0);
  CHECK(history_line_at(line) == 1764470000123);
  history_entry r;
  REQUIRE(parse_history_line(std::string_view(line).substr(0, line.size() - 1), r));
  CHECK(r.at == e.at);
  CHECK(r.uid == 1000u);
  CHECK(r.event == "acquire");
  CHECK(r.outcome == "acquired");
  CHECK(r.pid == 4242);
  CHECK(r.label == e.label);
  CHECK(r.host == "gpu1");
  CHECK(r.gpu == 2);
  CHECK(r.priority == -10);
  CHECK(r.token == e.token);
  CHECK(r.since == e.since);
  CHECK(r.waited_ms == 123);
  CHECK(r.held_ms == -1);
  CHECK(r.expect_ms == 60000);
  CHECK_FALSE(r.holder_uid);

  SECTION("a takeover, with the reporter and the dead holder's owner") {
    history_entry t;
    t.at = 5;
    t.event = "hold";
    t.outcome = "crashed";
    t.pid = 77;
    t.reason = "holder pid 77 is not running";
    t.other_pid = 88;
    t.other_label = "offload-lock";
    t.holder_uid = 1001;
    t.held_ms = 0;
    t.yield_asked = true;
    const std::string l = history_line(t);
    history_entry b;
    REQUIRE(parse_history_line(std::string_view(l).substr(0, l.size() - 1), b));
    CHECK(b.gpu == -1);  // written as null
    CHECK(b.reason == t.reason);
    CHECK(b.other_pid == 88);
    CHECK(b.other_label == "offload-lock");
    CHECK(b.holder_uid == 1001u);
    CHECK(b.held_ms == 0);
    CHECK(b.yield_asked);
  }
}

TEST_CASE("a history line is one line of valid UTF-8 whatever the label holds", "[unit][history]") {
  history_entry e = sample();
  // Built in place: GCC 12 warns (-Warray-bounds, falsely) at operator+ on
  // these temporaries.
  e.label = "a\nb\rc\x1b[31md\x7f\xff\xc3";
  e.label.append("\xe2\x80\xae").append(5000, 'x');
  const std::string line = history_line(e);
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(line.find('\r') == std::string::npos);
  CHECK(line.find('\x1b') == std::string::npos);
  CHECK(line.find('\x7f') == std::string::npos);
  CHECK(line.size() < history_line_cap);  // the label is cut
  history_entry r;
  REQUIRE(parse_history_line(std::string_view(line).substr(0, line.size() - 1), r));
  CHECK(r.label.rfind("a\nb\rc\x1b[31md\x7f\xef\xbf\xbd", 0) == 0);  // 0xff repaired to U+FFFD
  CHECK(r.label.size() <= 1024 + 8);
}

TEST_CASE("lines the writer never makes are malformed", "[unit][history]") {
  const std::string ok = R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1})";
  CHECK(parses(ok));
  CHECK(parses(R"({"v":1,"at":5,"event":"hold","outcome":"max-hold","uid":0,"pid":1,"future":"kept out","n":-3,"b":true,"z":null})"));
  for (const char* bad : {
           "",
           "not json",
           R"({"v":1,"at":5,"event":"acquire","uid":0})",                       // no pid
           R"({"v":1,"at":5,"uid":0,"pid":1})",                                 // no event
           R"({"at":5,"event":"acquire","uid":0,"pid":1})",                     // no version
           R"({"v":2,"at":5,"event":"acquire","uid":0,"pid":1})",               // another version
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"uid":1})",       // a key twice
           R"({"v":1,"at":5.5,"event":"acquire","uid":0,"pid":1})",             // a fraction
           R"({"v":1,"at":5e3,"event":"acquire","uid":0,"pid":1})",             // an exponent
           R"({"v":1,"at":05,"event":"acquire","uid":0,"pid":1})",              // a leading zero
           R"({"v":1,"at":-5,"event":"acquire","uid":0,"pid":1})",              // before the epoch
           R"({"v":1,"at":5,"event":"acquire","uid":-1,"pid":1})",              // no such uid
           R"({"v":1,"at":5,"event":"acquire","uid":"0","pid":1})",             // a uid as a string
           R"({"v":1,"at":5,"event":"Acquire!","uid":0,"pid":1})",              // not a word
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"x":{"a":1}})",  // nested
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"x":[1]})",      // an array
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"label":"\q"})",  // a bad escape
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"priority":101})",  // out of range
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"gpu":1024})",
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1}x)",              // trailing garbage
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1)",                // cut short
           R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,})",              // a trailing comma
       })
    CHECK_FALSE(parses(bad));
  // A raw control character inside a string is not JSON.
  CHECK_FALSE(parses(std::string(R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"label":"a)") + '\x01' + "\"}"));
  // Longer than any line the writer makes.
  CHECK_FALSE(parses(R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"label":")" + std::string(history_line_cap, 'x') + "\"}"));
}

TEST_CASE("escapes in a history line decode as JSON's", "[unit][history]") {
  history_entry e;
  REQUIRE(parse_history_line(
      R"({"v":1,"at":5,"event":"acquire","uid":0,"pid":1,"label":"\u0041\n\ud83d\ude00\ud800x\/"})", e));
  CHECK(e.label == "A\n\xf0\x9f\x98\x80\xef\xbf\xbdx/");
  CHECK(history_line_at(R"({"v":1,"at":77,"event":"x"})") == 77);
  CHECK_FALSE(history_line_at(R"({"at":77,"v":1})"));
  CHECK_FALSE(history_line_at(R"({"v":1,"at":7x})"));
}
