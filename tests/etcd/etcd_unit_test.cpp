// The pure parts of etcd locks: URLs, base64 as the gateway writes it,
// records read as untrusted values, and the reckoning of another's lease's
// expiry.
#include <catch2/catch.hpp>

#include "etcd/address.hpp"
#include "etcd/client.hpp"
#include "etcd/expiry.hpp"
#include "etcd/record.hpp"

namespace etcd = offload_lock::detail::etcd;
using offload_lock::errc;

TEST_CASE("etcd URLs name endpoints and a lock, and anything else is refused by name", "[etcd][unit]") {
  auto a = etcd::parse_address("etcd://127.0.0.1:2379,[::1]:2380,etcd-b/gpu-server.1");
  REQUIRE(a);
  REQUIRE(a->endpoints.size() == 3);
  CHECK(a->endpoints[0].host == "127.0.0.1");
  CHECK(a->endpoints[0].port == 2379);
  CHECK(a->endpoints[1].host == "::1");
  CHECK(a->endpoints[1].port == 2380);
  CHECK(a->endpoints[2].port == 2379);  // etcd's client port when none is given
  CHECK(a->name == "gpu-server.1");
  CHECK(a->url() == "etcd://127.0.0.1:2379,[::1]:2380,etcd-b:2379/gpu-server.1");
  CHECK(a->holder_key() == "/offload-lock/lock/gpu-server.1/holder");
  CHECK(a->queue_prefix() == "/offload-lock/lock/gpu-server.1/queue/");

  for (const char* bad : {"etcd://", "etcd://h:1", "etcd://h:1/", "etcd://:1/x", "etcd://h:0/x", "etcd://h:65536/x",
                          "etcd://h:1x/x", "etcd://h:/x", "etcd://h,,g/x", "etcd://h/x/y", "etcd://h/x y",
                          "etcd://h/..", "etcd://h/\x1b[31m", "etcd://[::1/x", "etcd://h_b/x", "/tmp/x"}) {
    auto r = etcd::parse_address(bad);
    INFO(bad);
    REQUIRE(!r);
    CHECK(r.error() == errc::bad_input);
    // One line, and no control character of the input in it.
    CHECK(r.error().message().find('\n') == std::string::npos);
    CHECK(r.error().message().find('\x1b') == std::string::npos);
  }
  std::string many = "etcd://";
  for (int k = 0; k < 17; ++k) many += (k ? ",h" : "h") + std::to_string(k);
  CHECK(!etcd::parse_address(many + "/x"));
  CHECK(!etcd::parse_address("etcd://h/" + std::string(etcd::max_name + 1, 'a')));
  CHECK(etcd::is_etcd("etcd://x"));
  CHECK(!etcd::is_etcd("/tmp/etcd://x"));
}

TEST_CASE("base64 as the gateway writes keys and values, strictly read", "[etcd][unit]") {
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", "fooba", "foobar", std::string("\0\xff\x80", 3)}) {
    auto back = etcd::base64_decode(etcd::base64_encode(s));
    REQUIRE(back);
    CHECK(*back == s);
  }
  CHECK(etcd::base64_encode("foobar") == "Zm9vYmFy");
  CHECK(etcd::base64_encode("fo") == "Zm8=");
  for (const char* bad : {"Zm9", "Zm9v!", "Z=9v", "Zg==Zg==", "Zm8==", "====", "Zm9\n"}) {
    INFO(bad);
    CHECK(!etcd::base64_decode(bad));
  }
  CHECK(etcd::prefix_end("/a/") == "/a0");
  CHECK(etcd::prefix_end(std::string("a\xff", 2)) == "b");
}

