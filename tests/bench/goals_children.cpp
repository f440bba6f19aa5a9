// The participants of section 9 (goals_bench.hpp): the benchmark binary
// re-executed as `offload-lock-bench --child g-... ARGS`. Each build of
// offload-lock is driven through its own shared library, loaded with
// dlopen(), so that this build and older ones run the same loop in the same
// kind of process. Line protocol on stdin/stdout as in children.cpp.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "goals_bench.hpp"
#include "offload_lock/offload_lock.h"
#include "util.hpp"

namespace bench::goals {

namespace {

void say(const std::string& s) { write_line_fd(1, s); }

int fail(const std::string& what) {
  say("e " + what);
  return 1;
}

// The two calls of the C API every build since 0.1 has with this signature.
struct opaque_handle;
using acquire_fn = int (*)(const char*, std::int64_t, const char*, opaque_handle**, char*, std::size_t);
using release_fn = int (*)(opaque_handle*);

// This build's C API as linked into this program: the control that shows
// whether loading a library with dlopen() changes anything.
int linked_acquire(const char* path, std::int64_t wait_ms, const char* label, opaque_handle** out, char* msg,
                   std::size_t len) {
  offload_lock_handle* h = nullptr;
  const int rc = offload_lock_acquire(path, wait_ms, label, &h, msg, len);
  *out = reinterpret_cast<opaque_handle*>(h);
  return rc;
}
int linked_release(opaque_handle* h) { return offload_lock_release(reinterpret_cast<offload_lock_handle*>(h)); }

// One way to take and give back the lock at a path.
class mechanism {
 public:
  // "dl:<shared library>", "linked", "flock" or "bare"; `error` says why not.
  mechanism(const std::string& spec, const std::string& path, std::string& error) : path_(path) {
    if (spec == "linked") {
      acquire_ = linked_acquire;
      release_ = linked_release;
    } else if (spec.rfind("dl:", 0) == 0) {
      lib_ = ::dlopen(spec.c_str() + 3, RTLD_NOW | RTLD_LOCAL);
      if (!lib_) {
        const char* e = ::dlerror();
        error = "dlopen " + spec.substr(3) + ": " + (e ? e : "?");
        return;
      }
      acquire_ = reinterpret_cast<acquire_fn>(::dlsym(lib_, "offload_lock_acquire"));
      release_ = reinterpret_cast<release_fn>(::dlsym(lib_, "offload_lock_release"));
      if (!acquire_ || !release_) error = spec.substr(3) + " lacks offload_lock_acquire/offload_lock_release";
    } else if (spec == "flock") {
      fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) error = "open " + path + ": " + std::strerror(errno);
    } else if (spec == "bare") {
      // The bare directory protocol: mkdir + meta.json, rmdir, and an inotify
      // watch on the parent for the lock's removal; no order among waiters.
      // The watch exists before the first mkdir, so no removal is missed.
      bare_ = true;
      const std::string parent = path.substr(0, path.rfind('/'));
      fd_ = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
      if (fd_ < 0 || ::inotify_add_watch(fd_, parent.c_str(), IN_DELETE) < 0)
        error = "inotify on " + parent + ": " + std::strerror(errno);
      meta_ = path + "/meta.json";
      body_ = "{\"pid\":" + std::to_string(::getpid()) + ",\"label\":\"bare\"}\n";
    } else {
      error = "unknown mechanism " + spec;
    }
  }
  ~mechanism() {
    if (fd_ >= 0) ::close(fd_);
    // The library stays loaded: its heartbeat thread may still be winding down.
  }
  mechanism(const mechanism&) = delete;
  mechanism& operator=(const mechanism&) = delete;

