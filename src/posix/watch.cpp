// The one watcher (os/watch.hpp) on Linux: inotify and pidfd, polled
// together with the caller's own descriptors.
#include "os/watch.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <mutex>

#include "os/files.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"
#include "posix/common.hpp"
#include "posix/syscalls.hpp"

namespace offload_lock::detail::sys {

namespace {

std::mutex g_pool_mu;
// Inotify instances with no watches and no queued events. Never destroyed:
// a watcher on another thread may still return its instance while the
// process exits and runs the static destructors.
std::vector<int>& pool() {
  static auto* v = new std::vector<int>();
  return *v;
}

// Around fork the pool's mutex is taken, so it is never copied locked into
// the child; the child drops the pooled instances, which it would otherwise
// share with the parent.
struct fork_guard {
  fork_guard() noexcept {
    on_fork([] { g_pool_mu.lock(); }, [] { g_pool_mu.unlock(); },
            [] {
              for (int f : pool()) calls.close(f);
              pool().clear();
              g_pool_mu.unlock();
            });
  }
};
#if !defined(__SANITIZE_THREAD__)
// (Not under ThreadSanitizer, whose own fork handling can deadlock against
// mutexes taken in fork handlers.)
const fork_guard installed_fork_guard;
#endif

constexpr std::uint32_t kLockSelf = IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW;
constexpr std::uint32_t kLockContents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE;
constexpr std::uint32_t kNameLeaves = IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR;
constexpr std::uint32_t kEntries = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                   IN_MOVE_SELF | IN_CLOSE_WRITE | IN_ONLYDIR | IN_DONT_FOLLOW;

constexpr std::uint32_t kFile = IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB | IN_DONT_FOLLOW;

// inotify hands out as many queued events as fit: a read that left room
// for one more of the largest found the queue empty, and anything queued
// after it makes the descriptor readable again for the next poll. So no
// read that can only answer EAGAIN.
constexpr std::size_t kLargestEvent = sizeof(struct inotify_event) + NAME_MAX + 1;

void drain_events(int ino) {
  alignas(struct inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = calls.read(ino, buf, sizeof buf);
    if (n <= 0 || static_cast<std::size_t>(n) + kLargestEvent <= sizeof buf) return;
  }
}

}  // namespace

watcher::watcher() { pidfd_ok_ = feature_enabled(feature::pidfd); }

bool watcher::ensure_inotify() {
  // Made at the first watch that needs it: a waiter that only sleeps on a
  // pidfd and its wake channel uses none of the 128 instances a user has.
  if (ino_ >= 0) return true;
  if (ino_tried_ || !feature_enabled(feature::inotify)) return false;
  ino_tried_ = true;
  ino_generation_ = fork_generation();
  std::lock_guard<std::mutex> g(g_pool_mu);
  if (!pool().empty()) {
    ino_ = pool().back();
    pool().pop_back();
  } else {
    ino_ = calls.inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  }
  return ino_ >= 0;
}

watcher::~watcher() {
  // Dropped in a forked child of the process that took the instance (a
  // held lock's acquisition, let go of later: heartbeat.hpp waited_with):
  // the instance is one open file shared with that process, its watches and
  // events that process's. Only this process's descriptors are closed;
  // nothing is removed, read, or pooled here.
  if (ino_ >= 0 && ino_generation_ != fork_generation()) {
    for (const auto& it : items_)
      if (it.pidfd >= 0 && it.owned) calls.close(it.pidfd);
    items_.clear();
    calls.close(ino_);
    return;
  }
  // The last item's removal drains the events (unwatch).
  const bool drained = !items_.empty();
  unwatch_all();
  if (ino_ < 0) return;
  if (!drained) drain_events(ino_);
  std::lock_guard<std::mutex> g(g_pool_mu);
  pool().push_back(ino_);
}

int watcher::add_inotify(const std::string& path, std::uint32_t mask) {
  if (!ensure_inotify()) return -1;
  // IN_MASK_ADD: one inode has one watch per instance, shared by every item
  // that names it (slots in one parent, say); masks add up, never replace.
  return calls.inotify_add_watch(ino_, path.c_str(), mask | IN_MASK_ADD);
}

void watcher::drop_wd(int wd) {
  if (wd < 0) return;
  for (const auto& it : items_)
    if (it.wd == wd || it.parent_wd == wd) return;  // still used by another item
  calls.inotify_rm_watch(ino_, wd);
}

int watcher::watch_lock(const std::string& path, bool contents) {
  if (!ensure_inotify()) return -1;
  item it;
  it.kind = item::lock_dir;
  std::string parent;
  split_path(path, parent, it.name);
  it.wd = add_inotify(path, kLockSelf | (contents ? kLockContents : 0));
  it.parent_wd = add_inotify(parent, kNameLeaves);
  if (it.wd < 0 || it.parent_wd < 0) {
    const int wd = it.wd, pwd = it.parent_wd;
    drop_wd(wd);
    if (pwd != wd) drop_wd(pwd);
    return -1;
  }
  it.id = next_id_++;
  items_.push_back(std::move(it));
  return items_.back().id;
}

int watcher::watch_entries(const std::string& path) {
  const int wd = add_inotify(path, kEntries);
  if (wd < 0) return -1;
  // Watching the same directory again (a caller that re-arms every round)
  // keeps its item: no new watch, no event.
  for (auto& it : items_)
    if (it.kind == item::entries && (it.wd == wd || it.name == path)) {
      if (it.wd != wd) {
        const int old = it.wd;
        it.wd = wd;
        drop_wd(old);
      }
      return it.id;
    }
  item it;
  it.kind = item::entries;
  it.name = path;
  it.wd = wd;
  it.id = next_id_++;
  items_.push_back(std::move(it));
  return items_.back().id;
}

int watcher::watch_file(const std::string& path) {
  const int wd = add_inotify(path, kFile);
  if (wd < 0) return -1;
  item it;
  it.kind = item::file;
  it.name = path;
  it.wd = wd;
  it.id = next_id_++;
  items_.push_back(std::move(it));
  return items_.back().id;
}

int watcher::watch_pid(std::int64_t pid) {
  if (!pidfd_ok_ || !valid_pid(pid)) return -1;
  const int f = calls.pidfd_open(static_cast<pid_t>(pid), 0);
  if (f < 0) {
    if (errno == ENOSYS) pidfd_ok_ = false;
    return -1;  // ESRCH: gone already
  }
  // pidfd_open always makes its descriptor close-on-exec.
  item it;
  it.kind = item::pid;
  it.pidfd = f;
  it.id = next_id_++;
  items_.push_back(std::move(it));
  return items_.back().id;
}

fd open_pid(std::int64_t pid) {
  if (!feature_enabled(feature::pidfd) || !valid_pid(pid)) return fd();
  return fd(calls.pidfd_open(static_cast<pid_t>(pid), 0));
}

int watcher::watch_readable(int f) {
  if (f < 0) return -1;
  item it;
  it.kind = item::readable;
  it.pidfd = f;
  it.owned = false;
  it.id = next_id_++;
  items_.push_back(std::move(it));
  return items_.back().id;
}

void watcher::unwatch(int id) {
  auto found = std::find_if(items_.begin(), items_.end(), [&](const item& it) { return it.id == id; });
  if (found == items_.end()) return;
  const item gone = *found;
  items_.erase(found);
  if (gone.pidfd >= 0 && gone.owned) calls.close(gone.pidfd);
  drop_wd(gone.wd);
  if (gone.parent_wd != gone.wd) drop_wd(gone.parent_wd);
  // With nothing else watched on the instance, drop the events queued for
  // the old watches (IN_IGNORED among them) so the next wait does not wake
  // for them.
  if (ino_ >= 0 && std::none_of(items_.begin(), items_.end(), [](const item& it) { return it.wd >= 0; }))
    drain_events(ino_);
}

bool watcher::left_path(int id) const { return std::find(left_.begin(), left_.end(), id) != left_.end(); }

void watcher::unwatch_all() {
  while (!items_.empty()) unwatch(items_.back().id);
}

// Reads the queued events; adds the ids they concern to `fired` and returns
// true when there was any.
bool watcher::read_events(std::vector<int>& fired) {
  alignas(struct inotify_event) char buf[8192];
  bool any = false;
  auto fire = [&](int id) {
    any = true;
    if (std::find(fired.begin(), fired.end(), id) == fired.end()) fired.push_back(id);
  };
  for (;;) {
    const ssize_t n = calls.read(ino_, buf, sizeof buf);
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<struct inotify_event*>(p);
      for (const auto& it : items_) {
        if (it.kind == item::pid || it.kind == item::readable) continue;
        const bool overflow = ev->mask & IN_Q_OVERFLOW;
        const bool named = it.kind == item::lock_dir && ev->wd == it.parent_wd && ev->len > 0 && it.name == ev->name;
        if (!overflow && !named && ev->wd != it.wd) continue;
        fire(it.id);
        // Anything done to the name in the parent, or to the directory
        // itself but a change of what it holds.
        const bool left = overflow || named || (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT));
        if (it.kind == item::lock_dir && left && std::find(left_.begin(), left_.end(), it.id) == left_.end())
          left_.push_back(it.id);
      }
      p += sizeof(struct inotify_event) + ev->len;
    }
    if (static_cast<std::size_t>(n) + kLargestEvent <= sizeof buf) break;  // the queue is empty (drain_events)
  }
  return any;
}

