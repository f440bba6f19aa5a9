// libFuzzer target: any bytes as a meta.json, read by parse_meta() (src/meta.hpp).
// Checks, besides the sanitizers' own findings:
// - parse_meta never throws, whatever the bytes;
// - bytes that do not parse give nothing at all: Node's view is null (stale,
//   doc/protocol.md A3), Go's decode fails (free, A5), no key is read;
// - a JSON object is truthy for Node, and only an object yields keys;
// - what offload-lock would write back from the keys it read (serialize) starts
//   with Node's two keys byte for byte (B2) and reads back identically for
//   Node, for Go and for offload-lock;
// - repair_utf8 is idempotent, and a label of valid UTF-8 survives a write and
//   a read unchanged, whatever else it contains.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.hpp"
#include "meta.hpp"

using namespace offload_lock::detail;

namespace {

offload_lock::detail::parsed_meta parse_or_die(std::string_view bytes, std::string_view input) {
  try {
    return parse_meta(bytes);
  } catch (...) {
    OFFLOAD_LOCK_FUZZ_CHECK(!"parse_meta threw");
  }
  return {};
}

void check_views(const parsed_meta& m, std::string_view input) {
  if (!m.parsed) {
    OFFLOAD_LOCK_FUZZ_CHECK(m.node_null);
    OFFLOAD_LOCK_FUZZ_CHECK(!m.go_ok);
  }
  if (!m.is_object) {
    OFFLOAD_LOCK_FUZZ_CHECK(!m.js_pid && !m.started_at && !m.proc_start && !m.proc_ticks);
    OFFLOAD_LOCK_FUZZ_CHECK(m.token.empty() && m.label.empty() && m.host.empty() && m.boot_id.empty() &&
                            m.tool.empty());
    OFFLOAD_LOCK_FUZZ_CHECK(m.go_pid == 0 && m.go_started_at == 0);
  } else {
    OFFLOAD_LOCK_FUZZ_CHECK(m.parsed);
    OFFLOAD_LOCK_FUZZ_CHECK(!m.node_null);
  }
}

void check_round_trip(const parsed_meta& m, std::string_view input) {
  meta_record r;
  r.pid = m.go_pid;
  r.started_at = m.started_at.value_or(m.go_started_at);
  r.token = m.token;
  r.label = m.label;
  r.host = m.host;
  r.boot_id = m.boot_id;
  r.proc_start = m.proc_start.value_or(0);
  r.proc_ticks = m.proc_ticks.value_or(0);
  std::string bytes = serialize(r);
  std::string prefix = "{\"pid\":" + std::to_string(r.pid) + ",\"startedAt\":" + std::to_string(r.started_at) + ",";
  OFFLOAD_LOCK_FUZZ_CHECK(bytes.compare(0, prefix.size(), prefix) == 0);
  OFFLOAD_LOCK_FUZZ_CHECK(bytes.find('\n') == std::string::npos);

  parsed_meta back = parse_or_die(bytes, input);
  OFFLOAD_LOCK_FUZZ_CHECK(back.parsed && back.is_object && !back.node_null);
  // Node and Go read the same holder from what offload-lock writes.
  OFFLOAD_LOCK_FUZZ_CHECK(back.go_ok);
  OFFLOAD_LOCK_FUZZ_CHECK(back.go_pid == r.pid);
  OFFLOAD_LOCK_FUZZ_CHECK(back.js_pid && *back.js_pid == static_cast<double>(r.pid));
  OFFLOAD_LOCK_FUZZ_CHECK(back.go_started_at == r.started_at);
  OFFLOAD_LOCK_FUZZ_CHECK(back.started_at == r.started_at);
  OFFLOAD_LOCK_FUZZ_CHECK(back.proc_start == r.proc_start);
  OFFLOAD_LOCK_FUZZ_CHECK(back.proc_ticks == r.proc_ticks);
  // Strings read from parsed JSON are valid UTF-8, so they come back as they were.
  OFFLOAD_LOCK_FUZZ_CHECK(back.token == r.token && back.label == r.label && back.host == r.host &&
                          back.boot_id == r.boot_id);
}

void check_label(std::string_view input) {
  std::string repaired = repair_utf8(input);
  OFFLOAD_LOCK_FUZZ_CHECK(repair_utf8(repaired) == repaired);
  meta_record r;
  r.label = std::string(input);
  std::string bytes;
  try {
    bytes = serialize(r);
  } catch (...) {
    OFFLOAD_LOCK_FUZZ_CHECK(!"serialize threw on an arbitrary label");
  }
  parsed_meta back = parse_or_die(bytes, input);
  OFFLOAD_LOCK_FUZZ_CHECK(back.parsed && back.is_object);
  OFFLOAD_LOCK_FUZZ_CHECK(repair_utf8(back.label) == back.label);
  if (repaired == input) OFFLOAD_LOCK_FUZZ_CHECK(back.label == input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  parsed_meta m = parse_or_die(input, input);
  check_views(m, input);
  check_round_trip(m, input);
  check_label(input);
  return 0;
}
