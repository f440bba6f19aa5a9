// The queue section's fleet of waiter processes and its scenarios
// (queue_bench.hpp).
#include "queue_bench.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "offload_lock/lock.hpp"

extern char** environ;

namespace ol = offload_lock;

namespace bench::qbench {

namespace {

constexpr int kTo = 15'000;

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// The parent as the holder the queue forms behind.
struct holder {
  std::string path;
  ol::lock held;
  void hold() {
    ol::lock_options o;
    o.path = path;
    o.wait = std::chrono::seconds(30);
    auto l = ol::lock::acquire(o);
    if (!l) throw failure("holder acquire: " + l.error().message());
    held = std::move(*l);
  }
  void release() {
    if (auto e = held.release()) throw failure("holder release: " + e.message());
  }
};

std::vector<std::string> waiter_argv(const std::string& self, const std::string& lock, const std::string& id,
                                     int priority, long hold_lo_us, long hold_hi_us) {
  return {self, "--child", "q-waiter", lock, id, std::to_string(priority), std::to_string(hold_lo_us),
          std::to_string(hold_hi_us)};
}

// Fills in a waiter's "a" line: held, about to release, switches, CPU, nowait.
void take_a(waiter_run& w, const event& e) {
  if (e.v.size() < 8) throw failure("short line from " + e.id + ": " + e.text);
  w.a = e.v[0];
  w.r = e.v[1];
  w.vol_end = e.v[2];
  w.cpu_end = e.v[3];
  w.nowait = e.v[4] != 0;
  w.vol_held = e.v[5];
  w.cpu_held = e.v[6];
  w.s = e.v[7];
  w.served = true;
  if (w.nowait) w.w = w.a;  // never reported waiting: joined, if at all, by the time it held
}

bool has_inotify(pid_t pid) {
  std::string d = "/proc/" + std::to_string(pid) + "/fd";
  DIR* dir = ::opendir(d.c_str());
  if (!dir) return false;
  bool found = false;
  while (dirent* e = ::readdir(dir)) {
    char buf[64];
    ssize_t n = ::readlinkat(::dirfd(dir), e->d_name, buf, sizeof buf - 1);
    if (n <= 0) continue;
    buf[n] = '\0';
    if (std::strcmp(buf, "anon_inode:inotify") == 0) {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

// ---- fleet ----

fleet::fleet() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw failure(sys_error("pipe2"));
  r_ = p[0];
  w_ = p[1];
  in_.reset(r_);
}

fleet::~fleet() {
  kill_all();
  if (r_ >= 0) ::close(r_);
  if (w_ >= 0) ::close(w_);
}

pid_t fleet::spawn(const std::string& id, const std::vector<std::string>& argv) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, w_, 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw failure("spawn " + argv[0] + ": " + std::strerror(rc));
  live_[id] = pid;
  return pid;
}

std::optional<event> fleet::next(int timeout_ms) {
  if (!backlog_.empty()) {
    event e = std::move(backlog_.front());
    backlog_.pop_front();
    return e;
  }
  auto line = in_.next(timeout_ms);
  if (!line) return std::nullopt;
  event e;
  std::istringstream ss(*line);
  ss >> e.id >> e.kind;
  e.text = *line;
  if (e.kind != "e")
    for (std::int64_t x; ss >> x;) e.v.push_back(x);
  return e;
}

event fleet::expect(const std::string& id, const std::string& kind, int timeout_ms) {
  for (std::size_t k = 0; k < backlog_.size(); ++k)
    if (backlog_[k].id == id && (backlog_[k].kind == kind || backlog_[k].kind == "e")) {
      event e = backlog_[k];
      backlog_.erase(backlog_.begin() + static_cast<std::ptrdiff_t>(k));
      if (e.kind == "e") throw failure(e.text);
      return e;
    }
  const std::int64_t end = mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  std::deque<event> later;
  for (;;) {
    const std::int64_t left = (end - mono_ns()) / 1'000'000;
    auto line = left > 0 ? in_.next(static_cast<int>(left)) : std::nullopt;
    if (!line) {
      backlog_.insert(backlog_.end(), later.begin(), later.end());
      throw failure("no '" + kind + "' line from " + id + " within " + std::to_string(timeout_ms) + " ms");
    }
    event e;
    std::istringstream ss(*line);
    ss >> e.id >> e.kind;
    e.text = *line;
    if (e.kind != "e")
      for (std::int64_t x; ss >> x;) e.v.push_back(x);
    if (e.id == id && (e.kind == kind || e.kind == "e")) {
      backlog_.insert(backlog_.end(), later.begin(), later.end());
      if (e.kind == "e") throw failure(e.text);
      return e;
    }
    later.push_back(std::move(e));
  }
}

pid_t fleet::pid(const std::string& id) const {
  auto it = live_.find(id);
  return it == live_.end() ? -1 : it->second;
}

void fleet::kill(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  ::kill(it->second, SIGKILL);
  while (::waitpid(it->second, nullptr, 0) < 0 && errno == EINTR) {
  }
  live_.erase(it);
}

bool fleet::wait_exit(const std::string& id, int timeout_ms) {
  auto it = live_.find(id);
  if (it == live_.end()) return true;
  const std::int64_t end = mono_ns() + std::int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    pid_t r = ::waitpid(it->second, nullptr, WNOHANG);
    if (r == it->second || (r < 0 && errno != EINTR)) {
      live_.erase(it);
      return true;
    }
    if (mono_ns() >= end) return false;
    sleep_ns(1'000'000);
  }
}

void fleet::kill_all() {
  for (auto& [id, pid] : live_) ::kill(pid, SIGKILL);
  for (auto& [id, pid] : live_)
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  live_.clear();
}

// ---- judging the order ----

order_result check_order(const std::vector<waiter_run>& runs) {
  std::vector<const waiter_run*> s;
  for (const auto& w : runs)
    if (w.served) s.push_back(&w);
  std::sort(s.begin(), s.end(), [](auto* x, auto* y) { return x->a < y->a; });
  order_result o;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && s[i]->a < s[i - 1]->r) ++o.overlaps;
    for (std::size_t j = i + 1; j < s.size(); ++j) {
      // s[i] was served before s[j].
      if (s[i]->priority == s[j]->priority && s[j]->w < s[i]->s) ++o.inversions;
      // Only a waiter already waiting when s[i] took the lock had a claim.
      if (s[i]->priority < s[j]->priority && s[j]->w > 0 && s[j]->w < s[i]->a) ++o.priority_violations;
    }
  }
  return o;
}

