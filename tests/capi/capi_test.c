/* The C API, from C: acquire, inspect, busy from another thread's view,
   release, lost; then the full acquisition (offload_lock_acquire_ex) against
   a holder in a forked child process: the holder named in busy and timeout
   messages, cancel, progress, GPU slots, the waiter list, loss, child
   environment and pass-through; then the queue (test_queue): priority and
   expect_ms recorded, waiters in serving order with positions and ETAs,
   the yield request, 0.2-sized options; then the gpulease lease taken
   with the lock (test_lease): its class from lease_class, read only when
   the options' size covers it, and offload_lock_lease_joined. Exits
   non-zero after the checks when any failed, naming each. */
#define _GNU_SOURCE /* pipe2 */
#include <offload_lock/offload_lock.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The test's ends of every helper process's pipes. They are close-on-exec,
   and a holder (forked, not exec'd) closes them first thing: a helper that
   kept another's release pipe open would keep that one from seeing end of
   file. */
static int parent_ends[64];
static size_t parent_end_count = 0;

static void remember_end(int fd) {
  if (parent_end_count < sizeof parent_ends / sizeof parent_ends[0]) parent_ends[parent_end_count++] = fd;
}

static void forget_end(int fd) {
  for (size_t k = 0; k < parent_end_count; ++k)
    if (parent_ends[k] == fd) parent_ends[k] = parent_ends[--parent_end_count];
}

/* A holder in another process: takes `lock_path` with `label`, says "1" on
   its pipe once it holds it, and releases when its stdin pipe closes. */
typedef struct holder {
  pid_t pid;
  int release_w; /* close to make it release */
} holder;

static holder start_holder(const char* lock_path, const char* label) {
  int up[2], down[2];
  holder h = {-1, -1};
  if (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0) return h;
  pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    for (size_t k = 0; k < parent_end_count; ++k) close(parent_ends[k]);
    offload_lock_handle* l = NULL;
    char m[512];
    if (offload_lock_acquire(lock_path, 10000, label, &l, m, sizeof m) != OFFLOAD_LOCK_OK) _exit(3);
    if (write(up[1], "1", 1) != 1) _exit(4);
    char c;
    while (read(down[0], &c, 1) > 0) {
    }
    offload_lock_release(l);
    _exit(0);
  }
  close(up[1]);
  close(down[0]);
  char c = 0;
  if (read(up[0], &c, 1) != 1 || c != '1') {
    waitpid(pid, NULL, 0);
    close(up[0]);
    close(down[1]);
    return h;
  }
  close(up[0]);
  h.pid = pid;
  h.release_w = down[1];
  remember_end(h.release_w);
  return h;
}

