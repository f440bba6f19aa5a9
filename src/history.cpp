// Writing the lock's history (history.hpp): where each author's file is,
// appending to it through a descriptor kept open, rotation, and the entries
// of the events the library sees.
#include "history.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "history_line.hpp"
#include "meta.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/logs.hpp"
#include "os/process.hpp"

namespace offload_lock {

std::string history_dir(const std::string& path) {
  std::string parent, name;
  detail::sys::split_path(path, parent, name);
  return (parent == "/" ? std::string() : parent) + "/." + name + ".history";
}

error start_history(const std::string& path) {
  namespace sys = detail::sys;
  std::string parent, name;
  sys::split_path(path, parent, name);
  if (name.empty()) return error(errc::bad_input, "lock path '" + path + "' names no directory");
  const std::string dir = history_dir(path);
  auto p = sys::open_dir(sys::cwd, parent, false, parent);
  if (!p) return p.error();
  const std::string dir_name = "." + name + ".history";
  if (auto e = sys::mkdir_at(p->get(), dir_name, 0700, dir)) {
    if (e.code() != std::errc::file_exists) return e;
    auto st = sys::stat_at(p->get(), dir_name, dir);
    if (!st) return st.error();
    if (!st->is_dir) return error(sys::errno_code(std::errc::file_exists), dir + " exists and is not a directory");
    return {};
  }
  // As open as the lock's parent, so that whoever can take the lock can
  // add to its history; sticky wherever others can write, so that nobody
  // removes or replaces another's file.
  auto d = sys::open_dir(p->get(), dir_name, true, dir);
  auto pst = sys::stat_fd(p->get(), parent);
  if (!d) return d.error();
  if (!pst) return pst.error();
  unsigned mode = pst->mode & 07777 & ~04000U;
  if (mode & 0022) mode |= 01000;
  return sys::chmod_fd(d->get(), mode, dir);
}

namespace detail::history {

namespace {

// What an acquisition of this process recorded, for the "hold" entry of
// its release (by token). At most kMaxAcquired: a detached lock is never
// released here, and its entry is dropped in time.
struct acquired_info {
  std::string label, host;
  std::int64_t pid = 0;
  int gpu = 0;
  int priority = 0;
  std::int64_t expect_ms = 0;
  std::int64_t start_mono = 0;
};
constexpr std::size_t kMaxAcquired = 1024;

// One open history: its directory and this author's file.
struct open_history {
  std::string dir_path;
  sys::fd dir, file;
  sys::file_id id;
};
constexpr std::size_t kMaxOpen = 8;

struct state {
  std::mutex mu;
  std::vector<open_history> open;  // most recently used last
  std::unordered_map<std::string, acquired_info> acquired;
  std::vector<std::string> acquired_order;
};

state& the_state() {
  static state* s = new state();  // never freed: records may come from any thread until exit
  return *s;
}

#if !defined(__SANITIZE_THREAD__)
// fork() copies only the calling thread: the mutex is taken around it so
// that a child never inherits it locked (heartbeat.cpp does the same, and
// skips it under ThreadSanitizer for the same reason).
struct fork_guard {
  fork_guard() noexcept {
    sys::on_fork([] { the_state().mu.lock(); }, [] { the_state().mu.unlock(); }, [] { the_state().mu.unlock(); });
  }
};
const fork_guard installed_fork_guard;
#endif

std::string file_name() { return std::to_string(sys::effective_uid()) + ".jsonl"; }

// Opens this author's file in the history directory at `dir_path`; false
// when there is no history there, or the file is not ours to write.
bool open_file(open_history& h) {
  if (!h.dir.valid()) {
    auto d = sys::open_dir(sys::cwd, h.dir_path, true, h.dir_path);
    if (!d) return false;
    h.dir = std::move(*d);
  }
  const std::string name = file_name();
  auto f = sys::open_append_at(h.dir.get(), name, 0644, h.dir_path);
  if (!f) return false;
  auto st = sys::log_status_of(f->get(), h.dir_path);
  // A file someone else made under our name (the directory is shared):
  // never ours to write in; readers would not trust it as ours anyway.
  if (!st || !st->st.is_regular || st->st.uid != sys::effective_uid()) return false;
  // Readable by everyone who reads the history, whatever our umask.
  if ((st->st.mode & 0777) != 0644) (void)sys::chmod_fd(f->get(), 0644, h.dir_path);
  h.file = std::move(*f);
  h.id = st->st.id;
  return true;
}

// The file grew past the rotation size: the current half becomes the old
// one (only if the name still names what we write to: another process of
// ours may have rotated it first), and a new one begins.
bool rotate(open_history& h) {
  const std::string name = file_name();
  auto st = sys::stat_at(h.dir.get(), name, h.dir_path);
  if (st && st->id == h.id) (void)sys::rename_at(h.dir.get(), name, name + ".1", h.dir_path);
  h.file.reset();
  return open_file(h);
}

// Appends the line `make_line` writes to the history of the lock at `base`;
// the line is made only where there is a history (most locks keep none,
// and every acquisition and release asks).
void append(const std::string& base, const std::function<std::string()>& make_line) {
  state& s = the_state();
  const std::string dir_path = history_dir(base);
  std::lock_guard<std::mutex> g(s.mu);
  auto it = std::find_if(s.open.begin(), s.open.end(), [&](const open_history& h) { return h.dir_path == dir_path; });
  std::string line;
  if (it != s.open.end()) {
    auto st = sys::log_status_of(it->file.get(), dir_path);
    // Removed (the history stopped, or an old half replaced): start again.
    if (!st || st->links == 0) {
      s.open.erase(it);
      it = s.open.end();
    } else {
      line = make_line();
      if (st->st.size + static_cast<std::int64_t>(line.size()) > history_rotate_bytes && !rotate(*it)) {
        s.open.erase(it);
        return;
      }
    }
  }
  if (it == s.open.end()) {
    open_history h;
    h.dir_path = dir_path;
    if (!open_file(h)) return;
    if (s.open.size() >= kMaxOpen) s.open.erase(s.open.begin());
    s.open.push_back(std::move(h));
    it = s.open.end() - 1;
    line = make_line();
  }
  (void)sys::append_once(it->file.get(), line, dir_path);
}

// Slot K's lock is slot 0's path with ".gpu<K>": its history is slot 0's.
std::string base_of(const std::string& lock_path, int gpu) {
  if (gpu <= 0) return lock_path;
  const std::string suffix = ".gpu" + std::to_string(gpu);
  if (lock_path.size() > suffix.size() && lock_path.compare(lock_path.size() - suffix.size(), suffix.size(), suffix) == 0)
    return lock_path.substr(0, lock_path.size() - suffix.size());
  return lock_path;
}

void fill_from_meta(history_entry& e, std::string_view meta, std::int64_t now) {
  const parsed_meta m = parse_meta(meta);
  if (!m.parsed) return;
  if (e.label.empty()) e.label = m.label;
  if (e.host.empty()) e.host = m.host;
  if (e.pid == 0) e.pid = m.go_ok ? m.go_pid : 0;
  if (m.gpu) e.gpu = static_cast<int>(*m.gpu);
  else if (e.gpu < 0) e.gpu = 0;
  if (m.priority) e.priority = static_cast<int>(std::clamp<std::int64_t>(*m.priority, -100, 100));
  if (m.expect_ms && *m.expect_ms > 0) e.expect_ms = *m.expect_ms;
  if (e.held_ms < 0 && m.started_at) e.held_ms = std::max<std::int64_t>(0, now - *m.started_at);
}

void remember(const std::string& token, acquired_info a) {
  state& s = the_state();
  std::lock_guard<std::mutex> g(s.mu);
  if (!s.acquired.count(token)) s.acquired_order.push_back(token);
  s.acquired[token] = std::move(a);
  while (s.acquired_order.size() > kMaxAcquired) {
    s.acquired.erase(s.acquired_order.front());
    s.acquired_order.erase(s.acquired_order.begin());
  }
}

// What this process's acquisition of `token` recorded, taken out of the
// table; false when it was not acquired here.
bool recall(const std::string& token, acquired_info& out) {
  state& s = the_state();
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.acquired.find(token);
  if (it == s.acquired.end()) return false;
  out = std::move(it->second);
  s.acquired.erase(it);
  s.acquired_order.erase(std::find(s.acquired_order.begin(), s.acquired_order.end(), token));
  return true;
}

std::string label_of(const lock_options& opt) { return opt.label.empty() ? sys::program_name() : opt.label; }

// The pid in a queue entry's name as meta.json's passedOver lists it
// ("u<uid>/<pid>-<12hex>.json"); 0 when the name is not of that shape.
std::int64_t pid_of_entry(const std::string& name) {
  const auto slash = name.find('/');
  if (slash == std::string::npos) return 0;
  std::int64_t pid = 0;
  std::size_t k = slash + 1;
  for (; k < name.size() && name[k] >= '0' && name[k] <= '9' && k - slash <= 10; ++k) pid = pid * 10 + (name[k] - '0');
  return k > slash + 1 && k < name.size() && name[k] == '-' ? pid : 0;
}

}  // namespace

void record(const std::string& lock_path, history_entry e, std::string_view meta) {
  try {
    e.at = sys::now_ms();
    if ((e.event == "hold" || e.event == "idle") && !e.token.empty()) {
      acquired_info a;
      if (recall(e.token, a)) {
        e.label = a.label;
        e.host = a.host;
        e.pid = a.pid;
        e.gpu = a.gpu;
        e.priority = a.priority;
        e.expect_ms = a.expect_ms;
        if (e.held_ms < 0) e.held_ms = std::max<std::int64_t>(0, sys::monotonic_ms() - a.start_mono);
      } else if (!meta.empty()) {
        fill_from_meta(e, meta, e.at);
      }
    }
    append(base_of(lock_path, e.gpu), [&e] {
      e.uid = sys::effective_uid();
      return history_line(e);
    });
  } catch (...) {
    // Out of memory while building a line: the history is best effort.
  }
}

history_entry hold_end(const std::string& token, const char* outcome, bool yield_asked) {
  history_entry e;
  e.event = "hold";
  e.outcome = outcome;
  e.token = token;
  e.yield_asked = yield_asked;
  return e;
}

history_entry released_by(const info& before, const char* by) {
  history_entry e = hold_end(before.token, "released");
  e.by = by;
  e.pid = before.pid.value_or(0);
  e.label = before.label;
  e.host = before.host;
  e.priority = before.priority;
  e.expect_ms = before.expected.count();
  e.held_ms = std::max<std::int64_t>(0, before.held_for.count());
  return e;
}

history_entry takeover(const snapshot& s, const std::string& reason) {
  history_entry e;
  e.event = "hold";
  e.outcome = "crashed";
  e.reason = reason;
  e.other_pid = sys::self_pid();
  e.other_label = sys::program_name();
  e.holder_uid = s.owner_uid;
  e.gpu = 0;
  if (s.meta_exists && s.meta.parsed) {
    const parsed_meta& m = s.meta;
    e.token = m.token;
    e.label = m.label;
    e.host = m.host;
    e.pid = m.go_ok ? m.go_pid : 0;
    if (m.gpu) e.gpu = static_cast<int>(*m.gpu);
    if (m.priority) e.priority = static_cast<int>(std::clamp<std::int64_t>(*m.priority, -100, 100));
    if (m.expect_ms && *m.expect_ms > 0) e.expect_ms = *m.expect_ms;
    if (m.started_at) e.held_ms = std::max<std::int64_t>(0, sys::now_ms() - *m.started_at);
  }
  return e;
}

// Shared with the yield callback, which runs on the heartbeat thread and
// may outlive the acquisition's own stack frame.
struct acquisition_record::shared {
  std::string base, label, host;
  std::int64_t pid = 0;
  int priority = 0;
  std::atomic<int> gpu{-1};
};

acquisition_record::acquisition_record(const lock_options& opt, const std::string& base)
    : opt_(opt), base_(base), since_ms_(sys::now_ms()), start_mono_(sys::monotonic_ms()) {
  if (!opt.on_yield_request) return;
  shared_ = std::make_shared<shared>();
  shared_->base = base;
  shared_->label = label_of(opt);
  shared_->host = sys::host_name();
  shared_->pid = opt.pid ? opt.pid : sys::self_pid();
  shared_->priority = opt.priority;
  shared_->gpu = opt.gpu;
  copy_ = std::make_unique<lock_options>(opt);
  copy_->on_yield_request = [sh = shared_, user = opt.on_yield_request](const yield_request& r) {
    history_entry e;
    e.event = "yield-asked";
    e.pid = sh->pid;
    e.label = sh->label;
    e.host = sh->host;
    e.priority = sh->priority;
    e.gpu = sh->gpu.load();
    e.other_pid = r.pid;
    e.other_label = r.label;
    e.other_priority = r.priority;
    e.reason = r.reason;
    record(sh->base, std::move(e));
    user(r);
  };
}

void acquisition_record::finish(const result<lock>& r) {
  try {
    const lock_options& opt = opt_;
    const std::int64_t waited = std::max<std::int64_t>(0, sys::monotonic_ms() - start_mono_);
    history_entry e;
    e.event = "acquire";
    e.label = label_of(opt);
    e.host = sys::host_name();
    e.priority = opt.priority;
    e.since = since_ms_;
    e.waited_ms = waited;
    e.expect_ms = opt.expected.count() > 0 ? opt.expected.count() : 0;
    if (!r) {
      if (r.error() != errc::timed_out && r.error() != errc::cancelled) return;
      e.outcome = r.error() == errc::timed_out ? "timed-out" : "cancelled";
      e.pid = opt.pid ? opt.pid : sys::self_pid();
      e.gpu = opt.gpu >= 0 ? opt.gpu : (opt.gpus > 1 ? -1 : 0);
      record(base_, std::move(e));
      return;
    }
    const lock& l = r.value();
    if (l.nested() || l.inherited()) return;
    if (shared_) shared_->gpu = l.gpu();
    e.outcome = "acquired";
    e.pid = l.pid();
    e.gpu = l.gpu();
    e.token = l.token();
    remember(e.token, acquired_info{e.label, e.host, e.pid, e.gpu, e.priority, e.expect_ms, sys::monotonic_ms()});
    const std::string& meta = l.meta_json();
    std::vector<std::string> passed;
    if (meta.find("\"passedOver\"") != std::string::npos) passed = parse_meta(meta).passed_over;
    history_entry about = e;
    record(base_, std::move(e));
    for (const std::string& name : passed) {
      history_entry p;
      p.event = "passed-over";
      p.pid = about.pid;
      p.label = about.label;
      p.host = about.host;
      p.gpu = about.gpu;
      p.priority = about.priority;
      p.token = about.token;
      p.other_pid = pid_of_entry(name);
      record(base_, std::move(p));
    }
  } catch (...) {
    // Best effort, as record() is.
  }
}

}  // namespace detail::history

}  // namespace offload_lock