TEST_CASE("a record written is read back, and a hostile value is unreadable, never trusted in part", "[etcd][unit]") {
  etcd::record r;
  r.pid = 42;
  r.since = 1'700'000'000'000;
  r.label = "render \"x\" \x1b[31m";
  r.host = "gpu-7";
  r.token = "abc_123";
  r.priority = -7;
  r.expect_ms = 60'000;
  r.max_hold_ms = 120'000;
  r.can_yield = true;
  r.tool = "offload-lock/0.2.0";
  const etcd::record back = etcd::decode(etcd::encode(r));
  CHECK(back.problem.empty());
  CHECK(back.pid == 42);
  CHECK(back.label == r.label);
  CHECK(back.token == "abc_123");
  CHECK(back.priority == -7);
  CHECK(back.expect_ms == 60'000);
  CHECK(back.can_yield);
  CHECK(etcd::encode(r).rfind("{\"pid\":42,\"startedAt\":1700000000000,", 0) == 0);

  for (std::string bad :
       {std::string("not json"), std::string("[1,2]"), std::string("{\"pid\":\"7\"}"), std::string("{\"pid\":-1}"),
        std::string("{\"pid\":99999999999}"), std::string("{\"priority\":101}"), std::string("{\"priority\":1.5}"),
        std::string("{\"label\":7}"), std::string("{\"token\":\"a b\"}"), std::string("{\"canYield\":\"yes\"}"),
        std::string("{\"expectMs\":18446744073709551615}"), std::string("{\"label\":\"\xff\xfe\"}"),
        "{\"label\":\"" + std::string(etcd::max_label_bytes + 1, 'x') + "\"}",
        std::string(etcd::max_record_bytes + 1, ' '), std::string(300, '[') + std::string(300, ']')}) {
    INFO(bad.substr(0, 60));
    const etcd::record h = etcd::decode(bad);
    CHECK(!h.problem.empty());
    CHECK(h.pid == 0);
    CHECK(h.label.empty());
    CHECK(h.priority == 0);
  }
}

TEST_CASE("another's lease counts as expired only after a chain of zero readings a second long, none renewed",
          "[etcd][unit]") {
  // Readings every 50 ms that take 2 ms each; the lease was granted 2 s.
  auto read = [](etcd::expiry_reckoner& r, std::int64_t at, std::int64_t left, std::int64_t granted = 2) {
    r.saw(at, at + 2, left, granted);
  };
  SECTION("a lease renewed in time never expires, and is read again as it nears its end") {
    etcd::expiry_reckoner r(7);
    CHECK(r.lease() == 7);
    read(r, 0, 5, 10);
    CHECK(r.next_reading() == 4000);  // 5 s or more left: below 1 s no sooner than 4 s on
    for (std::int64_t t = 4000; t < 20000; t += 50) {
      read(r, t, (t / 50) % 10 == 9 ? 0 : 1);  // a 0 now and then, renewed after it
      CHECK_FALSE(r.expired());
      CHECK(r.next_reading() == t + 2 + etcd::expiry_poll_ms);
    }
  }
  SECTION("zero readings for a second: expired, not before") {
    etcd::expiry_reckoner r(7);
    read(r, 0, 1);
    std::int64_t t = 50;
    for (; t < 1022; t += 50) {
      read(r, t, 0);
      CHECK_FALSE(r.expired());
    }
    read(r, 1072, 0);  // sent 1 s and the margin after the first one's answer (52)
    CHECK(r.expired());
  }
  SECTION("a renewal inside the chain starts it again") {
    etcd::expiry_reckoner r(7);
    for (std::int64_t t = 0; t <= 700; t += 50) read(r, t, 0);
    read(r, 750, 1);
    for (std::int64_t t = 800; t <= 1500; t += 50) read(r, t, 0);
    CHECK_FALSE(r.expired());
    read(r, 1800, 0);
    CHECK_FALSE(r.expired());  // sent 998 ms after the new chain's first answer (802)
    read(r, 1850, 0);
    CHECK(r.expired());
  }
  SECTION("a gap too long to have seen a renewal starts the chain again") {
    etcd::expiry_reckoner r(7);
    read(r, 0, 0);
    read(r, 990, 0);  // answered 992 after the last was sent at 0: over TTL - 1 s, less the margin
    read(r, 1100, 0);
    CHECK_FALSE(r.expired());
    // A longer TTL allows a longer gap: 0 then 1,100 ms later, granted 3 s.
    etcd::expiry_reckoner longer(8);
    read(longer, 0, 0, 3);
    read(longer, 1100, 0, 3);
    CHECK(longer.expired());
  }
  SECTION("a reading that failed, or says there is no such lease, breaks the chain and is never acted on") {
    etcd::expiry_reckoner r(7);
    for (std::int64_t t = 0; t <= 900; t += 50) read(r, t, 0);
    r.missed(1000);
    CHECK(r.next_reading() == 1000);
    read(r, 1100, 0);
    CHECK_FALSE(r.expired());
    // "No such lease" (a leader just elected that has not applied the
    // grant says so of a live one): not expired, and the chain starts again.
    etcd::expiry_reckoner g(9);
    for (std::int64_t t = 0; t <= 900; t += 50) read(g, t, 0);
    read(g, 950, -1, 0);
    CHECK_FALSE(g.expired());
    CHECK(g.next_reading() == 952 + etcd::expiry_poll_ms);
    read(g, 1100, 0);
    CHECK_FALSE(g.expired());  // a chain a second long before 1,100 would have counted
    for (std::int64_t t = 1150; t < 2122; t += 50) {
      read(g, t, 0);
      CHECK_FALSE(g.expired());
    }
    read(g, 2122, 0);
    CHECK(g.expired());
  }
}