static int stop_holder(holder h) {
  int st = 0;
  forget_end(h.release_w);
  close(h.release_w);
  waitpid(h.pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

typedef struct progress_seen {
  int calls, changed_calls;
  int position;
  int64_t holder_pid;
  char holder_label[64];
} progress_seen;

static void on_progress(const offload_lock_progress* p, void* user) {
  progress_seen* s = (progress_seen*)user;
  ++s->calls;
  if (p->changed) ++s->changed_calls;
  s->position = p->position;
  if (p->holder_count > 0) {
    s->holder_pid = p->holders[0].pid;
    snprintf(s->holder_label, sizeof s->holder_label, "%s", p->holders[0].label);
  }
}

static volatile int lost_calls = 0;
static char lost_message[512];
static void on_lost(const char* message, void* user) {
  (void)user;
  snprintf(lost_message, sizeof lost_message, "%s", message);
  __atomic_add_fetch(&lost_calls, 1, __ATOMIC_SEQ_CST);
}

/* A thread waiting through offload_lock_acquire_ex with a cancel pipe. */
typedef struct waiting {
  offload_lock_options o;
  int result;
  int64_t ended_ms;
  char message[512];
} waiting;

static void* wait_thread(void* arg) {
  waiting* w = (waiting*)arg;
  offload_lock_handle* h = NULL;
  w->result = offload_lock_acquire_ex(&w->o, &h, w->message, sizeof w->message);
  w->ended_ms = now_ms();
  if (h) offload_lock_release(h);
  return NULL;
}

static void test_full_acquisition(const char* dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/ex.lock", dir);
  char message[512] = "";

  offload_lock_options o;
  offload_lock_options_init(&o);
  CHECK(o.size == sizeof o && o.wait_ms < 0 && o.gpus == 1 && o.gpu == -1 && o.cancel_fd == -1);
  {
    /* A program built against 0.2's header has a smaller struct: the
       entry point it calls (the function, not this header's macro) writes
       0.2's fields only, and init_sized no more than it is told. */
    union {
      offload_lock_options o;
      unsigned char b[sizeof(offload_lock_options) + 16];
    } raw;
    const size_t v02 = offsetof(offload_lock_options, priority);
    memset(raw.b, 0xAB, sizeof raw.b);
    (offload_lock_options_init)(&raw.o);
    int intact = 1;
    for (size_t k = v02; k < sizeof raw.b; ++k) intact = intact && raw.b[k] == 0xAB;
    CHECK(intact && raw.o.size == v02 && raw.o.gpu == -1);
    memset(raw.b, 0xAB, sizeof raw.b);
    offload_lock_options_init_sized(&raw.o, v02 + sizeof(int));
    intact = 1;
    for (size_t k = v02 + sizeof(int); k < sizeof raw.b; ++k) intact = intact && raw.b[k] == 0xAB;
    CHECK(intact && raw.o.priority == 0);
  }
  o.path = path;
  o.label = "ex-job";
  o.wait_ms = 0;
  o.ttl_ms = 60000;

  /* Uncontended: label recorded, path and slot reported, child environment. */
  offload_lock_handle* h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (!h) return;
  CHECK(strcmp(offload_lock_path(h), path) == 0);
  CHECK(offload_lock_gpu(h) == 0 && !offload_lock_nested(h) && !offload_lock_inherited(h));
  CHECK(offload_lock_still_held(h));
  offload_lock_info_ex ie;
  CHECK(offload_lock_inspect_ex(path, 0, &ie) == OFFLOAD_LOCK_OK);
  CHECK(ie.held && ie.has_pid && ie.pid == (int64_t)getpid() && strcmp(ie.label, "ex-job") == 0);
  CHECK(strcmp(ie.token, offload_lock_token(h)) == 0 && strcmp(ie.path, path) == 0);
  CHECK(ie.owner_uid == (int64_t)getuid() && !ie.has_stale && ie.go_held && !ie.node_stale);
  CHECK(strncmp(ie.tool, "offload-lock/", 13) == 0);
  char env[8192];
  size_t n = offload_lock_child_environment(h, env, sizeof env);
  CHECK(n > 0 && n < sizeof env);
  char want[4200];
  snprintf(want, sizeof want, "OFFLOAD_LOCK_PATH=%s", path);
  CHECK(strcmp(env, want) == 0);
  CHECK(strncmp(env + strlen(env) + 1, "OFFLOAD_LOCK_TOKEN=", 19) == 0);
  CHECK(strcmp(env + strlen(env) + 1 + 19, offload_lock_token(h)) == 0);

  /* A forked child given that environment passes straight through and
     leaves the lock in place. */
  pid_t kid = fork();
  if (kid == 0) {
    setenv("OFFLOAD_LOCK_PATH", path, 1);
    setenv("OFFLOAD_LOCK_TOKEN", env + strlen(env) + 1 + 19, 1);
    offload_lock_options ko;
    offload_lock_options_init(&ko);
    ko.path = path;
    ko.wait_ms = 0;
    offload_lock_handle* k = NULL;
    char m[512];
    /* The library's in-process gate was copied from the parent's thread that
       holds the lock; this thread is that thread, so this is nested or
       inherited, never a second claim. */
    int r = offload_lock_acquire_ex(&ko, &k, m, sizeof m);
    int ok = r == OFFLOAD_LOCK_OK && (offload_lock_inherited(k) || offload_lock_nested(k));
    if (k) offload_lock_release(k);
    _exit(ok ? 0 : 1);
  }
  int st = -1;
  waitpid(kid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(offload_lock_still_held(h));
  CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);

  /* Held by another process: busy and timed out name the holder. */
  holder other = start_holder(path, "render-video");
  CHECK(other.pid > 0);
  if (other.pid <= 0) return;
  h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_BUSY);
  CHECK(h == NULL);
  if (h) fprintf(stderr, "took it while pid %d holds (nested %d, inherited %d)\n", (int)other.pid,
                 offload_lock_nested(h), offload_lock_inherited(h));
  CHECK(strstr(message, "busy: ") == message);
  CHECK(strstr(message, "held by render-video (pid ") != NULL);
  o.wait_ms = 150;
  progress_seen seen = {0, 0, 0, 0, ""};
  o.on_progress = on_progress;
  o.progress_user = &seen;
  o.progress_every_ms = 50;
  int64_t t0 = now_ms();
  const int timed = offload_lock_acquire_ex(&o, &h, message, sizeof message);
  CHECK(timed == OFFLOAD_LOCK_TIMED_OUT);
  if (timed != OFFLOAD_LOCK_TIMED_OUT) fprintf(stderr, "acquire said %d: %s\n", timed, message);
  CHECK(now_ms() - t0 >= 140);
  CHECK(strstr(message, "timed out: ") == message);
  CHECK(strstr(message, "held by render-video (pid ") != NULL);
  CHECK(seen.changed_calls == 1 && seen.calls >= 2);
  CHECK(seen.holder_pid == (int64_t)other.pid && strcmp(seen.holder_label, "render-video") == 0);
  CHECK(seen.position == 1); /* the only waiter: next */
  o.on_progress = NULL;

  /* Old entry point, same message. */
  CHECK(offload_lock_acquire(path, 0, NULL, &h, message, sizeof message) == OFFLOAD_LOCK_BUSY);
  CHECK(strstr(message, "held by render-video") != NULL);

  /* GPU slots: slot 0 is held, so two slots give slot 1; slot 1 alone too. */
  o.wait_ms = 0;
  o.gpus = 2;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (h) {
    CHECK(offload_lock_gpu(h) == 1);
    char slot1[4200];
    snprintf(slot1, sizeof slot1, "%s.gpu1", path);
    CHECK(strcmp(offload_lock_path(h), slot1) == 0);
    offload_lock_handle* h2 = NULL;
    /* Both slots held now (one by another thread of this process): busy
       names them all. */
    waiting both;
    memset(&both, 0, sizeof both);
    both.o = o;
    pthread_t bt;
    CHECK(pthread_create(&bt, NULL, wait_thread, &both) == 0);
    pthread_join(bt, NULL);
    CHECK(both.result == OFFLOAD_LOCK_BUSY);
    CHECK(strstr(both.message, "busy: all 2 GPU slots of ") == both.message);
    CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
    o.gpus = 1;
    o.gpu = 1;
    CHECK(offload_lock_acquire_ex(&o, &h2, message, sizeof message) == OFFLOAD_LOCK_OK);
    CHECK(h2 && offload_lock_gpu(h2) == 1);
    if (h2) offload_lock_release(h2);
    o.gpu = -1;
  }
  /* Allowed slots: of three, slot 0 held, only 0 and 2 allowed: slot 2,
     never slot 1; a slot outside the count is refused. */
  {
    const int allowed[2] = {2, 0};
    o.gpus = 3;
    o.allowed_gpus = allowed;
    o.allowed_gpu_count = 2;
    offload_lock_handle* h3 = NULL;
    CHECK(offload_lock_acquire_ex(&o, &h3, message, sizeof message) == OFFLOAD_LOCK_OK);
    CHECK(h3 && offload_lock_gpu(h3) == 2);
    if (h3) offload_lock_release(h3);
    const int outside[1] = {3};
    o.allowed_gpus = outside;
    o.allowed_gpu_count = 1;
    CHECK(offload_lock_acquire_ex(&o, &h3, message, sizeof message) == OFFLOAD_LOCK_INVALID);
    o.allowed_gpus = NULL;
    o.allowed_gpu_count = 0;
  }
  o.gpus = 1;

  /* Cancel: a waiter (registered in the waiter list once it has waited a
     while) gives up as soon as its cancel pipe is written, and leaves no
     waiter entry behind. */
  int cancel[2];
  CHECK(pipe(cancel) == 0);
  waiting w;
  memset(&w, 0, sizeof w);
  w.o = o;
  /* Far longer than the cancel may take: a wait that ignored its cancel
     pipe would end TIMED_OUT, not CANCELLED, after these 30 s. */
  w.o.wait_ms = 30000;
  w.o.label = "ex-waiter";
  w.o.cancel_fd = cancel[0];
  pthread_t th;
  CHECK(pthread_create(&th, NULL, wait_thread, &w) == 0);
  size_t count = 0;
  offload_lock_waiter ws[4];
  int64_t until = now_ms() + 5000;
  while (now_ms() < until) {
    CHECK(offload_lock_waiters(path, ws, 4, &count) == OFFLOAD_LOCK_OK);
    if (count > 0) break;
    usleep(10000);
  }
  CHECK(count == 1);
  if (count == 1) {
    CHECK(ws[0].pid == (int64_t)getpid() && strcmp(ws[0].label, "ex-waiter") == 0);
    CHECK(ws[0].gpu == -1 && ws[0].gpus == 1 && ws[0].since_ms > 0 && ws[0].waited_ms >= 0);
  }
  int64_t sent = now_ms();
  CHECK(write(cancel[1], "x", 1) == 1);
  pthread_join(th, NULL);
  CHECK(w.result == OFFLOAD_LOCK_CANCELLED);
  /* The result above is what proves the cancel; the time only says it was
     not the deadline that ended the wait, with room for a loaded machine. */
  CHECK(w.ended_ms - sent < 15000);
  CHECK(offload_lock_waiters(path, ws, 4, &count) == OFFLOAD_LOCK_OK && count == 0);
  CHECK(offload_lock_waiters(path, NULL, 0, NULL) == OFFLOAD_LOCK_INVALID);
  close(cancel[0]);
  close(cancel[1]);

  /* The holder releases: a waiter with no deadline gets the lock at once. */
  memset(&w, 0, sizeof w);
  w.o = o;
  w.o.wait_ms = 60000;
  CHECK(pthread_create(&th, NULL, wait_thread, &w) == 0);
  usleep(50000);
  CHECK(stop_holder(other) == 0);
  pthread_join(th, NULL);
  /* OK, not TIMED_OUT: the release ended the wait. How soon is the
     benchmark's business, not a test's on a loaded machine. */
  CHECK(w.result == OFFLOAD_LOCK_OK);

  /* Loss: someone else removes the lock; on_lost says so, release says LOST,
     and no call comes after release. */
  o.wait_ms = 0;
  o.on_lost = on_lost;
  h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (h) {
    char moved[4200], cmd[9000];
    snprintf(moved, sizeof moved, "%s/ex.lock.taken", dir);
    CHECK(rename(path, moved) == 0);
    until = now_ms() + 5000;
    while (!__atomic_load_n(&lost_calls, __ATOMIC_SEQ_CST) && now_ms() < until) usleep(5000);
    CHECK(lost_calls == 1);
    CHECK(strstr(lost_message, "ex.lock") != NULL);
    CHECK(!offload_lock_still_held(h));
    CHECK(offload_lock_release(h) == OFFLOAD_LOCK_LOST);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", moved);
    CHECK(system(cmd) == 0);
  }

  /* The default path follows GPU_LOCK. */
  setenv("GPU_LOCK", path, 1);
  char dp[4200];
  CHECK(offload_lock_default_path(dp, sizeof dp) == strlen(path) && strcmp(dp, path) == 0);
  CHECK(offload_lock_default_path(NULL, 0) == strlen(path));
  unsetenv("GPU_LOCK");

  /* Bad options. */
  offload_lock_options bad;
  memset(&bad, 0, sizeof bad);
  CHECK(offload_lock_acquire_ex(&bad, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  offload_lock_options_init(&bad);
  bad.path = path;
  bad.gpus = 0;
  CHECK(offload_lock_acquire_ex(&bad, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_last_errno() == 0);
  char d[32];
  CHECK(offload_lock_describe_duration(312000, d, sizeof d) == 5 && strcmp(d, "5m12s") == 0);
  CHECK(strlen(offload_lock_version()) > 0);
}

/* ---- The queue ---- */

/* Reads one line (without its '\n') from `fd` within `timeout_ms`; 0 on
   timeout or end of file. */
static int read_line(int fd, char* buf, size_t cap, int timeout_ms) {
  size_t n = 0;
  int64_t until = now_ms() + timeout_ms;
  while (n + 1 < cap) {
    struct pollfd p = {fd, POLLIN, 0};
    int left = (int)(until - now_ms());
    if (left < 0 || poll(&p, 1, left) <= 0) break;
    char c;
    if (read(fd, &c, 1) != 1) break;
    if (c == '\n') {
      buf[n] = '\0';
      return 1;
    }
    buf[n++] = c;
  }
  buf[n] = '\0';
  return 0;
}

static void say(int fd, const char* line) {
  /* One write per line, below PIPE_BUF: lines from two threads never mix. */
  if (write(fd, line, strlen(line)) < 0) _exit(5);
}

static void report_yield(const offload_lock_yield_request* r, void* user) {
  char line[1200];
  (void)user;
  snprintf(line, sizeof line, "yield %lld %d %s\n", (long long)r->pid, r->priority, r->label);
  say(1, line);
}

/* A participant in a process of its own: `capi_test --participant PATH
   LABEL PRIORITY EXPECT_MS CAN_YIELD GPU GPUS` waits for PATH (GPU slot
   GPU, or the first free of GPUS) with PRIORITY and EXPECT_MS (and
   on_yield when CAN_YIELD is 1), and says on stdout "acquired" once it
   holds the lock, "yield PID PRIORITY LABEL" when asked to make way, and
   "requested N" (offload_lock_yield_requested) just before it releases,
   which it does when its stdin ends. A new process image, not a fork: a
   forked copy of this multi-threaded test would share its library state
   (under ThreadSanitizer, which installs no fork handlers, its heartbeat
   thread would not run). */
static int participant_main(char** argv) {
  offload_lock_options o;
  offload_lock_options_init(&o);
  o.path = argv[2];
  o.label = argv[3];
  o.wait_ms = 20000;
  o.priority = atoi(argv[4]);
  o.expect_ms = atoll(argv[5]);
  if (atoi(argv[6])) o.on_yield = report_yield;
  o.gpu = atoi(argv[7]);
  o.gpus = atoi(argv[8]);
  offload_lock_handle* h = NULL;
  char m[512], line[640];
  int r = offload_lock_acquire_ex(&o, &h, m, sizeof m);
  snprintf(line, sizeof line, r == OFFLOAD_LOCK_OK ? "acquired\n" : "failed %d: %s\n", r, m);
  say(1, line);
  if (r != OFFLOAD_LOCK_OK) return 3;
  char c;
  while (read(0, &c, 1) > 0) {
  }
  snprintf(line, sizeof line, "requested %d\n", offload_lock_yield_requested(h));
  say(1, line);
  return offload_lock_release(h) == OFFLOAD_LOCK_OK ? 0 : 6;
}

typedef struct participant {
  pid_t pid;
  int out_r;
  int release_w;
} participant;

static participant start_participant(const char* path, const char* label, int priority, int64_t expect_ms,
                                     int can_yield, int gpu, int gpus) {
  int up[2], down[2];
  participant p = {-1, -1, -1};
  if (pipe2(up, O_CLOEXEC) != 0 || pipe2(down, O_CLOEXEC) != 0) return p;
  char prio[16], expect[32], yield[4], gpu_s[16], gpus_s[16];
  snprintf(prio, sizeof prio, "%d", priority);
  snprintf(expect, sizeof expect, "%lld", (long long)expect_ms);
  snprintf(yield, sizeof yield, "%d", can_yield ? 1 : 0);
  snprintf(gpu_s, sizeof gpu_s, "%d", gpu);
  snprintf(gpus_s, sizeof gpus_s, "%d", gpus);
  pid_t pid = fork();
  if (pid == 0) {
    /* dup2 clears close-on-exec on the copies it makes. */
    if (dup2(down[0], 0) < 0 || dup2(up[1], 1) < 0) _exit(126);
    execl("/proc/self/exe", "capi_test", "--participant", path, label, prio, expect, yield, gpu_s, gpus_s,
          (char*)NULL);
    _exit(127);
  }
  close(up[1]);
  close(down[0]);
  p.pid = pid;
  p.out_r = up[0];
  p.release_w = down[1];
  remember_end(p.out_r);
  remember_end(p.release_w);
  return p;
}

static int stop_participant(participant* p) {
  int st = 0;
  if (p->pid <= 0) return -1;
  if (p->release_w >= 0) {
    forget_end(p->release_w);
    close(p->release_w);
  }
  waitpid(p->pid, &st, 0);
  forget_end(p->out_r);
  close(p->out_r);
  p->pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static size_t wait_for_waiters(const char* path, size_t want) {
  size_t count = 0;
  int64_t until = now_ms() + 5000;
  while (now_ms() < until) {
    if (offload_lock_waiters_ex(path, NULL, 0, 0, &count) == OFFLOAD_LOCK_OK && count >= want) break;
    usleep(5000);
  }
  return count;
}

static void test_queue(const char* dir) {
  char path[4096], line[1200], message[512] = "";
  snprintf(path, sizeof path, "%s/queue.lock", dir);

  /* Priority and expect_ms are checked and recorded; no on_yield: never
     asked. */
  offload_lock_options o;
  offload_lock_options_init(&o);
  CHECK(o.priority == 0 && o.expect_ms == 0 && o.on_yield == NULL && o.yield_user == NULL);
  o.path = path;
  o.wait_ms = 0;
  offload_lock_handle* h = NULL;
  o.priority = 101;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(h == NULL && strstr(message, "priority 101") != NULL);
  o.priority = -101;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  o.priority = 0;
  o.expect_ms = -1;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(strstr(message, "expect_ms") != NULL);
  o.priority = -100;
  o.expect_ms = 5000;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  offload_lock_queue_info q;
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  offload_lock_info_ex ie;
  CHECK(offload_lock_inspect_queue(path, 0, &ie, &q) == OFFLOAD_LOCK_OK);
  CHECK(q.size == sizeof q && ie.held && ie.pid == (int64_t)getpid());
  CHECK(q.priority == -100 && q.expect_ms == 5000 && q.free_in_ms > 0 && q.free_in_ms <= 5000);
  CHECK(!q.can_yield && !q.has_yield_request);
  if (h) {
    CHECK(!offload_lock_yield_requested(h));
    CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  }
  CHECK(!offload_lock_yield_requested(NULL));
  CHECK(offload_lock_inspect_queue(path, 0, NULL, &q) == OFFLOAD_LOCK_OK);
  CHECK(q.priority == 0 && q.expect_ms == 0 && q.free_in_ms == -1 && !q.can_yield);
  q.size = sizeof q - 1;
  CHECK(offload_lock_inspect_queue(path, 0, NULL, &q) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_inspect_queue(path, 0, NULL, NULL) == OFFLOAD_LOCK_INVALID);

  /* A program built against 0.2's header passes 0.2's size: the fields after
     lost_user are not read (this priority would be refused). */
  offload_lock_options old;
  offload_lock_options_init(&old);
  old.size = offsetof(offload_lock_options, priority);
  old.path = path;
  old.wait_ms = 0;
  old.priority = 1000;
  old.expect_ms = -5;
  h = NULL;
  CHECK(offload_lock_acquire_ex(&old, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (h) CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  old.size = offsetof(offload_lock_options, lost_user);
  CHECK(offload_lock_acquire_ex(&old, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);

  /* max_hold_ms: 0 by default, negative refused, not read from a smaller
     size; once it passes, offload_lock_max_hold_passed() says so. */
  CHECK(o.max_hold_ms == 0);
  o.priority = 0;
  o.expect_ms = 0;
  o.max_hold_ms = -1;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(strstr(message, "max_hold_ms") != NULL);
  old.size = offsetof(offload_lock_options, max_hold_ms);
  old.priority = 0;
  old.expect_ms = 0;
  old.max_hold_ms = -1;
  h = NULL;
  CHECK(offload_lock_acquire_ex(&old, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (h) CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  o.max_hold_ms = 50;
  h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  if (h) {
    int passed = 0;
    for (int k = 0; k < 1000 && !passed; ++k) {
      passed = offload_lock_max_hold_passed(h);
      if (!passed) usleep(10000);
    }
    CHECK(passed);
    CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  }
  CHECK(!offload_lock_max_hold_passed(NULL));
  o.max_hold_ms = 0;

  /* A holder in another process that declared 60 s and can yield; two
     waiters in two more: A (priority 0, 10 s) queues first, B (priority 10,
     20 s) second, and is served first. */
  participant yielder = start_participant(path, "holder", 0, 60000, 1, -1, 1);
  CHECK(yielder.pid > 0 && read_line(yielder.out_r, line, sizeof line, 10000) && strcmp(line, "acquired") == 0);
  if (strcmp(line, "acquired") != 0) fprintf(stderr, "the holder said: %s\n", line);
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  CHECK(offload_lock_inspect_queue(path, 0, &ie, &q) == OFFLOAD_LOCK_OK);
  CHECK(ie.held && ie.pid == (int64_t)yielder.pid);
  if (!ie.held || ie.pid != (int64_t)yielder.pid)
    fprintf(stderr, "held %d pid %lld (the holder is %lld)\n", ie.held, (long long)ie.pid, (long long)yielder.pid);
  CHECK(q.priority == 0 && q.expect_ms == 60000 && q.free_in_ms > 0 && q.free_in_ms <= 60000);
  CHECK(q.can_yield && !q.has_yield_request);

  participant a = start_participant(path, "batch-a", 0, 10000, 0, -1, 1);
  CHECK(wait_for_waiters(path, 1) == 1);
  /* A waiter of the holder's own priority asks nothing. */
  CHECK(!read_line(yielder.out_r, line, sizeof line, 200));
  participant b = start_participant(path, "urgent-b", 10, 20000, 0, -1, 1);
  CHECK(wait_for_waiters(path, 2) == 2);

  offload_lock_waiter_ex ws[4];
  size_t count = 0;
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0], 4, &count) == OFFLOAD_LOCK_OK && count == 2);
  if (count == 2) {
    CHECK(ws[0].waiter.pid == (int64_t)b.pid && strcmp(ws[0].waiter.label, "urgent-b") == 0);
    CHECK(ws[0].priority == 10 && ws[0].expect_ms == 20000 && ws[0].position == 1);
    CHECK(ws[0].eta_ms > 0 && ws[0].eta_ms <= 60000);
    CHECK(ws[1].waiter.pid == (int64_t)a.pid && ws[1].priority == 0 && ws[1].expect_ms == 10000);
    CHECK(ws[1].position == 2 && ws[1].eta_ms == ws[0].eta_ms + 20000);
  }
  offload_lock_waiter plain[4];
  CHECK(offload_lock_waiters(path, plain, 4, &count) == OFFLOAD_LOCK_OK && count == 2);
  CHECK(count == 2 && plain[0].pid == (int64_t)b.pid && plain[1].pid == (int64_t)a.pid);
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0] - 1, 4, &count) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0], 4, NULL) == OFFLOAD_LOCK_INVALID);

  /* The holder is asked once, for B; status names B. */
  char want[1200];
  snprintf(want, sizeof want, "yield %lld 10 urgent-b", (long long)b.pid);
  CHECK(read_line(yielder.out_r, line, sizeof line, 5000) && strcmp(line, want) == 0);
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  CHECK(offload_lock_inspect_queue(path, 0, NULL, &q) == OFFLOAD_LOCK_OK);
  CHECK(q.has_yield_request && q.yield_pid == (int64_t)b.pid && q.yield_priority == 10);
  CHECK(strcmp(q.yield_label, "urgent-b") == 0);

  /* The holder makes way: its next line is "requested 1", no second ask.
     B takes the lock, A keeps waiting until B is done. */
  forget_end(yielder.release_w);
  close(yielder.release_w);
  yielder.release_w = -1;
  CHECK(read_line(yielder.out_r, line, sizeof line, 5000) && strcmp(line, "requested 1") == 0);
  CHECK(stop_participant(&yielder) == 0);
  CHECK(read_line(b.out_r, line, sizeof line, 5000) && strcmp(line, "acquired") == 0);
  CHECK(!read_line(a.out_r, line, sizeof line, 300));
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0], 4, &count) == OFFLOAD_LOCK_OK && count == 1);
  if (count == 1) CHECK(ws[0].waiter.pid == (int64_t)a.pid && ws[0].position == 1 && ws[0].eta_ms > 10000);
  CHECK(stop_participant(&b) == 0);
  CHECK(read_line(a.out_r, line, sizeof line, 5000) && strcmp(line, "acquired") == 0);
  CHECK(stop_participant(&a) == 0);

  /* A holder that declared nothing: its waiters' ETA is unknown. */
  holder other = start_holder(path, "no-expectation");
  CHECK(other.pid > 0);
  participant c = start_participant(path, "c", 0, 1000, 0, -1, 1);
  CHECK(wait_for_waiters(path, 1) == 1);
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0], 4, &count) == OFFLOAD_LOCK_OK && count == 1);
  if (count == 1) CHECK(ws[0].position == 1 && ws[0].eta_ms == -1 && ws[0].expect_ms == 1000);
  memset(&q, 0, sizeof q);
  q.size = sizeof q;
  CHECK(offload_lock_inspect_queue(path, 0, NULL, &q) == OFFLOAD_LOCK_OK);
  CHECK(q.expect_ms == 0 && q.free_in_ms == -1 && !q.can_yield && !q.has_yield_request);

  /* Each GPU slot has a queue of its own: a waiter for slot 1 behind c is
     next for slot 1; a wait among both slots has no position. */
  char slot1[4200];
  snprintf(slot1, sizeof slot1, "%s.gpu1", path);
  holder other1 = start_holder(slot1, "slot-1-holder");
  CHECK(other1.pid > 0);
  participant d = start_participant(path, "d", 0, 0, 0, 1, 2);
  CHECK(wait_for_waiters(path, 2) == 2);
  participant e = start_participant(path, "e", 0, 0, 0, -1, 2);
  CHECK(wait_for_waiters(path, 3) == 3);
  CHECK(offload_lock_waiters_ex(path, ws, sizeof ws[0], 4, &count) == OFFLOAD_LOCK_OK && count == 3);
  /* (The list's order across slots is the library's; look them up.) */
  int seen_cde = 0;
  for (size_t k = 0; k < count && k < 4; ++k) {
    const offload_lock_waiter_ex* x = &ws[k];
    if (x->waiter.pid == (int64_t)c.pid) {
      seen_cde |= 1;
      CHECK(x->position == 1);
    } else if (x->waiter.pid == (int64_t)d.pid) {
      seen_cde |= 2;
      CHECK(x->waiter.gpu == 1 && x->position == 1 && x->eta_ms == -1);
    } else if (x->waiter.pid == (int64_t)e.pid) {
      seen_cde |= 4;
      CHECK(x->waiter.gpus == 2 && x->position == 3 && x->eta_ms == -1);  /* behind c (slot 0) and d (slot 1) */
    }
  }
  CHECK(seen_cde == 7);
  kill(d.pid, SIGKILL);
  kill(e.pid, SIGKILL);
  CHECK(stop_participant(&d) == 128 + SIGKILL && stop_participant(&e) == 128 + SIGKILL);
  if (other1.pid > 0) CHECK(stop_holder(other1) == 0);
  if (other.pid > 0) CHECK(stop_holder(other) == 0);
  CHECK(read_line(c.out_r, line, sizeof line, 5000) && strcmp(line, "acquired") == 0);
  CHECK(stop_participant(&c) == 0);
}