// ---- scenarios ----

fifo_result fifo(const std::string& self, const std::string& lock, int handoffs, int batch, int gap_ms,
                 std::mt19937& rng) {
  fifo_result res;
  res.min_arrival_gap_ms = 1e9;
  const std::int64_t t0 = mono_ns();
  std::vector<waiter_run> all;
  try {
    fleet f;
    holder h{lock, {}};
    int arrival = 0;
    while (res.handoffs < handoffs) {
      ++res.batches;
      h.hold();
      std::vector<waiter_run> b;
      for (int i = 0; i < batch; ++i) {
        waiter_run w;
        w.id = "f" + std::to_string(arrival);
        w.arrival = arrival++;
        w.priority = i % 5 == 4 ? 10 : 0;
        f.spawn(w.id, waiter_argv(self, lock, w.id, w.priority, 0, 0));
        w.w = f.expect(w.id, "w", kTo).v.at(0);
        if (!b.empty()) res.min_arrival_gap_ms = std::min(res.min_arrival_gap_ms, double(w.w - b.back().w) / 1e6);
        b.push_back(w);
        sleep_ns(std::int64_t(gap_ms) * 1'000'000);
      }
      // About one in eight dies while queued, before the release...
      std::vector<int> idx(b.size());
      for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = static_cast<int>(k);
      std::shuffle(idx.begin(), idx.end(), rng);
      const int kills = std::max(1, batch / 8);
      for (int k = 0; k < kills; ++k) {
        f.kill(b[idx[k]].id);
        b[idx[k]].killed = true;
        ++res.killed_queued;
      }
      // ... and one more in the back half while the queue drains.
      std::vector<int> back;
      for (int k = batch / 2; k < batch; ++k)
        if (!b[k].killed) back.push_back(k);
      const int late = back.empty() ? -1 : back[std::uniform_int_distribution<std::size_t>(0, back.size() - 1)(rng)];
      h.release();
      if (late >= 0) {
        f.kill(b[late].id);
        b[late].killed = true;
        ++res.killed_draining;
      }
      for (auto& w : b) {
        if (w.killed) continue;
        take_a(w, f.expect(w.id, "a", 30'000));
        f.wait_exit(w.id, kTo);
      }
      // The late victim may have held the lock before it died: then it
      // counts as served (it was alive when it was served).
      if (late >= 0) {
        while (auto e = f.next(20)) {
          if (e->id == b[late].id && e->kind == "a") {
            take_a(b[late], *e);
            b[late].killed = false;
            --res.killed_draining;
          }
        }
      }
      for (auto& w : b) {
        if (w.served) ++res.handoffs;
        if (w.priority > 0 && w.served) ++res.high_priority;
        ++res.waiters;
      }
      all.insert(all.end(), b.begin(), b.end());
      // Each batch is its own queue behind the holder: judged on its own,
      // since the next batch arrives after this one has drained.
      order_result o = check_order(b);
      res.order.inversions += o.inversions;
      res.order.priority_violations += o.priority_violations;
      res.order.overlaps += o.overlaps;
    }
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  res.seconds = double(mono_ns() - t0) / 1e9;
  return res;
}

drain_result drain(const std::string& self, const std::string& lock, int n) {
  drain_result res;
  res.waiters = n;
  try {
    fleet f;
    holder h{lock, {}};
    h.hold();
    std::vector<waiter_run> ws;
    for (int i = 0; i < n; ++i) {
      waiter_run w;
      w.id = "d" + std::to_string(i);
      w.arrival = i;
      f.spawn(w.id, waiter_argv(self, lock, w.id, 0, 0, 0));
      w.w = f.expect(w.id, "w", kTo).v.at(0);
      ws.push_back(w);
    }
    sleep_ns(100'000'000);  // let the last ones settle into their wait
    std::vector<sched_counters> before;
    std::set<std::string> watching;
    for (auto& w : ws) {
      if (has_inotify(f.pid(w.id))) {
        ++res.with_inotify;
        watching.insert(w.id);
      }
      before.push_back(read_sched(f.pid(w.id)));
      if (!before.back().ok) throw failure("cannot read /proc/" + std::to_string(f.pid(w.id)));
    }
    const std::int64_t t_release = mono_ns();
    h.release();
    std::int64_t last = t_release;
    for (std::size_t i = 0; i < ws.size(); ++i) {
      take_a(ws[i], f.expect(ws[i].id, "a", 60'000));
      f.wait_exit(ws[i].id, kTo);
      last = std::max(last, ws[i].a);
      res.voluntary += ws[i].vol_end - before[i].voluntary;
      res.cpu_ns += ws[i].cpu_end - before[i].cpu_ns;
      res.voluntary_waiting += ws[i].vol_held - before[i].voluntary;
      res.cpu_waiting_ns += ws[i].cpu_held - before[i].cpu_ns;
      res.whole_cpu_ms.push_back(double(ws[i].cpu_end) / 1e6);
    }
    res.drain_ms = double(last - t_release) / 1e6;
    res.order = check_order(ws);
    std::vector<waiter_run> by_a = ws;
    std::sort(by_a.begin(), by_a.end(), [](auto& x, auto& y) { return x.a < y.a; });
    for (std::size_t k = 1; k < by_a.size(); ++k)
      (watching.count(by_a[k].id) ? res.handoff_watching_ms : res.handoff_polling_ms)
          .push_back(double(by_a[k].a - by_a[k - 1].r) / 1e6);
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

plant_result plant_junk(const std::string& self, const std::string& lock, int count, uid_t as_uid,
                        const std::string& kind) {
  plant_result res;
  try {
    auto slash = lock.rfind('/');
    const std::string parent = lock.substr(0, slash), name = lock.substr(slash + 1);
    const std::string reg = parent + "/." + name + ".waiters";
    // As in /tmp: anyone may create files, only the owner remove them. The
    // registry is made here first, as the first waiter would.
    if (::chmod(parent.c_str(), 01777) != 0) throw failure(sys_error("chmod " + parent));
    if (::mkdir(reg.c_str(), 0700) != 0) throw failure(sys_error("mkdir " + reg));
    if (::chmod(reg.c_str(), 01777) != 0) throw failure(sys_error("chmod " + reg));
    const uid_t uid = ::geteuid() == 0 ? as_uid : ::geteuid();
    fleet f;
    f.spawn("plant", {self, "--child", "plant", reg, std::to_string(count), std::to_string(uid), kind});
    event e = f.expect("plant", "planted", 120'000);
    f.wait_exit("plant", kTo);
    res.planted = static_cast<int>(e.v.at(0));
    res.uid = static_cast<uid_t>(e.v.at(1));
    res.other_user = res.uid != ::geteuid();
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

barging_result v1_barging(const std::string& self, const std::string& node, const std::string& helper,
                          const std::string& lock, int runners, int depth, int hold_ms, int ms) {
  barging_result res;
  res.v1_runners = runners;
  res.queued_depth = depth;
  try {
    fleet f;
    holder h{lock, {}};
    h.hold();
    const std::string stop = lock + ".stop";
    std::vector<std::string> v1_ids;
    for (int k = 0; k < runners; ++k) {
      v1_ids.push_back("v" + std::to_string(k));
      f.spawn(v1_ids.back(), {node, helper, "loop", lock, v1_ids.back(), std::to_string(hold_ms), "200", stop});
    }
    for (auto& id : v1_ids) f.expect(id, "ready", 60'000);
    std::map<std::string, waiter_run> lib;
    std::vector<waiter_run> v1_runs;
    int spawned = 0;
    auto add = [&] {
      waiter_run w;
      w.id = "q" + std::to_string(spawned);
      w.arrival = spawned++;
      f.spawn(w.id, waiter_argv(self, lock, w.id, 0, hold_ms * 1000L, hold_ms * 1000L));
      lib[w.id] = w;
    };
    for (int k = 0; k < depth; ++k) {
      add();
      lib["q" + std::to_string(k)].w = f.expect("q" + std::to_string(k), "w", kTo).v.at(0);
    }
    const std::int64_t t0 = mono_ns();
    const std::int64_t t_end = t0 + std::int64_t(ms) * 1'000'000;
    h.release();
    int outstanding = depth;
    bool stopping = false;
    while (outstanding > 0) {
      if (!stopping && mono_ns() >= t_end) {
        stopping = true;
        std::ofstream(stop).put('\n');
      }
      auto e = f.next(1000);
      if (!e) {
        if (mono_ns() > t_end + 60'000'000'000LL) throw failure("queue did not drain");
        continue;
      }
      if (e->kind == "e") throw failure(e->text);
      if (e->kind == "x") {
        ++res.lost;
        continue;
      }
      if (e->id[0] == 'q') {
        auto& w = lib.at(e->id);
        if (e->kind == "w") w.w = e->v.at(0);
        if (e->kind == "a") {
          take_a(w, *e);
          f.wait_exit(w.id, kTo);
          --outstanding;
          if (!stopping) {
            add();
            ++outstanding;
          }
        }
      } else if (e->kind == "a" && e->v.size() >= 2) {
        waiter_run w;
        w.id = e->id;
        w.a = e->v[0];
        w.r = e->v[1];
        w.served = true;
        w.priority = -1000;  // not in the queue: judged for overlaps only
        v1_runs.push_back(w);
      }
    }
    for (auto& id : v1_ids)
      if (!f.wait_exit(id, 5'000)) f.kill(id);
    ::unlink(stop.c_str());
    std::vector<waiter_run> every;
    for (auto& [id, w] : lib) every.push_back(w);
    every.insert(every.end(), v1_runs.begin(), v1_runs.end());
    std::sort(every.begin(), every.end(), [](auto& x, auto& y) { return x.a < y.a; });
    // Each release inside the window: who took the lock next, and whether
    // an offload-lock waiter was queued at that moment (else it was open
    // to anyone).
    std::int64_t rel = t0;
    for (auto& w : every) {
      if (rel >= t0 && rel <= t_end) {
        bool queued = false;
        for (auto& [id, o] : lib)
          if (!o.nowait && o.w < rel && o.a > rel) queued = true;
        if (!queued) ++res.releases_unqueued;
        else if (w.id[0] == 'q') ++res.lib_acquisitions;
        else ++res.v1_acquisitions;
      }
      rel = w.r;
    }
    res.order = check_order(every);
    res.order.priority_violations = 0;  // v1 runners have no priority
    res.seconds = double(t_end - t0) / 1e9;
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

queued_handoff_result queued_handoff(const std::string& self, const std::string& lock, int depth, int rounds) {
  queued_handoff_result res;
  try {
    fleet f;
    holder h{lock, {}};
    h.hold();
    std::map<std::string, waiter_run> ws;
    int spawned = 0;
    auto add = [&] {
      waiter_run w;
      w.id = "h" + std::to_string(spawned);
      w.arrival = spawned++;
      f.spawn(w.id, waiter_argv(self, lock, w.id, 0, 5'000, 25'000));
      ws[w.id] = w;
    };
    // Two spare: the holder itself and a replacement still starting up are
    // not waiting at the release.
    const int in_flight = depth + 2;
    for (int k = 0; k < in_flight; ++k) {
      add();
      ws["h" + std::to_string(k)].w = f.expect("h" + std::to_string(k), "w", kTo).v.at(0);
    }
    sleep_ns(20'000'000);
    const std::int64_t r0 = mono_ns();
    h.release();
    int outstanding = in_flight, served = 0;
    while (outstanding > 0) {
      auto e = f.next(30'000);
      if (!e) throw failure("queue stopped moving");
      if (e->kind == "e") throw failure(e->text);
      auto& w = ws.at(e->id);
      if (e->kind == "w") w.w = e->v.at(0);
      if (e->kind == "a") {
        take_a(w, *e);
        f.wait_exit(w.id, kTo);
        --outstanding;
        if (++served + outstanding < rounds + 1) {
          add();
          ++outstanding;
        }
      }
    }
    std::vector<waiter_run> s;
    for (auto& [id, w] : ws) s.push_back(w);
    res.order = check_order(s);
    std::sort(s.begin(), s.end(), [](auto& x, auto& y) { return x.a < y.a; });
    for (std::size_t k = 0; k < s.size(); ++k) {
      const std::int64_t rel = k == 0 ? r0 : s[k - 1].r;
      int queued = 0;
      for (auto& o : s)
        if (o.w > 0 && o.w < rel && o.a > rel) ++queued;
      const double ms = double(s[k].a - rel) / 1e6;
      res.all_ms.push_back(ms);
      res.depths.push_back(queued);
      if (queued >= depth) res.ms.push_back(ms);
    }
  } catch (const std::exception& e) {
    res.error = e.what();
  }
  return res;
}

int inotify_instance_limit() {
  std::ifstream f("/proc/sys/fs/inotify/max_user_instances");
  int v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace bench::qbench