  // Waits as long as it takes (wait_ms < 0) or up to wait_ms; "" on success.
  std::string acquire(std::int64_t wait_ms) {
    if (acquire_) {
      char msg[512] = "";
      int rc = acquire_(path_.c_str(), wait_ms, "offload-lock-bench", &h_, msg, sizeof msg);
      return rc == 0 ? "" : "acquire: rc " + std::to_string(rc) + ": " + msg;
    }
    if (!bare_) return ::flock(fd_, LOCK_EX) == 0 ? "" : std::string("flock: ") + std::strerror(errno);
    for (;;) {
      if (::mkdir(path_.c_str(), 0755) == 0) {
        int f = ::open(meta_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f < 0) return "open " + meta_ + ": " + std::strerror(errno);
        const bool ok = ::write(f, body_.data(), body_.size()) == static_cast<ssize_t>(body_.size());
        ::close(f);
        return ok ? "" : "write " + meta_;
      }
      if (errno != EEXIST) return "mkdir " + path_ + ": " + std::strerror(errno);
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 100);  // the bound only guards against a removal we could not see
      char buf[4096];
      while (::read(fd_, buf, sizeof buf) > 0) {
      }
    }
  }
  std::string release() {
    if (release_) {
      int rc = release_(h_);
      h_ = nullptr;
      return rc == 0 ? "" : "release: rc " + std::to_string(rc);
    }
    if (!bare_) return ::flock(fd_, LOCK_UN) == 0 ? "" : std::string("unlock: ") + std::strerror(errno);
    if (::unlink(meta_.c_str()) != 0 || ::rmdir(path_.c_str()) != 0) return std::string("rmdir: ") + std::strerror(errno);
    return "";
  }

 private:
  std::string path_, meta_, body_;
  void* lib_ = nullptr;
  acquire_fn acquire_ = nullptr;
  release_fn release_ = nullptr;
  opaque_handle* h_ = nullptr;
  int fd_ = -1;
  bool bare_ = false;
};

std::string next_line() {
  line_reader in(0);
  auto l = in.next(-1);
  return l ? *l : "";
}

// g-loop MECH PATH HOLD_US PAUSE_US MS STAMPS: on "start", loops acquire ->
// hold -> release -> pause for MS ms; prints "n COUNT", with STAMPS = 1 each
// hold as "s ACQUIRED RELEASING" (ns), then "end".
int loop(char** argv) {
  std::string err;
  mechanism m(argv[3], argv[4], err);
  if (!err.empty()) return fail(err);
  const std::int64_t hold_ns = std::atoll(argv[5]) * 1000, pause_ns = std::atoll(argv[6]) * 1000;
  const std::int64_t ms = std::atoll(argv[7]);
  const bool stamps = std::string(argv[8]) == "1";
  say("ready");
  if (next_line() != "start") return 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> held;
  long n = 0;
  const std::int64_t end = mono_ns() + ms * 1'000'000;
  while (mono_ns() < end) {
    if (auto e = m.acquire(-1); !e.empty()) return fail(e);
    const std::int64_t a = mono_ns();
    if (hold_ns > 0) sleep_ns(hold_ns);
    const std::int64_t r = mono_ns();
    if (auto e = m.release(); !e.empty()) return fail(e);
    ++n;
    if (stamps) held.emplace_back(a, r);
    if (pause_ns > 0) sleep_ns(pause_ns);
  }
  say("n " + std::to_string(n));
  for (auto& [a, r] : held) say("s " + std::to_string(a) + " " + std::to_string(r));
  say("end");
  return 0;
}

// g-hold MECH PATH: holds the lock until "release", then prints "r NS"
// stamped just before the release.
int hold(char** argv) {
  std::string err;
  mechanism m(argv[3], argv[4], err);
  if (!err.empty()) return fail(err);
  if (auto e = m.acquire(-1); !e.empty()) return fail(e);
  say("held");
  if (next_line() != "release") return 1;
  const std::int64_t r = mono_ns();
  if (auto e = m.release(); !e.empty()) return fail(e);
  say("r " + std::to_string(r));
  return 0;
}

