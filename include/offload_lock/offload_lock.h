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
  OFFLOAD_LOCK_INVALID = 5,   /* a bad argument */
  OFFLOAD_LOCK_CANCELLED = 6  /* the wait was abandoned through offload_lock_options.cancel_fd */
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

/* ---- The full acquisition: wait, label, TTL, GPU slots, cancel, progress, loss ---- */

/* One point-in-time view of a lock, as `offload-lock --json status` shows it
   (one object of its "slots"). Strings are NUL-terminated and truncated to
   their buffers. */
typedef struct offload_lock_info_ex {
  char path[4096];
  int present;            /* something exists at the path */
  int held;               /* present and not stale by offload-lock's rules */
  int has_pid;            /* pid below is the recorded holder pid */
  int64_t pid;
  int has_started_at;     /* started_at_ms below is the recorded startedAt */
  int64_t started_at_ms;
  int64_t held_for_ms;    /* how long held (meaningful when held) */
  int64_t age_ms;         /* now - meta.json mtime: the clock the TTL rule uses */
  int64_t owner_uid;      /* uid owning the lock directory; -1 when unknown */
  int has_stale;          /* a present lock that is not held: `stale` says why */
  int node_stale;         /* the v1 Node runners' verdict on the same bytes */
  int go_held;            /* the Go readers' verdict on the same bytes */
  char label[1024];
  char host[256];
  char token[129];
  char tool[128];
  char stale[1024];
  char problem[1024];     /* the lock could not be looked at (held is then 0); "" otherwise */
  int other_pid_namespace; /* the holder recorded another pid namespace than the caller's */
  int has_v1_stale;       /* held, but the Node runners would judge it stale: `v1_stale` says why */
  char v1_stale[1024];
} offload_lock_info_ex;

/* Passed to offload_lock_options.on_progress while an acquisition waits for
   another process: when a holder changes (changed = 1; also once at the
   start of the wait) and every progress_every_ms besides. `holders` (the
   lock, or each GPU slot waited for) is valid only during the call. */
typedef struct offload_lock_progress {
  int64_t waited_ms;
  int changed;
  size_t holder_count;
  const offload_lock_info_ex* holders;
  /* Since 0.3. This waiter's place in the lock's queue: 1 is next; 0 when
     unknown (a wait among several GPU slots, or one not queued:
     OFFLOAD_LOCK_NO_REGISTER). The library allocates this struct, so
     fields are only ever appended. */
  int position;
  /* Since 0.3. While the lock is held and the acquisition waits for the
     gpulease lease that goes with it (doc/protocol-gpulease.md): that
     lease as last seen (holder_count is then 0, and changed says its
     holder changed); NULL otherwise. Valid only during the call. */
  const struct offload_lock_lease_info* lease;
} offload_lock_progress;

typedef void (*offload_lock_progress_fn)(const offload_lock_progress* progress, void* user);
/* `message` names the lock; valid only during the call. */
typedef void (*offload_lock_lost_fn)(const char* message, void* user);

/* Passed to offload_lock_options.on_yield: the waiter of a higher priority
   than the holder's that the holder is asked to make way for. Valid only
   during the call (`label` included; "" when the waiter has none). The
   library allocates it, so fields are only ever appended. */
typedef struct offload_lock_yield_request {
  int64_t pid;
  const char* label;
  int priority;
} offload_lock_yield_request;

typedef void (*offload_lock_yield_fn)(const offload_lock_yield_request* request, void* user);

/* Flags for offload_lock_options.flags. */
enum {
  OFFLOAD_LOCK_NO_INHERIT = 1,  /* do not pass through a lock the parent process passed down (B11) */
  OFFLOAD_LOCK_NO_REGISTER = 2  /* do not list this process in the waiter registry while it waits */
};

/* Fill with offload_lock_options_init() first, then set what differs, so a
   program built against this header keeps working when fields are added
   (`size` says which fields the caller knows). */
