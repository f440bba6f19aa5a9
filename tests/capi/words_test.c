/* The C API's grammar and words (offload_lock.h, "Since 0.3"): durations
   and priorities parsed as the command parses them, slot paths, lock
   identity, slot and GPU discovery (against a stand-in nvidia-smi on PATH),
   CUDA_VISIBLE_DEVICES, and the sentences naming a holder, a state and a
   wait. Usage: capi_words_test WORK_DIR. Exits non-zero naming each failed
   check. */
#define _GNU_SOURCE
#include <offload_lock/offload_lock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

static int64_t duration(const char* text) {
  int64_t ms = -12345;
  if (offload_lock_parse_duration(text, &ms) != OFFLOAD_LOCK_OK) return -999;
  return ms;
}

static void test_durations(void) {
  CHECK(duration("0") == 0);
  CHECK(duration("1.5") == 1500);
  CHECK(duration("500ms") == 500);
  CHECK(duration("1h30m") == 5400000);
  CHECK(duration("2m30s") == 150000);
  CHECK(duration("1d") == 86400000);
  CHECK(duration("1d12h") == 129600000);
  CHECK(duration("forever") == -1);
  const char* bad[] = {"", "+5", "-1", "5 s", "1h1h", "30m1h", "1w", "Forever", "5000d", "abc"};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
    int64_t ms = 7;
    if (offload_lock_parse_duration(bad[k], &ms) != OFFLOAD_LOCK_INVALID || ms != 7) {
      fprintf(stderr, "duration '%s' was accepted\n", bad[k]);
      ++failures;
    }
  }
  CHECK(offload_lock_parse_duration(NULL, NULL) == OFFLOAD_LOCK_INVALID);
  char buf[32];
  CHECK(offload_lock_describe_duration(312000, buf, sizeof buf) == 5 && strcmp(buf, "5m12s") == 0);
}

static void test_priorities(void) {
  int p = 99;
  CHECK(offload_lock_parse_priority("batch", &p) == OFFLOAD_LOCK_OK && p == OFFLOAD_LOCK_PRIORITY_BATCH);
  CHECK(offload_lock_parse_priority("interactive", &p) == OFFLOAD_LOCK_OK && p == 10);
  CHECK(offload_lock_parse_priority("normal", &p) == OFFLOAD_LOCK_OK && p == 0);
  CHECK(offload_lock_parse_priority("-100", &p) == OFFLOAD_LOCK_OK && p == OFFLOAD_LOCK_PRIORITY_MIN);
  CHECK(offload_lock_parse_priority("100", &p) == OFFLOAD_LOCK_OK && p == OFFLOAD_LOCK_PRIORITY_MAX);
  p = 99;
  const char* bad[] = {"+5", "101", "-101", "", " 5", "5 ", "Batch", "1.0", "0x10"};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k)
    if (offload_lock_parse_priority(bad[k], &p) != OFFLOAD_LOCK_INVALID || p != 99) {
      fprintf(stderr, "priority '%s' was accepted\n", bad[k]);
      ++failures;
    }
}

