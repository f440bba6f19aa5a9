// libFuzzer target: any bytes as a DUR (--wait, --ttl, --poll), read by
// offload_lock::parse_duration (include/offload_lock/describe.hpp) and shown by describe_duration.
// Checks, besides the sanitizers' own findings:
// - parse_duration never throws;
// - only "forever" means forever; anything else accepted lies between 0 and
//   ten years, and is 0 exactly when the number is (a positive wait stays
//   positive);
// - every accepted value reads back exactly from its spelling in ms;
// - for a bare number N: N means N s, and the units order N ms <= N s <= N m
//   <= N h wherever they are accepted; a whole N in each unit is exactly N
//   times the unit, accepted up to ten years;
// - a compound (Nh30m) is the sum of its parts, and units out of order are
//   refused;
// - describe_duration never throws, and what it prints under a minute reads
//   back as the value cut to whole seconds.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "check.hpp"
#include "cli/args.hpp"
#include "offload_lock/lock.hpp"

using offload_lock::parse_duration;
using std::chrono::milliseconds;

namespace {

constexpr long long kTenYearsMs = 315'360'000'000LL;

std::optional<milliseconds> parse(const std::string& text, std::string_view input) {
  try {
    return parse_duration(text);
  } catch (...) {
    OFFLOAD_LOCK_FUZZ_CHECK(!"parse_duration threw");
  }
  return std::nullopt;
}

bool has_nonzero_digit(const std::string& s) { return s.find_first_of("123456789") != std::string::npos; }

bool is_bare_number(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string text(input);
  auto d = parse(text, input);
  if (!d) return 0;

  if (text == "forever") {
    OFFLOAD_LOCK_FUZZ_CHECK(*d == milliseconds::max());
    return 0;
  }
  OFFLOAD_LOCK_FUZZ_CHECK(*d != milliseconds::max());
  OFFLOAD_LOCK_FUZZ_CHECK(d->count() >= 0 && d->count() <= kTenYearsMs);
  OFFLOAD_LOCK_FUZZ_CHECK((d->count() > 0) == has_nonzero_digit(text));

  OFFLOAD_LOCK_FUZZ_CHECK(parse(std::to_string(d->count()) + "ms", input) == *d);

  if (is_bare_number(text)) {
    OFFLOAD_LOCK_FUZZ_CHECK(parse(text + "s", input) == *d);
    auto ms = parse(text + "ms", input), s = d, m = parse(text + "m", input), h = parse(text + "h", input);
    OFFLOAD_LOCK_FUZZ_CHECK(ms && *ms <= *s);  // a smaller unit cannot overflow where a larger one did not
    if (m) OFFLOAD_LOCK_FUZZ_CHECK(*s <= *m);
    if (h) OFFLOAD_LOCK_FUZZ_CHECK(m && *m <= *h);
  }
  // Whole numbers in every unit, against exact integer arithmetic.
  if (!text.empty() && text.size() <= 12 && text.find_first_not_of("0123456789") == std::string::npos) {
    long long n = std::stoll(text);
    const std::pair<const char*, long long> units[] = {{"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}};
    for (const auto& [suffix, factor] : units) {
      auto v = parse(text + suffix, input);
      bool fits = n <= kTenYearsMs / factor;
      OFFLOAD_LOCK_FUZZ_CHECK(v.has_value() == fits);
      if (v) OFFLOAD_LOCK_FUZZ_CHECK(v->count() == n * factor);
    }
    // A compound is the sum of its parts, largest unit first.
    auto compound = parse(text + "h30m", input);
    OFFLOAD_LOCK_FUZZ_CHECK(compound.has_value() == (n * 3'600'000 + 1'800'000 <= kTenYearsMs));
    if (compound) OFFLOAD_LOCK_FUZZ_CHECK(compound->count() == n * 3'600'000 + 1'800'000);
    OFFLOAD_LOCK_FUZZ_CHECK(!parse("30m" + text + "h", input));
  }

  std::string shown;
  try {
    shown = offload_lock::describe_duration(*d);
  } catch (...) {
    OFFLOAD_LOCK_FUZZ_CHECK(!"describe_duration threw");
  }
  OFFLOAD_LOCK_FUZZ_CHECK(!shown.empty() && shown[0] >= '0' && shown[0] <= '9');
  if (d->count() < 60'000) {
    long long whole = d->count() < 1000 ? d->count() : d->count() / 1000 * 1000;
    OFFLOAD_LOCK_FUZZ_CHECK(parse(shown, input) == milliseconds(whole));
  }
  return 0;
}