typedef struct offload_lock_options {
  size_t size;                /* sizeof(offload_lock_options), set by offload_lock_options_init */
  const char* path;           /* NULL or "": the default path, as offload_lock_default_path() */
  int64_t wait_ms;            /* 0: try once; negative: forever (the default) */
  const char* label;          /* NULL: the program's name */
  int64_t ttl_ms;             /* 0: the default TTL (1 hour) */
  int gpus;                   /* >1: take the first free of this many GPU slots (default 1) */
  int gpu;                    /* >=0: take this GPU slot only (default -1) */
  int cancel_fd;              /* >=0: abandon the wait once this descriptor is readable or hangs up (default -1) */
  unsigned flags;             /* OFFLOAD_LOCK_NO_INHERIT, OFFLOAD_LOCK_NO_REGISTER */
  int64_t progress_every_ms;  /* >0: also call on_progress this often while waiting */
  offload_lock_progress_fn on_progress;  /* called on the waiting thread; must return quickly */
  void* progress_user;
  /* Called on the library's heartbeat thread (shared by every lock of the
     process) as soon as the lock is removed or replaced by someone else.
     Never called once offload_lock_release() has returned for the handle;
     it may itself call offload_lock_release() on its handle. Must return
     quickly. */
  offload_lock_lost_fn on_lost;
  void* lost_user;
  /* ---- Since 0.3: read only when `size` covers them, so a program built
     against 0.2's header (a smaller `size`) gets 0.2's behaviour. ---- */
  /* The queue: waiters of one lock (or one GPU slot) are served by
     priority, highest first, then by arrival. -100 to 100 (else
     OFFLOAD_LOCK_INVALID); default 0. Recorded in the waiter's entry and,
     for the holder, in meta.json (`priority`). Waits among several GPU
     slots (gpus > 1, gpu < 0) are not ordered. */
  int priority;
  /* How long the holder expects to keep the lock, for the ETAs others see
     (meta.json `expectMs`); 0: undeclared (the default); negative is
     OFFLOAD_LOCK_INVALID. Advisory: nothing happens when it passes. */
  int64_t expect_ms;
  /* The holder can make way: called once per hold, on the library's
     heartbeat thread (shared by every lock of the process), when a waiter
     of a higher priority than this holder's queues for the same lock
     (slot). Recorded in meta.json (`canYield`) so that status shows who
     asked. Never called once offload_lock_release() has returned for the
     handle. Must return quickly and must not release the handle itself:
     let the thread that holds the lock see it (a flag, or
     offload_lock_yield_requested()), release, and acquire again (it then
     queues behind the waiter it made way for). */
  offload_lock_yield_fn on_yield;
  void* yield_user;
  /* With gpus > 1 and gpu < 0: the slots the acquisition may take (each in
     0..gpus-1, else OFFLOAD_LOCK_INVALID), `allowed_gpu_count` of them;
     NULL or a count of 0 allows all. offload_lock_choose_slots() gives the
     list the command uses under CUDA_VISIBLE_DEVICES. */
  const int* allowed_gpus;
  size_t allowed_gpu_count;
  /* The maximum hold: how long the holder may keep the lock, in ms; 0: no
     limit (the default); negative is OFFLOAD_LOCK_INVALID. Recorded in
     meta.json (`maxHoldMs`). When it passes, on_yield is called (once per
     hold, with the first waiter, or pid 0 and label "max hold" when none
     waits) and offload_lock_max_hold_passed() turns true; the lock is not
     released by the library: the holder decides. Needs the heartbeat for
     the call. */
  int64_t max_hold_ms;
  /* The class recorded in the gpulease lease taken with the lock, where
     current upstream runners keep one (doc/protocol-gpulease.md): "media"
     (the default; also for NULL or "") or "text" (a job that measures the
     card, under which models must not be unloaded); anything else is
     OFFLOAD_LOCK_INVALID. */
  const char* lease_class;
} offload_lock_options;