static void test_paths(const char* dir) {
  char lock[4096], buf[4096], other[4096], a[4096], b[4096];
  snprintf(lock, sizeof lock, "%s/gpu.lock", dir);
  CHECK(offload_lock_gpu_slot_path(lock, 0, buf, sizeof buf) == strlen(lock) && strcmp(buf, lock) == 0);
  size_t n = offload_lock_gpu_slot_path(lock, 3, NULL, 0);
  CHECK(n == strlen(lock) + 5);
  CHECK(offload_lock_gpu_slot_path(lock, 3, buf, n + 1) == n);
  CHECK(strlen(buf) == n && strcmp(buf + strlen(lock), ".gpu3") == 0);
  CHECK(offload_lock_gpu_slot_path(lock, 3, buf, n) == n && buf[0] == '\0'); /* too small: nothing */

  /* One identity per lock directory, whatever path reaches it. */
  snprintf(other, sizeof other, "%s/sub", dir);
  CHECK(mkdir(other, 0755) == 0);
  snprintf(buf, sizeof buf, "%s/link", dir);
  CHECK(symlink(dir, buf) == 0);
  snprintf(other, sizeof other, "%s/sub/../gpu.lock", dir);
  offload_lock_lock_identity(lock, a, sizeof a);
  offload_lock_lock_identity(other, b, sizeof b);
  CHECK(strcmp(a, b) == 0);
  snprintf(other, sizeof other, "%s/link/gpu.lock", dir);
  offload_lock_lock_identity(other, b, sizeof b);
  CHECK(strcmp(a, b) == 0);
  CHECK(strstr(a, "/gpu.lock") != NULL && strchr(a, ':') != NULL);
  snprintf(other, sizeof other, "%s/gpu2.lock", dir);
  offload_lock_lock_identity(other, b, sizeof b);
  CHECK(strcmp(a, b) != 0);

  /* Slots that exist beside the lock. */
  CHECK(offload_lock_slot_count(lock) == 1);
  snprintf(buf, sizeof buf, "%s.gpu2", lock);
  CHECK(mkdir(buf, 0755) == 0);
  CHECK(offload_lock_slot_count(lock) == 3);
}