// g-wait MECH PATH WAIT_MS: prints "calling NS", waits for the lock, prints
// "a NS" once it holds, releases.
int wait(char** argv) {
  std::string err;
  mechanism m(argv[3], argv[4], err);
  if (!err.empty()) return fail(err);
  say("calling " + std::to_string(mono_ns()));
  if (auto e = m.acquire(std::atoll(argv[5])); !e.empty()) return fail(e);
  say("a " + std::to_string(mono_ns()));
  if (auto e = m.release(); !e.empty()) return fail(e);
  return 0;
}

// g-time MECH PATH N: N acquisitions of a free lock (each may wait 10 s),
// each printed as "t NS" from the call to holding ("t NS timeout" when the
// 10 s ran out); then "end".
int time_free(char** argv) {
  std::string err;
  mechanism m(argv[3], argv[4], err);
  if (!err.empty()) return fail(err);
  const long n = std::atol(argv[5]);
  for (long i = 0; i < n; ++i) {
    const std::int64_t t0 = mono_ns();
    if (auto e = m.acquire(10'000); !e.empty()) {
      // Still not held after 10 s: that is the figure, not a failure.
      if (e.rfind("acquire: rc 2:", 0) != 0) return fail(e);
      say("t " + std::to_string(mono_ns() - t0) + " timeout");
      continue;
    }
    const std::int64_t t1 = mono_ns();
    if (auto e = m.release(); !e.empty()) return fail(e);
    say("t " + std::to_string(t1 - t0));
  }
  say("end");
  return 0;
}

// Becomes `uid` when running as root and asked to; "" on success.
std::string become(long uid) {
  if (uid < 0 || ::geteuid() != 0 || static_cast<uid_t>(uid) == ::geteuid()) return "";
  if (::setgid(static_cast<gid_t>(uid)) != 0 || ::setuid(static_cast<uid_t>(uid)) != 0)
    return std::string("setuid: ") + std::strerror(errno);
  return "";
}

// This user's directory in the queue registry of the lock at `path`, made
// as the library makes it (the registry sticky and as open as the lock's
// parent, the user's directory 0755). "" and `err` set when it cannot be.
std::string user_dir(const std::string& path, std::string& err) {
  const auto slash = path.rfind('/');
  const std::string top = path.substr(0, slash) + "/." + path.substr(slash + 1) + ".queue";
  if (::mkdir(top.c_str(), 0777) == 0) ::chmod(top.c_str(), 01777);
  const std::string dir = top + "/u" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    err = "mkdir " + dir + ": " + std::strerror(errno);
    return "";
  }
  ::chmod(dir.c_str(), 0755);
  return dir;
}

std::string hex12(std::mt19937_64& rng) {
  char b[13];
  std::snprintf(b, sizeof b, "%012llx", static_cast<unsigned long long>(rng() & 0xffffffffffffULL));
  return b;
}

// A forged but live-looking entry: well-formed, naming this (live) process,
// priority 100, write-locked (OFD) and with its wake channel, as a real
// waiter's; it never takes the lock.
struct forged {
  std::string json, wake;
  int fd = -1;
};

std::string make_entry(const std::string& dir, std::mt19937_64& rng, forged& out) {
  const std::string stem = std::to_string(::getpid()) + "-" + hex12(rng);
  out.json = dir + "/" + stem + ".json";
  out.wake = dir + "/" + stem + ".wake";
  const std::string tmp = dir + "/." + stem + ".tmp";
  if (::mkfifo(out.wake.c_str(), 0600) != 0) return "mkfifo " + out.wake + ": " + std::strerror(errno);
  const auto since = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string body = "{\"pid\":" + std::to_string(::getpid()) +
                           ",\"label\":\"churn\",\"host\":\"bench\",\"since\":" + std::to_string(since) +
                           ",\"gpu\":null,\"gpus\":1,\"priority\":100}\n";
  out.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out.fd < 0) return "open " + tmp + ": " + std::strerror(errno);
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::write(out.fd, body.data(), body.size()) != static_cast<ssize_t>(body.size()) || ::fchmod(out.fd, 0644) != 0 ||
      ::fcntl(out.fd, F_OFD_SETLK, &fl) != 0 || ::rename(tmp.c_str(), out.json.c_str()) != 0)
    return "entry " + tmp + ": " + std::strerror(errno);
  return "";
}