/* Defaults: wait forever, default path, TTL and label, one GPU, no cancel
   descriptor, no callbacks. Writes `size` bytes of `options` and no more:
   sizeof(offload_lock_options) as the caller's header declares it (which
   the macro below passes), so a program built against an older, smaller
   struct is never written past its end. */
void offload_lock_options_init_sized(offload_lock_options* options, size_t size);
/* The entry point programs built against 0.2's header call: fills 0.2's
   fields only (up to lost_user). Programs built against this header reach
   offload_lock_options_init_sized through the macro. */
void offload_lock_options_init(offload_lock_options* options);
#define offload_lock_options_init(options) offload_lock_options_init_sized((options), sizeof *(options))

/* Takes the lock as offload_lock_acquire() does, with every option above.
   Blocks up to wait_ms on the calling thread. Results: OFFLOAD_LOCK_OK (and
   *out set), OFFLOAD_LOCK_BUSY (wait 0), OFFLOAD_LOCK_TIMED_OUT,
   OFFLOAD_LOCK_CANCELLED (cancel_fd became readable; nothing is left
   behind: no lock, no waiter entry), OFFLOAD_LOCK_ERROR (the message names
   the path and the reason), OFFLOAD_LOCK_INVALID. For BUSY and TIMED_OUT the
   message names the holder: "timed out: PATH is held by LABEL (pid N, host
   H) for 5m12s". Threads of one process queue in arrival order; an
   acquisition on the thread that already holds the lock passes straight
   through (offload_lock_nested()). Note: the queue among threads of one
   process does not watch cancel_fd; only the wait for another process does. */
int offload_lock_acquire_ex(const offload_lock_options* options, offload_lock_handle** out, char* message,
                            size_t message_len);

/* About a held lock (the handle from offload_lock_acquire or _ex). */
const char* offload_lock_path(const offload_lock_handle* handle); /* the lock (or GPU slot) directory held */
int offload_lock_gpu(const offload_lock_handle* handle);          /* the GPU slot held; 0 for a single lock */
int offload_lock_nested(const offload_lock_handle* handle);       /* 1: a nested acquisition on the holding thread */
int offload_lock_inherited(const offload_lock_handle* handle);    /* 1: the parent process's lock, passed down */
/* An etcd lock's fencing token (offload_lock/etcd.hpp): the etcd revision
   at which this acquisition took the lock, greater than any earlier
   holder's, for a server that refuses work carrying an older one
   (doc/etcd.md "Fencing"). 0 for a local lock and for NULL. Never blocks.
   Since 0.3. */
uint64_t offload_lock_fence(const offload_lock_handle* handle);
/* 1 when the lock directory is still the one this handle took (checks the
   file system; call before an irreversible step), 0 otherwise. */
int offload_lock_still_held(const offload_lock_handle* handle);
/* 1 once a waiter of a higher priority has asked this holder to make way
   (offload_lock_options.on_yield has been called), 0 otherwise, and always
   0 for a lock taken without on_yield. Never blocks. Since 0.3. */
int offload_lock_yield_requested(const offload_lock_handle* handle);
/* 1 once the lock has been held longer than offload_lock_options.max_hold_ms,
   0 otherwise, and always 0 for a lock taken without one. Never blocks. */
int offload_lock_max_hold_passed(const offload_lock_handle* handle);
/* The environment a child process needs so that its acquisitions of this
   lock pass straight through (OFFLOAD_LOCK_PATH and OFFLOAD_LOCK_TOKEN), as
   "NAME=VALUE" strings each ended by a NUL, written to `buf` when it is large
   enough. Returns the bytes needed (0 for NULL). */
size_t offload_lock_child_environment(const offload_lock_handle* handle, char* buf, size_t len);

