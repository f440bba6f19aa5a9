// Section 8 of the benchmark: the lock's history and the live views. What
// an append to the history costs beside an uncontended acquire+release,
// `history --since 7d` over a million lines, /status.json under ten
// concurrent clients of `serve`, and how soon serve's page (in headless
// chromium) shows a change. bench.cpp prints what this returns.
#ifndef OFFLOAD_LOCK_BENCH_OPS_BENCH_HPP
#define OFFLOAD_LOCK_BENCH_OPS_BENCH_HPP

#include <nlohmann/json.hpp>
#include <string>

namespace bench::ops {

struct context {
  std::string dir;         // a fresh directory of its own
  std::string cli;         // the offload-lock command
  std::string node;        // Node, for the page's row ("" when missing)
  std::string source_dir;  // tests/bench, where page_update.mjs is
  bool quick = false;
};

struct result {
  std::string report;  // the section's tables and goals, as printed
  nlohmann::ordered_json json;
};

// Each measurement that cannot run here (no root to own other users'
// files, no chromium) says so in the report instead of a figure.
result run(const context& c);

}  // namespace bench::ops

#endif  // OFFLOAD_LOCK_BENCH_OPS_BENCH_HPP
