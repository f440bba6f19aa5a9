/* The C API, from C: acquire, inspect, busy from another thread's view,
   release, lost. Exits non-zero at the first failed check, naming it. */
#include <offload_lock/offload_lock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: capi_test DIR\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/gpu.lock", argv[1]);
  char message[256] = "";

  offload_lock_info info;
  CHECK(offload_lock_inspect(path, &info) == OFFLOAD_LOCK_OK);
  CHECK(!info.present && !info.held);

  offload_lock_handle* h = NULL;
  CHECK(offload_lock_acquire(path, 0, "c-job", &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  CHECK(h != NULL);
  CHECK(strlen(offload_lock_token(h)) == 32);

  CHECK(offload_lock_inspect(path, &info) == OFFLOAD_LOCK_OK);
  CHECK(info.held);
  CHECK(info.pid == (int64_t)getpid());
  CHECK(strcmp(info.label, "c-job") == 0);
  CHECK(strcmp(info.token, offload_lock_token(h)) == 0);
  CHECK(info.started_at_ms > 0);

  /* A second acquisition from this thread nests; after that one's release
     the lock is still held, by the first. */
  offload_lock_handle* nested = NULL;
  CHECK(offload_lock_acquire(path, 0, NULL, &nested, message, sizeof message) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_release(nested) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_inspect(path, &info) == OFFLOAD_LOCK_OK && info.held);

  CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_inspect(path, &info) == OFFLOAD_LOCK_OK);
  CHECK(!info.present);

  /* A missing parent is an error with a message naming it. */
  char missing[4096];
  snprintf(missing, sizeof missing, "%s/no/such/dir/gpu.lock", argv[1]);
  h = NULL;
  CHECK(offload_lock_acquire(missing, 0, NULL, &h, message, sizeof message) == OFFLOAD_LOCK_ERROR);
  CHECK(h == NULL);
  CHECK(strstr(message, "no/such/dir") != NULL);
  CHECK(offload_lock_acquire(path, 0, NULL, NULL, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_release(NULL) == OFFLOAD_LOCK_INVALID);

  if (failures) return 1;
  printf("capi: all checks passed\n");
  return 0;
}