/* The lock path offload-lock and the Node runners resolve (GPU_LOCK, then
   TMPDIR, TMP, TEMP, then /tmp), written to `buf` when it is large enough.
   Returns the bytes needed without the NUL. Reads the environment (getenv). */
size_t offload_lock_default_path(char* buf, size_t len);

/* Inspects the lock at `path` (NULL or "": the default path) without changing
   anything, judging others with `ttl_ms` (0: the default). Never blocks on
   the lock. OFFLOAD_LOCK_OK, or OFFLOAD_LOCK_ERROR when the lock cannot be
   looked at (info->problem says why), OFFLOAD_LOCK_INVALID for NULL info. */
int offload_lock_inspect_ex(const char* path, int64_t ttl_ms, offload_lock_info_ex* info);

/* What the holder declared and what the queue asks of it, as the top level
   of `offload-lock --json status` shows it (priority, expectMs, freeInMs,
   yieldRequested). Since 0.3. A struct of its own rather than fields of
   offload_lock_info_ex, which has no size field and is passed in arrays
   (offload_lock_progress.holders): growing it would break programs built
   against 0.2. Set `size` to sizeof(offload_lock_queue_info) before the
   call; later versions append fields and write only those `size` covers. */
typedef struct offload_lock_queue_info {
  size_t size;
  int priority;        /* the holder's (meta.json `priority`); 0 when not held */
  int64_t expect_ms;   /* the holder's declared duration (`expectMs`); 0: undeclared or not held */
  int64_t free_in_ms;  /* expected free in: expect_ms - held for, 0 when overdue;
                          -1: unknown (undeclared, or not held) */
  int can_yield;       /* the holder said it can make way (meta.json `canYield`) */
  /* The first live waiter of a higher priority than a holder that can
     yield: the one its holder is asked to make way for. */
  int has_yield_request;
  int64_t yield_pid;
  int yield_priority;
  char yield_label[1024];
  /* The holder's maximum hold (meta.json `maxHoldMs`); 0: none, or not held. */
  int64_t max_hold_ms;
  /* What is left of it (below 0 once passed); meaningful when max_hold_ms > 0. */
  int64_t max_hold_in_ms;
  /* When the holder's GPU was marked idle (epoch ms; a site policy's
     idleAfter), and for how long since; both 0: not idle, or not held. */
  int64_t idle_since_ms;
  int64_t idle_for_ms;
  /* An etcd lock's fencing token (the revision at which its holder took
     it, greater for every later acquisition); 0 for a local lock, and
     when free. */
  uint64_t fence;
} offload_lock_queue_info;

/* One inspection of the lock at `path` (as offload_lock_inspect_ex, whose
   view goes to `info` unless it is NULL) and the queue's view of its holder
   into `queue`. Never blocks on the lock. OFFLOAD_LOCK_OK;
   OFFLOAD_LOCK_ERROR when the lock cannot be looked at (info->problem says
   why); OFFLOAD_LOCK_INVALID for a NULL `queue` or a `queue->size` below
   0.3's sizeof(offload_lock_queue_info). */
int offload_lock_inspect_queue(const char* path, int64_t ttl_ms, offload_lock_info_ex* info,
                               offload_lock_queue_info* queue);

/* One process waiting for the lock, from the waiter registry. */
typedef struct offload_lock_waiter {
  int64_t pid;
  int64_t since_ms;   /* when its wait began, epoch ms */
  int64_t waited_ms;  /* now - since */
  int gpu;            /* the slot it asked for; -1: the first free of `gpus` */
  int gpus;
  char label[1024];
  char host[256];
} offload_lock_waiter;

/* The processes waiting for the lock at `path` (NULL or "": the default
   path), in the order the lock serves them (priority, then arrival; before
   0.3: arrival); dead ones are left out. Writes up to `cap` entries to
   `out` and the total number into *count. Never blocks. OFFLOAD_LOCK_OK, or
   OFFLOAD_LOCK_INVALID for a NULL count. */