void drop_entry(forged& f) {
  ::unlink(f.json.c_str());
  ::unlink(f.wake.c_str());
  if (f.fd >= 0) ::close(f.fd);
  f.fd = -1;
}

// g-churn PATH UID: (as UID when root) keeps two forged entries in the
// queue of PATH and replaces both with new ones every 100 ms (new ones
// first, so two are always there) until stdin closes; prints "ready" once
// the first two are in, "n CYCLES" at the end.
int churn(char** argv) {
  if (auto e = become(std::atol(argv[4])); !e.empty()) return fail(e);
  std::string err;
  const std::string dir = user_dir(argv[3], err);
  if (dir.empty()) return fail(err);
  std::mt19937_64 rng(static_cast<std::uint64_t>(::getpid()));
  std::vector<forged> live(2);
  for (auto& f : live)
    if (auto e = make_entry(dir, rng, f); !e.empty()) return fail(e);
  say("ready");
  long cycles = 0;
  for (;;) {
    pollfd p{0, POLLIN, 0};
    if (::poll(&p, 1, 100) != 0) break;  // stdin readable or closed: stop
    std::vector<forged> fresh(2);
    for (auto& f : fresh)
      if (auto e = make_entry(dir, rng, f); !e.empty()) return fail(e);
    for (auto& f : live) drop_entry(f);
    live = std::move(fresh);
    ++cycles;
  }
  for (auto& f : live) drop_entry(f);
  say("n " + std::to_string(cycles));
  return 0;
}

// g-junk PATH COUNT UID: (as UID when root) fills this user's directory in
// the queue of PATH with COUNT empty junk files: half named like entries,
// a quarter like wake channels, a quarter anything; prints "planted N".
int junk(char** argv) {
  if (auto e = become(std::atol(argv[5])); !e.empty()) return fail(e);
  std::string err;
  const std::string dir = user_dir(argv[3], err);
  if (dir.empty()) return fail(err);
  const long count = std::atol(argv[4]);
  std::mt19937_64 rng(11);
  long made = 0;
  for (long i = 0; i < count; ++i) {
    const std::string stem = std::to_string(100000 + i) + "-" + hex12(rng);
    const std::string name = i % 2 == 0 ? stem + ".json" : i % 4 == 1 ? stem + ".wake" : "junk-" + hex12(rng);
    const std::string file = dir + "/" + name;
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return fail("open " + file + ": " + std::strerror(errno));
    ::close(fd);
    ++made;
  }
  say("planted " + std::to_string(made));
  return 0;
}

}  // namespace

int run_child(int argc, char** argv) {
  const std::string mode = argv[2];
  auto need = [&](int n, const char* args) {
    if (argc >= n) return true;
    write_line_fd(2, std::string("offload-lock-bench --child ") + mode + " " + args);
    return false;
  };
  if (mode == "g-loop") return need(9, "MECH PATH HOLD_US PAUSE_US MS STAMPS") ? loop(argv) : 2;
  if (mode == "g-hold") return need(5, "MECH PATH") ? hold(argv) : 2;
  if (mode == "g-wait") return need(6, "MECH PATH WAIT_MS") ? wait(argv) : 2;
  if (mode == "g-time") return need(6, "MECH PATH N") ? time_free(argv) : 2;
  if (mode == "g-churn") return need(5, "PATH UID") ? churn(argv) : 2;
  if (mode == "g-junk") return need(6, "PATH COUNT UID") ? junk(argv) : 2;
  write_line_fd(2, "offload-lock-bench --child: unknown mode " + mode);
  return 2;
}

}  // namespace bench::goals
