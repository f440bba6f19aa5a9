// offload-lock-bench-stamp: prints CLOCK_MONOTONIC in nanoseconds and exits.
// The command a CLI waiter runs (`offload-lock run -- offload-lock-bench-stamp`)
// so the moment the command under the lock starts running can be compared
// with the holder's release stamp. Only libc, linked statically where
// possible, to keep its own start-up small.
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  char buf[40];
  int n = snprintf(buf, sizeof buf, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
  return write(1, buf, (size_t)n) == n ? 0 : 1;
}