int offload_lock_waiters(const char* path, offload_lock_waiter* out, size_t cap, size_t* count);

/* A waiter with its place in the queue, as one entry of `offload-lock
   --json status`'s "waiters". Since 0.3 (offload_lock_waiter is passed in
   arrays and cannot grow: this is its successor, which grows by
   offload_lock_waiters_ex's entry_size). */
typedef struct offload_lock_waiter_ex {
  offload_lock_waiter waiter;
  int priority;       /* offload_lock_options.priority: higher is served first */
  int64_t expect_ms;  /* its declared duration; 0: undeclared */
  /* 1 + the waiters ahead of it that would take a slot it would take
     (1: next). */
  int position;
  /* When it should get the lock, from now: the holder's expected free time
     plus the declared durations of the waiters ahead of it that would take
     its slot (0 when the slot is free and it is next); -1: unknown (the
     holder or one ahead declared nothing, or a wait among several slots). */
  int64_t eta_ms;
} offload_lock_waiter_ex;

/* The processes waiting for the lock at `path` (NULL or "": the default
   path) in the order the lock serves them: priority, then arrival; dead
   ones are left out. Writes up to `cap` entries to `out`, each
   `entry_size` bytes apart (pass sizeof(offload_lock_waiter_ex)), and the
   total number into *count. The holders are inspected with the default
   TTL for the ETAs. Never blocks. Since 0.3. OFFLOAD_LOCK_OK, or
   OFFLOAD_LOCK_INVALID for a NULL count or an entry_size below 0.3's
   sizeof(offload_lock_waiter_ex). */
int offload_lock_waiters_ex(const char* path, offload_lock_waiter_ex* out, size_t entry_size, size_t cap,
                            size_t* count);

/* A duration as the command shows it ("850ms", "42s", "5m12s", "2h03m"),
   written to `buf` when it is large enough; returns the bytes needed
   without the NUL. */
size_t offload_lock_describe_duration(int64_t ms, char* buf, size_t len);

/* ---- Since 0.3: the command's grammar and words, for every binding ----
   The same rules as `offload-lock` itself (offload_lock/describe.hpp and
   offload_lock/gpus.hpp), so that a binding parses and prints exactly as
   the command does instead of keeping a copy of its own. The string
   functions write a NUL-terminated result to `buf` when it is large enough
   and return the bytes needed without the NUL (so a call with len 0 sizes
   the buffer). Strings taken from meta.json (labels, hosts) are as
   recorded: escape them before a terminal sees them. */

/* The bounds of offload_lock_options.priority, and the named priorities. */
enum {
  OFFLOAD_LOCK_PRIORITY_MIN = -100,
  OFFLOAD_LOCK_PRIORITY_MAX = 100,
  OFFLOAD_LOCK_PRIORITY_BATCH = -10,
  OFFLOAD_LOCK_PRIORITY_NORMAL = 0,
  OFFLOAD_LOCK_PRIORITY_INTERACTIVE = 10
};

/* Parses a duration as the command's DUR ("0", "1.5", "500ms", "42s",
   "5m", "2h", "1d", compounds such as "1h30m", "2m30s", "1d12h", and
   "forever"), rounded up to whole milliseconds. OFFLOAD_LOCK_OK and *ms set
   (-1 for forever); OFFLOAD_LOCK_INVALID (and *ms untouched) for anything
   else: empty, negative, a sign, spaces, junk, units repeated or out of
   order, more than ten years, NULL. Pure. */
int offload_lock_parse_duration(const char* text, int64_t* ms);

/* Parses a priority as the command's --priority: an integer from -100 to
   100 (digits and an optional '-'; "+5" is refused, as the command refuses
   it), or "batch", "normal", "interactive". OFFLOAD_LOCK_OK and *priority
   set, or OFFLOAD_LOCK_INVALID. Pure. */
int offload_lock_parse_priority(const char* text, int* priority);