watcher::wake watcher::wait(std::int64_t timeout_ms, const std::vector<int>& extra_fds, std::vector<int>* fired) {
  std::vector<struct pollfd> fds;
  fds.reserve(extra_fds.size() + items_.size() + 1);
  for (int f : extra_fds) fds.push_back({f, POLLIN, 0});
  const std::size_t pids_from = fds.size();
  for (const auto& it : items_)
    if (it.pidfd >= 0) fds.push_back({it.pidfd, POLLIN, 0});
  const std::size_t ino_at = fds.size();
  const bool inotify = ino_ >= 0 && std::any_of(items_.begin(), items_.end(), [](const item& it) { return it.wd >= 0; });
  if (inotify) fds.push_back({ino_, POLLIN, 0});
  std::vector<int> local;
  std::vector<int>& out = fired ? *fired : local;
  out.clear();
  left_.clear();
  const std::int64_t deadline = timeout_ms < 0 ? -1 : deadline_in(timeout_ms);
  for (bool first = true;; first = false) {
    const int r = poll_toward(fds, deadline, first);
    if (r == 0) return wake::timeout;
    if (r < 0) continue;
    for (std::size_t i = 0; i < pids_from; ++i)
      if (fds[i].revents) return wake::extra_fd;
    std::size_t k = pids_from;
    for (const auto& it : items_)
      if (it.pidfd >= 0 && fds[k++].revents) out.push_back(it.id);
    if (inotify && fds[ino_at].revents) read_events(out);
    if (!out.empty()) return wake::event;
  }
}

}  // namespace offload_lock::detail::sys