/* nvidia-smi on PATH: a stand-in listing two GPUs, each with a UUID. */
static void fake_nvidia_smi(const char* dir) {
  char bin[4096], script[4096], path[8192];
  snprintf(bin, sizeof bin, "%s/bin", dir);
  CHECK(mkdir(bin, 0755) == 0);
  snprintf(script, sizeof script, "%s/nvidia-smi", bin);
  FILE* f = fopen(script, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs("#!/bin/sh\n"
        "echo 'GPU 0: Fake A (UUID: GPU-aaaa1111-0000-0000-0000-000000000000)'\n"
        "echo 'GPU 1: Fake B (UUID: GPU-bbbb2222-0000-0000-0000-000000000000)'\n",
        f);
  fclose(f);
  CHECK(chmod(script, 0755) == 0);
  snprintf(path, sizeof path, "%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
  setenv("PATH", path, 1);
}

static void test_gpus(const char* dir) {
  fake_nvidia_smi(dir);
  CHECK(offload_lock_gpu_count() == 2);
  int idx[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  char ignored[64] = "x";
  unsetenv("CUDA_VISIBLE_DEVICES");
  CHECK(offload_lock_visible_gpus(NULL, idx, 8, ignored, sizeof ignored) == -1);
  setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,0", 1);
  CHECK(offload_lock_visible_gpus(NULL, idx, 8, ignored, sizeof ignored) == 2);
  CHECK(idx[0] == 1 && idx[1] == 0 && ignored[0] == '\0');
  /* The first entry naming no GPU ends the list, as CUDA reads it. */
  CHECK(offload_lock_visible_gpus("1,7,0", idx, 8, ignored, sizeof ignored) == 1);
  CHECK(idx[0] == 1 && strcmp(ignored, "7") == 0);
  CHECK(offload_lock_visible_gpus("", idx, 8, ignored, sizeof ignored) == 0);
  unsetenv("CUDA_VISIBLE_DEVICES");

  /* The slots an acquisition may take, as the command chooses them. */
  int slot = 7, n = 7;
  char note[256] = "x";
  CHECK(offload_lock_choose_slots(2, -1, NULL, &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_OK);
  CHECK(slot == -1 && n == -1 && note[0] == '\0'); /* unset: every slot */
  CHECK(offload_lock_choose_slots(4, -1, "0,3,GPU-bbbb", &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_OK);
  /* 3 names no GPU of the stand-in: CUDA ignores it and what follows. */
  CHECK(n == 1 && idx[0] == 0 && slot == 0 && strstr(note, "'3' names no GPU") != NULL);
  CHECK(offload_lock_choose_slots(4, -1, "GPU-bbbb,0", &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_OK);
  CHECK(n == 2 && idx[0] == 1 && idx[1] == 0 && slot == -1);
  CHECK(offload_lock_choose_slots(4, -1, "GPU-bbbb", &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_OK);
  CHECK(n == 1 && idx[0] == 1 && slot == 1); /* one allowed: that one */
  CHECK(offload_lock_choose_slots(1, -1, "1", &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_INVALID);
  CHECK(strstr(note, "none of the 1 GPU slots") != NULL);
  CHECK(offload_lock_choose_slots(2, 0, "1", &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_INVALID);
  CHECK(strstr(note, "--gpu 0 is outside CUDA_VISIBLE_DEVICES=1") != NULL);
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  CHECK(offload_lock_choose_slots(2, -1, NULL, &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_OK);
  CHECK(slot == 1 && n == 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  CHECK(offload_lock_choose_slots(0, -1, NULL, &slot, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_INVALID);
  CHECK(offload_lock_choose_slots(2, -1, NULL, NULL, idx, 8, &n, note, sizeof note) == OFFLOAD_LOCK_INVALID);
}

static void test_describe(void) {
  offload_lock_info_ex i;
  memset(&i, 0, sizeof i);
  char buf[512];
  i.present = 1;
  i.held = 1;
  i.has_pid = 1;
  i.pid = 4534;
  i.held_for_ms = 312000;
  strcpy(i.label, "render");
  strcpy(i.host, "gpu1");
  CHECK(offload_lock_describe_holder(&i, buf, sizeof buf) > 0 && strcmp(buf, "render (pid 4534, host gpu1)") == 0);
  offload_lock_describe_state(&i, buf, sizeof buf);
  CHECK(strcmp(buf, "held by render (pid 4534, host gpu1) for 5m12s") == 0);

  /* A holder with no label (a v1 runner) on this host: its process's name. */
  offload_lock_info_ex v1;
  memset(&v1, 0, sizeof v1);
  v1.present = v1.held = v1.has_pid = 1;
  v1.pid = getpid();
  char comm[64] = "";
  FILE* f = fopen("/proc/self/comm", "r");
  if (f) {
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
  }
  char want[128];
  snprintf(want, sizeof want, "%s (pid %d)", comm, (int)getpid());
  offload_lock_describe_holder(&v1, buf, sizeof buf);
  CHECK(comm[0] && strcmp(buf, want) == 0);
  v1.pid = 0;
  v1.has_pid = 0;
  offload_lock_describe_holder(&v1, buf, sizeof buf);
  CHECK(strcmp(buf, "an unnamed holder (pid unknown)") == 0);

  offload_lock_info_ex stale = i;
  stale.held = 0;
  stale.has_stale = 1;
  strcpy(stale.stale, "holder pid 4534 is dead");
  offload_lock_describe_state(&stale, buf, sizeof buf);
  CHECK(strcmp(buf, "free (stale lock of render (pid 4534, host gpu1): holder pid 4534 is dead)") == 0);
  offload_lock_info_ex none;
  memset(&none, 0, sizeof none);
  offload_lock_describe_state(&none, buf, sizeof buf);
  CHECK(strcmp(buf, "free") == 0);

  offload_lock_progress p;
  memset(&p, 0, sizeof p);
  p.waited_ms = 12000;
  p.holder_count = 1;
  p.holders = &i;
  p.position = 2;
  offload_lock_describe_wait(&p, "/nonexistent-dir/gpu.lock", buf, sizeof buf);
  CHECK(strcmp(buf, "render (pid 4534, host gpu1), held for 5m12s; #2 in line") == 0);
  p.position = 0;
  offload_lock_describe_wait(&p, "/nonexistent-dir/gpu.lock", buf, sizeof buf);
  CHECK(strcmp(buf, "render (pid 4534, host gpu1), held for 5m12s") == 0);
  CHECK(offload_lock_describe_holder(NULL, buf, sizeof buf) == 0 && buf[0] == '\0');
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: capi_words_test WORK_DIR\n");
    return 2;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/words-XXXXXX", argv[1]);
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_durations();
  test_priorities();
  test_paths(dir);
  test_gpus(dir);
  test_describe();
  if (failures) return 1;
  printf("capi words: all checks passed\n");
  return 0;
}
