/* The C API of offload-lock, for C programs and for other languages through
   their foreign-function interfaces (Python ctypes, Rust, Go cgo ...).
   Same lock, same rules as the C++ API in offload_lock/offload_lock.hpp. */
#ifndef OFFLOAD_LOCK_H
#define OFFLOAD_LOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Everything declared here is exported from the shared library. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(default)
#endif

/* Results. */
enum {
  OFFLOAD_LOCK_OK = 0,
  OFFLOAD_LOCK_BUSY = 1,      /* held by someone else (wait 0) */
  OFFLOAD_LOCK_TIMED_OUT = 2, /* still held by someone else when the wait ended */
  OFFLOAD_LOCK_LOST = 3,      /* release: the lock had been removed or replaced by someone else */
  OFFLOAD_LOCK_ERROR = 4,     /* a system error; the message names the path and the reason */
  OFFLOAD_LOCK_INVALID = 5    /* a bad argument */
};

typedef struct offload_lock_handle offload_lock_handle;

/* Takes the lock at `path` (NULL or "": the default path, as resolve_path()),
   waiting up to `wait_ms` (0: try once; negative: forever), recording `label`
   (NULL: the program's name). On OFFLOAD_LOCK_OK, *out receives a handle that
   offload_lock_release() frees. On failure, a one-line message goes into
   `message` (when not NULL) truncated to `message_len` bytes. Blocks; safe to
   call from several threads (they queue in the process). */
int offload_lock_acquire(const char* path, int64_t wait_ms, const char* label, offload_lock_handle** out,
                         char* message, size_t message_len);

/* Releases the lock if it is still this handle's and frees the handle
   (always, whatever the result). OFFLOAD_LOCK_OK, OFFLOAD_LOCK_LOST, or
   OFFLOAD_LOCK_ERROR. NULL is OFFLOAD_LOCK_INVALID. */
int offload_lock_release(offload_lock_handle* handle);

/* The token of a held lock (valid until release). */
const char* offload_lock_token(const offload_lock_handle* handle);

typedef struct offload_lock_info {
  int present;             /* something exists at the path */
  int held;                /* present and not stale */
  int64_t pid;             /* recorded holder pid, 0 when unknown */
  int64_t started_at_ms;   /* recorded startedAt (epoch ms), 0 when unknown */
  int64_t held_for_ms;     /* how long it has been held, when held */
  char label[256];         /* "" when none; truncated */
  char host[256];
  char token[129];
  char stale[256];         /* why a present lock is not held; "" otherwise */
} offload_lock_info;

/* Inspects the lock without changing anything (NULL or "": the default
   path). OFFLOAD_LOCK_OK, or OFFLOAD_LOCK_ERROR when it cannot be looked at
   (then `info->stale` holds the message). Never blocks on the lock. */
int offload_lock_inspect(const char* path, offload_lock_info* info);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* OFFLOAD_LOCK_H */
