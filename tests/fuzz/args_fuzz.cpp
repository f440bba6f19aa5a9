// libFuzzer target: any bytes as an offload-lock command line, split into
// argv at NUL bytes (as execve would receive them), read by cli::parse
// (src/cli/args.hpp). Checks, besides the sanitizers' own findings:
// - parse never throws;
// - a usage error is one non-empty line (exit 2 promises one line on stderr),
//   whatever bytes the arguments hold;
// - an accepted command line is one the commands can run: a known command
//   (unless --help or --version), a command for `run`, values in range.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "check.hpp"
#include "cli/args.hpp"

using namespace offload_lock::cli;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> argv;
  if (!input.empty()) {
    std::size_t from = 0;
    for (;;) {
      std::size_t nul = input.find('\0', from);
      argv.emplace_back(input.substr(from, nul == std::string_view::npos ? std::string_view::npos : nul - from));
      if (nul == std::string_view::npos) break;
      from = nul + 1;
    }
  }

  args a;
  std::optional<std::string> err;
  try {
    err = parse(argv, a);
  } catch (...) {
    OFFLOAD_LOCK_FUZZ_CHECK(!"parse threw");
  }
  if (err) {
    OFFLOAD_LOCK_FUZZ_CHECK(!err->empty());
    OFFLOAD_LOCK_FUZZ_CHECK(err->find('\n') == std::string::npos);
    OFFLOAD_LOCK_FUZZ_CHECK(err->find('\r') == std::string::npos);
    return 0;
  }

  OFFLOAD_LOCK_FUZZ_CHECK(a.ttl.count() > 0);
  if (a.help || a.version) return 0;
  // The commands main() dispatches (src/cli/main.cpp); "help" sets a.help.
  static const char* const known[] = {"path",   "status", "acquire", "release", "run", "hold",
                                      "wait-free", "doctor", "history", "top",     "serve"};
  bool is_known = false;
  for (const char* k : known) is_known = is_known || a.command == k;
  OFFLOAD_LOCK_FUZZ_CHECK(is_known);
  OFFLOAD_LOCK_FUZZ_CHECK((a.command == "run") == !a.cmd.empty());
  OFFLOAD_LOCK_FUZZ_CHECK(!(a.pid != 0 && !a.token.empty()));
  OFFLOAD_LOCK_FUZZ_CHECK(a.pid >= 0 && a.pid <= 2147483647);
  OFFLOAD_LOCK_FUZZ_CHECK(a.busy_exit >= 0 && a.busy_exit <= 255);
  OFFLOAD_LOCK_FUZZ_CHECK(a.poll.count() > 0 && a.poll != std::chrono::milliseconds::max());
  OFFLOAD_LOCK_FUZZ_CHECK(a.label.size() <= 1024);
  return 0;
}
