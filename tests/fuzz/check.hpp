// What the fuzz targets share: a check that stops the run, with the broken
// invariant and the input, when an invariant does not hold. libFuzzer then
// saves the input as a crash file.
#ifndef OFFLOAD_LOCK_TESTS_FUZZ_CHECK_HPP
#define OFFLOAD_LOCK_TESTS_FUZZ_CHECK_HPP

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace offload_lock::fuzz {

[[noreturn]] inline void broken(const char* what, const char* file, int line, std::string_view input) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\ninput (%zu bytes): ", file, line, what, input.size());
  for (unsigned char c : input) {
    if (c >= 0x20 && c < 0x7f && c != '\\') std::fputc(c, stderr);
    else std::fprintf(stderr, "\\x%02x", c);
  }
  std::fputc('\n', stderr);
  std::abort();
}

}  // namespace offload_lock::fuzz

// `input` must be in scope: the bytes of the current run.
#define OFFLOAD_LOCK_FUZZ_CHECK(cond) \
  ((cond) ? (void)0 : ::offload_lock::fuzz::broken(#cond, __FILE__, __LINE__, input))

#endif  // OFFLOAD_LOCK_TESTS_FUZZ_CHECK_HPP