/* The lock path of GPU slot `gpu` of the lock at `path` (NULL or "": the
   default path): slot 0 (or less) is `path`, slot k "<path>.gpu<k>". */
size_t offload_lock_gpu_slot_path(const char* path, int gpu, char* buf, size_t len);

/* One name per lock directory, whatever path reaches it ("DEV:INO/NAME" of
   its parent and its last component; the path as given when the parent
   cannot be opened): the key a binding should use for its own nesting and
   queueing, as the library does. Reads the file system. */
size_t offload_lock_lock_identity(const char* path, char* buf, size_t len);

/* How many GPUs this machine has, as `--gpus auto` counts them (one past
   nvidia-smi -L's highest index, else the driver's /proc/driver/nvidia/gpus
   entries); 0 when none are found. nvidia-smi is asked once per process
   (at most 5 s). */
int offload_lock_gpu_count(void);

/* How many GPU slots exist next to the lock at `path` (NULL or "": the
   default path): one past the highest "<path>.gpu<k>", at least 1. */
int offload_lock_slot_count(const char* path);

/* The GPUs a CUDA_VISIBLE_DEVICES value allows, read as CUDA and the
   command read it (indices, GPU-/MIG- UUIDs or unique prefixes of them;
   the first entry naming no GPU ends the list). `value`: NULL reads this
   process's CUDA_VISIBLE_DEVICES. Returns -1 when that variable is unset
   (every GPU allowed), else the number of GPUs allowed (0 hides them all),
   writing up to `cap` GPU indices (slots) to `indices` and the ignored
   entry, if any, to `ignored` ("" when none). May run nvidia-smi. */
int offload_lock_visible_gpus(const char* value, int* indices, size_t cap, char* ignored, size_t ignored_len);

/* The GPU slots of `gpus` (1 to 1024) that an acquisition of this process
   may take, as the command chooses them for acquire, run and hold: under a
   CUDA_VISIBLE_DEVICES value (`value`; NULL reads this process's) only the
   slots of the GPUs it names. `gpu` >= 0 asks for that slot only (-1: any).
   OFFLOAD_LOCK_OK: *slot is the one slot to take (-1: any allowed) and
   *allowed_count the number of slots allowed (-1: every one), up to `cap`
   of them written to `allowed`; `note` gets an entry CUDA ignores, to be
   said once ("" when none). OFFLOAD_LOCK_INVALID: the value allows none of
   them, and `note` says why in one line. May run nvidia-smi. */
int offload_lock_choose_slots(int gpus, int gpu, const char* value, int* slot, int* allowed, size_t cap,
                              int* allowed_count, char* note, size_t note_len);

/* "LABEL (pid N, host H)": the holder `info` shows, as the command names it
   (an unlabelled v1 holder on this host by its process's name, else "an
   unnamed holder"). NULL info writes "". */
size_t offload_lock_describe_holder(const offload_lock_info_ex* info, char* buf, size_t len);

/* The lock's state as `offload-lock status` says it: "held by HOLDER for
   5m12s", "free", "free (stale lock of HOLDER: REASON)". */
size_t offload_lock_describe_state(const offload_lock_info_ex* info, char* buf, size_t len);

/* What a wait is for, as the command's waiting line says it after
   "waiting for ": "render (pid 4534), held for 5m12s; #2 in line, ETA ~20m"
   (several slots: "any of 2 GPUs: gpu0 ...; gpu1 ..."). `path` is the lock
   waited for (NULL or "": the default path); the ETA is this process's
   entry in its waiter registry (read now). For use inside on_progress. */
size_t offload_lock_describe_wait(const offload_lock_progress* progress, const char* path, char* buf, size_t len);

/* The errno behind the last OFFLOAD_LOCK_ERROR that offload_lock_acquire or
   offload_lock_acquire_ex returned on the calling thread (EACCES, ENOENT
   ...); 0 when that failure was not a system error, or after a success. */
