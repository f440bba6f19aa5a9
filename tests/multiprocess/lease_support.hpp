// Helpers of the gpulease tests (lease_test.cpp, lease_views_test.cpp):
// the stand-in, a state root per test, forged claims, and reading a
// child's event lines.
#ifndef OFFLOAD_LOCK_TESTS_MULTIPROCESS_LEASE_SUPPORT_HPP
#define OFFLOAD_LOCK_TESTS_MULTIPROCESS_LEASE_SUPPORT_HPP

#include <unistd.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "gpulease/location.hpp"
#include "gpulease/record.hpp"
#include "os/process.hpp"
#include "support.hpp"

namespace olt {

namespace gl = offload_lock::detail::gpulease;

inline std::string standin_exe() { return OFFLOAD_LOCK_GPULEASE_STANDIN; }

inline gl::lease_location location_under(const std::string& root) {
  gl::lease_inputs in;
  in.lease_root = root;
  return gl::resolve_lease(in);
}

// The test binary as a lease participant (child mode "lease", lease_test.cpp).
inline std::vector<std::string> lease_child(const std::string& root, const std::string& cls, long wait_ms,
                                            long window_ms = 3'600'000) {
  return {"--child", "lease", "take", root, cls, std::to_string(wait_ms), std::to_string(window_ms)};
}

// The stand-in holding the lease under `root` until its stdin closes.
inline std::vector<std::string> standin_hold(const std::string& root, const std::string& wait = "0s",
                                             const std::string& cls = "media") {
  return {"hold", "-state-dir", root, "-class", cls, "-wait", wait, "-poll", "1s", "-reason", "stand-in"};
}

// Reads lines until one starts with `prefix`; the whole line.
inline std::string line_starting(child& c, const std::string& prefix, ms timeout = kPrompt) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<ms>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    auto l = c.read_line(left);
    if (!l) return "";
    if (l->rfind(prefix, 0) == 0) return *l;
  }
}

inline std::string field(const std::string& line, int n) {
  std::istringstream in(line);
  std::string f;
  for (int i = 0; i <= n; ++i)
    if (!(in >> f)) return "";
  return f;
}

inline std::int64_t own_ticks() {
  return static_cast<std::int64_t>(offload_lock::detail::sys::start_of(::getpid())->ticks);
}

// A claim forged by hand, as if written by `pid` with `ticks`.
inline std::string forged(std::uint64_t epoch, std::int64_t pid, std::int64_t ticks, std::int64_t renewed,
                          std::int64_t expires) {
  gl::record r;
  r.epoch = epoch;
  r.lease_class = "text";
  r.pid = pid;
  r.start_ticks = ticks;
  r.reason = "forged";
  r.acquired_at_ms = renewed;
  r.renewed_at_ms = renewed;
  r.expires_at_ms = expires;
  return gl::serialize_record(r);
}

struct lease_root {
  temp_dir d;
  std::string root = d.str();
  fs::path lease = d.path / "gpu" / "lease";
  fs::path claim = lease / "meta.json";
  lease_root() { fs::create_directories(lease); }
  // What the stand-in, as one of gpulease's readers, reports (one JSON line).
  std::string standin_view() {
    child c(standin_exe(), {"inspect", "-state-dir", root});
    auto l = c.read_line();
    c.wait();
    return l.value_or("");
  }
};

}  // namespace olt

#endif  // OFFLOAD_LOCK_TESTS_MULTIPROCESS_LEASE_SUPPORT_HPP