/* The lease every acquisition of a plain lock also holds where a gpulease
   state root exists (here OFFLOAD_LOCK_LEASE_ROOT): the class it records
   is lease_class ("media" when unset), a field read only when the caller's
   options are large enough to have it. offload_lock_lease_joined says
   whether acquisitions take a lease and whether it keeps the GPU busy. */
static int remove_entry(const char* p, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static void test_lease(const char* dir) {
  char root[4096], path[4096], message[512] = "";
  snprintf(root, sizeof root, "%s/lease-root-%d", dir, (int)getpid());
  snprintf(path, sizeof path, "%s/lease-%d.lock", dir, (int)getpid());
  offload_lock_lease_info li;
  int joined = -1, busy = -1;

  setenv("OFFLOAD_LOCK_LEASE_ROOT", root, 1);  /* not made yet: no root */
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(joined == 0 && busy == 0);
  CHECK(mkdir(root, 0755) == 0);
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(joined == 1 && busy == 0 && li.state == OFFLOAD_LOCK_LEASE_FREE);
  CHECK(strstr(li.dir, "/gpu/lease") != NULL && strncmp(li.dir, root, strlen(root)) == 0);
  CHECK(offload_lock_lease_joined(NULL, &joined, &busy) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_lease_joined(&li, NULL, &busy) == OFFLOAD_LOCK_INVALID);

  offload_lock_options o;
  offload_lock_options_init(&o);
  CHECK(o.lease_class == NULL);
  o.path = path;
  o.wait_ms = 0;
  o.label = "lease-class";
  o.lease_class = "text";
  offload_lock_handle* h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(joined == 1 && busy == 1 && li.state == OFFLOAD_LOCK_LEASE_HELD);
  CHECK(strcmp(li.lease_class, "text") == 0 && li.pid == (int64_t)getpid());
  CHECK(strcmp(li.origin, "offload-lock") == 0 && strcmp(li.reason, "lease-class") == 0);
  if (h) CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(joined == 1 && busy == 0);

  /* Neither media nor text: refused, naming the field. */
  o.lease_class = "video";
  h = NULL;
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_INVALID && h == NULL);
  CHECK(strstr(message, "lease_class") != NULL);

  /* A caller built against a header without the field: not read (this
     class would be refused), the lease is media. */
  o.size = offsetof(offload_lock_options, lease_class);
  CHECK(offload_lock_acquire_ex(&o, &h, message, sizeof message) == OFFLOAD_LOCK_OK);
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(busy == 1 && strcmp(li.lease_class, "media") == 0);
  if (h) CHECK(offload_lock_release(h) == OFFLOAD_LOCK_OK);

  /* GPU_LOCK places the lease in a directory both protocols would share:
     acquisitions take none there. */
  setenv("GPU_LOCK", path, 1);
  CHECK(offload_lock_lease_joined(&li, &joined, &busy) == OFFLOAD_LOCK_OK);
  CHECK(joined == 0 && busy == 0);
  unsetenv("GPU_LOCK");
  unsetenv("OFFLOAD_LOCK_LEASE_ROOT");
  CHECK(nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
}

int main(int argc, char** argv) {
  if (argc == 9 && strcmp(argv[1], "--participant") == 0) return participant_main(argv);
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
  CHECK(offload_lock_last_errno() == ENOENT);
  CHECK(offload_lock_acquire(path, 0, NULL, NULL, message, sizeof message) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_release(NULL) == OFFLOAD_LOCK_INVALID);

  test_full_acquisition(argv[1]);
  test_queue(argv[1]);
  test_lease(argv[1]);

  if (failures) return 1;
  printf("capi: all checks passed\n");
  return 0;
}