int offload_lock_last_errno(void);

/* The library version ("0.1.0"), as written into meta.json's "tool". */
const char* offload_lock_version(void);

/* ---- The gpulease lease of current upstream runners (doc/protocol-gpulease.md) ---- */

/* Where the lease lives, as offload_lock::find_lease (lease.hpp). */
typedef struct offload_lock_lease_place {
  char dir[4096];     /* the lease directory */
  char gpu_dir[4096]; /* its parent, where the fencing counter lives */
  char root[4096];    /* the state root of the root rules; "" otherwise */
  char rule[32];      /* "explicit", "GPU_LOCK", "OFFLOAD_LOCK_LEASE_ROOT", "LOCAL_OFFLOAD_STATE_DIR", "default" */
  int exists;         /* a gpulease root exists (else no gpulease participant can run) */
  char refused[256];  /* why gpulease refuses this path; "" when it accepts it */
} offload_lock_lease_place;

enum {
  OFFLOAD_LOCK_LEASE_FREE = 0,   /* no claim */
  OFFLOAD_LOCK_LEASE_HELD = 1,   /* the holder lives by gpulease's rules (or its claim is being written) */
  OFFLOAD_LOCK_LEASE_STALE = 2,  /* the holder is provably gone: it may be taken over */
  OFFLOAD_LOCK_LEASE_UNKNOWN = 3 /* something could not be read: never taken over */
};

/* One view of the lease, as offload_lock::inspect_lease. Strings come from
   the claim file: escape them before a terminal sees them. */
typedef struct offload_lock_lease_info {
  char dir[4096];
  int state;           /* OFFLOAD_LOCK_LEASE_* */
  int in_progress;     /* an unparseable claim inside gpulease's 10 s grace */
  int readers_held;    /* what gpulease's own readers conclude */
  int64_t pid;         /* the holder's pid; 0 without a parseable claim */
  char lease_class[32];
  uint64_t epoch;      /* the lease's fencing epoch */
  char reason[1024];
  char origin[256];
  char job_id[256];
  int64_t acquired_at_ms;
  int64_t expires_at_ms; /* the end of the holder's declared window */
  int64_t renewed_at_ms; /* its last heartbeat */
  int64_t held_for_ms;
  int has_counter;     /* counter below is the last epoch issued */
  uint64_t counter;
  char why[1024];      /* the verdict in words */
} offload_lock_lease_info;

/* Places the lease (explicit_dir NULL or "": from the environment). Never
   blocks; never creates anything. Since 0.3. OFFLOAD_LOCK_OK, or
   OFFLOAD_LOCK_INVALID for a NULL place. */
int offload_lock_lease_find(const char* explicit_dir, offload_lock_lease_place* place);

/* Judges the lease at `dir` (NULL or "": where offload_lock_lease_find
   places it) now. Never blocks on the lease; changes nothing. Since 0.3.
   OFFLOAD_LOCK_OK, or OFFLOAD_LOCK_INVALID for a NULL info. */
int offload_lock_lease_inspect(const char* dir, offload_lock_lease_info* info);

/* The lease offload-lock's acquisitions of a plain lock (or of GPU slot 0)
   also take, judged now, as offload_lock::joined_lease: *joined is 1 and
   *info filled where they take one, *joined 0 (and *info zeroed) where
   they take none (no gpulease state root, GPU_LOCK placing the lease, a
   path gpulease refuses). *busy (when `busy` is not NULL): 1 when that
   lease keeps the GPU taken (held, or unknown), so that the GPU is busy
   whatever its lock says. Never blocks on the lease; changes nothing.
   Since 0.3. OFFLOAD_LOCK_OK, or OFFLOAD_LOCK_INVALID for a NULL info or
   joined. */
int offload_lock_lease_joined(offload_lock_lease_info* info, int* joined, int* busy);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* OFFLOAD_LOCK_H */
