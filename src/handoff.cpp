// The handoff without a gap (handoff.hpp).
#include "handoff.hpp"

#include <map>

#include "meta.hpp"
#include "os/watch.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "os/programs.hpp"
#include "os/test_hooks.hpp"
#include "queue.hpp"
#include "reclaim.hpp"
#include "registry.hpp"

namespace offload_lock::detail {

std::unique_ptr<staged_lock> staged_lock::make(const target& t, const std::string& stem, const std::string& meta,
                                               bool publish) {
  std::unique_ptr<staged_lock> s(new staged_lock());
  s->name_ = next_prefix(t) + stem;
  std::string parent, name;
  sys::split_path(t.path, parent, name);
  s->path_ = parent + "/" + s->name_;
  s->shown_ = "staged lock " + s->path_;
  s->lock_name_ = t.name;
  s->lock_path_ = t.path;
  auto pd = sys::open_dir(sys::cwd, parent, false, s->shown_);
  if (!pd) return nullptr;
  s->parent_ = std::move(*pd);
  // Built under a private name and renamed in once complete: a releaser
  // waiting for it (hand_to_next) is woken by that rename, and never finds
  // it half made.
  s->building_ = stage_prefix(t) + unique_suffix();
  const std::string& building = s->building_;
  if (sys::mkdir_at(t.parent.get(), building, 0777, s->shown_)) {
    s->taken_ = true;
    return nullptr;
  }
  bool renamed = false;
  auto fail = [&]() -> std::unique_ptr<staged_lock> {
    if (s->meta_.valid()) sys::unguard_from_fork(s->meta_.get());
    s->meta_.reset();
    s->dir_.reset();
    (void)remove_lock_dir_at(t.parent.get(), renamed ? s->name_ : building, s->shown_);
    s->taken_ = true;  // nothing left to withdraw
    return nullptr;
  };
  auto d = sys::open_dir(t.parent.get(), building, true, s->shown_);
  if (!d) return fail();
  s->dir_ = std::move(*d);
  auto st = sys::stat_fd(s->dir_.get(), s->shown_);
  // Readable by everyone who shares the lock whatever this process's umask
  // (0755 at least), as writable as the umask allows beyond that.
  if (!st || sys::chmod_fd(s->dir_.get(), (st->mode & 0777) | 0755, s->shown_)) return fail();
  auto m = sys::create_file_at(s->dir_.get(), meta_file_name, meta, 0644, s->shown_);
  if (!m || sys::chmod_fd(m->get(), 0644, s->shown_) || sys::ofd_lock(m->get(), true)) return fail();
  s->meta_ = std::move(*m);
  // Guarded before anyone can find it: a child forked from here on keeps no
  // copy of its write lock, which proves this waiter alive to a releaser
  // (hand_to_next takes it as the proof of the waiter's entry too).
  s->meta_id_ = sys::guard_from_fork(s->meta_.get());
  if (publish) {
    if (sys::rename_noreplace(t.parent.get(), building, s->name_, s->shown_)) return fail();
    renamed = true;
    s->published_ = true;
  }
  s->id_ = st->id;
  s->bytes_ = meta;
  if (publish) sys::crash_point("handoff.staged");
  return s;
}

error staged_lock::publish(const target& t, const std::string& meta) {
  if (published_) return {};
  if (meta != bytes_) {
    if (auto e = sys::rewrite_fd(meta_.get(), meta, shown_)) return e;
    bytes_ = meta;
  }
  if (auto e = sys::rename_noreplace(t.parent.get(), building_, name_, shown_)) return e;
  published_ = true;
  sys::crash_point("handoff.staged");
  return {};
}

staged_lock::~staged_lock() {
  if (taken_) return;
  // The caller withdraws explicitly before it gives up; this is the last
  // resort of a path that did not (an exception): a staged lock swapped in
  // meanwhile is released plainly, never left to a holder that does not
  // know it holds it.
  try {
    target t;
    t.name = lock_name_;
    t.path = lock_path_;
    t.parent = std::move(parent_);
    if (withdraw(t) && !taken_) {
      {
        mover_lock movers(dir_.get());
        (void)remove_exact(t, id_, "cannot release " + lock_path_, "release");
      }
      sys::unguard_from_fork(meta_.get());
      meta_.reset();
      dir_.reset();
    }
  } catch (...) {
  }
}

bool staged_lock::at_lock_path(const target& t) const {
  // Only while its directory is open here: that keeps its inode from being
  // reused. Once withdrawn (closed, removed), a directory made later can get
  // the same inode number, and a claim of it at the lock path would look
  // like this staged lock swapped in: two holders.
  if (!dir_.valid()) return false;
  auto st = sys::stat_at(t.parent.get(), t.name, t.path);
  return st && st->id == id_;
}

result<bool> staged_lock::claim(const target& t) {
  if (auto e = sys::rename_noreplace(t.parent.get(), current_name(), t.name, t.path)) {
    if (e.code() == std::errc::file_exists || e.code() == std::errc::directory_not_empty) return false;
    if (e.code() == std::errc::no_such_file_or_directory && at_lock_path(t)) return true;  // swapped in meanwhile
    return e;
  }
  published_ = true;  // out of its private name: withdrawn from where it is now
  sys::crash_point("handoff.claimed");
  return true;
}

bool staged_lock::withdraw(const target& t) {
  if (taken_) return false;
  auto gone = [&] {
    taken_ = true;
    sys::unguard_from_fork(meta_.get());
    meta_.reset();
    dir_.reset();
  };
  const std::string aside = aside_prefix(t) + unique_suffix();
  // First out of reach of a swap: under a private name no releaser looks at.
  const std::string from = current_name();
  if (sys::rename_at(t.parent.get(), from, aside, shown_)) {
    if (at_lock_path(t)) return true;
    gone();
    (void)remove_lock_dir_at(t.parent.get(), from, shown_);
    return false;
  }
  auto st = sys::stat_at(t.parent.get(), aside, shown_);
  if (st && st->id == id_) {
    gone();
    (void)remove_lock_dir_at(t.parent.get(), aside, shown_);
    return false;
  }
  // The swap came first: what was moved aside is the releaser's old
  // directory, and the lock path holds this one. The releaser empties its
  // old directory through its own descriptor; what is left is removed here
  // (or, if it is not empty yet, by whoever cleans up after this process).
  (void)remove_lock_dir_at(t.parent.get(), aside, shown_);
  if (at_lock_path(t)) return true;
  gone();
  return false;
}

void staged_lock::touch() { (void)sys::touch_at(dir_.get(), meta_file_name, shown_); }

error staged_lock::rewrite_meta(const std::string& meta) {
  const std::string tmp = ".meta.json." + sys::random_hex(6);
  auto m = sys::create_file_at(dir_.get(), tmp, meta, 0644, shown_);
  error e = m ? sys::chmod_fd(m->get(), 0644, shown_) : m.error();
  if (!e) e = sys::ofd_lock(m->get(), true);
  if (!e) e = sys::rename_at(dir_.get(), tmp, meta_file_name, shown_);
  if (e) {
    (void)sys::unlink_at(dir_.get(), tmp, false, shown_);
    return e;
  }
  meta_id_ = sys::guard_from_fork(m->get());
  sys::unguard_from_fork(meta_.get());
  meta_ = std::move(*m);
  bytes_ = meta;
  return {};
}

sys::fd staged_lock::take_dir() {
  taken_ = true;
  return std::move(dir_);
}

sys::fd staged_lock::take_meta() {
  taken_ = true;
  return std::move(meta_);
}

namespace {

// How long a releasing holder waits for the next in line to stage its lock
// before it releases plainly (see hand_to_next).
constexpr std::int64_t kStageWaitMs = 20;

// The first live waiter in line for `slot`, not passed over, not stopped.
// This thread's reader of each registry it released into: the directories
// it holds open and the entries it has read are kept from one release to the
// next (a process that takes and releases a lock again and again).
registry_reader& reader_for(const std::string& base) {
  thread_local std::map<std::string, std::unique_ptr<registry_reader>> readers;
  auto& r = readers[base];
  if (!r) {
    if (readers.size() > 16) {
      readers.clear();
      return *(readers[base] = std::make_unique<registry_reader>(base));
    }
    r = std::make_unique<registry_reader>(base);
  }
  return *r;
}

// The staged lock of `e` beside `t`, checked as its own: a directory and a
// meta.json of the entry's author, write-locked by it, naming its process.
// `absent`: not (yet) there, or not complete.
enum class staged { ok, absent, refused };
staged check_staged(const target& t, const queue_entry& e) {
  const std::string name = next_prefix(t) + e.stem();
  const std::string shown = "staged lock " + name + " beside " + t.path;
  auto sd = sys::open_dir(t.parent.get(), name, true, shown);
  if (!sd) return sd.error().code() == std::errc::no_such_file_or_directory ? staged::absent : staged::refused;
  auto sst = sys::stat_fd(sd->get(), shown);
  if (!sst || !sst->is_dir || sst->uid != e.uid) return staged::refused;
  auto mf = sys::open_read(sd->get(), meta_file_name, shown);
  if (!mf) return mf.error().code() == std::errc::no_such_file_or_directory ? staged::absent : staged::refused;
  auto mb = sys::read_fd(mf->get(), meta_cap, shown, true);
  if (!mb || mb->st.uid != e.uid || mb->truncated) return staged::refused;
  if (!mb->write_locked()) return staged::absent;  // being written
  const parsed_meta m = parse_meta(mb->bytes);
  if (!m.js_pid || m.token.empty()) return staged::refused;
  // The waiter's process, or the command it will run (`run` names its CMD,
  // started before the lock is taken and held back until then).
  const auto named = static_cast<std::int64_t>(*m.js_pid);
  if (named != e.rec.pid && sys::parent_of(named) != std::optional<std::int64_t>(e.rec.pid)) return staged::refused;
  return staged::ok;
}

// The next in line for slot `slot` of `t`. Only the entries in line before
// it are probed (registry_reader::first), and one whose staged lock beside
// `t` checks out (check_staged) is not probed or read at all: that lock is
// proof of its waiter's life, made only by a waiter for this very slot, so
// the record the entry would add is not needed. `vouched` gets its
// directory and name.
std::optional<queue_entry> next_in_line(const target& t, const std::string& base, int slot,
                                        const std::set<std::string>& skip, std::string& vouched) {
  registry_reader& r = reader_for(base);
  // A stopped one keeps its place; the next one is served. (Asked once per
  // process here, whichever of the two asks first.)
  std::map<std::int64_t, bool> stopped;
  auto is_stopped = [&](const queue_entry& e) {
    auto [it, asked] = stopped.emplace(e.rec.pid, false);
    if (asked) it->second = cannot_claim(e);
    return it->second;
  };
  return r.first(
      [&](const queue_entry& e) { return accepts(e.rec, slot) && !skip.count(passed_name(e)) && !is_stopped(e); },
      [&](const queue_entry& e) {
        using v = registry_reader::vouch;
        if (skip.count(passed_name(e))) return v::no;
        if (check_staged(t, e) != staged::ok) return v::unknown;
        if (is_stopped(e)) return v::no;
        vouched = e.dir + "/" + e.name;
        return v::yes;
      });
}

// A "w" into the wake channel of `e`, through the directory this thread's
// reader holds open, or else by name. A channel that is gone is not looked
// for again by name: its waiter left the queue (having taken the lock, most
// often, by the time a releaser that swapped it in sends this).
void wake(const std::string& base, const queue_entry& e) {
  bool gone = false;
  if (!reader_for(base).send_to(e, "w", &gone) && !gone) (void)send(base, e.dir, e.stem(), "w");
}

}  // namespace

result<bool> hand_to_next(const target& t, const sys::file_id& own_id, int own_dir, int slot, const std::string& base,
                          const std::set<std::string>& skip, const std::string& own_queue_dir) {
  std::string vouched;
  auto next = next_in_line(t, base, slot, skip, vouched);
  if (!next) return false;
  const std::string name = next_prefix(t) + next->stem();
  const std::string shown = "staged lock " + name + " beside " + t.path;
  auto check = [&] { return check_staged(t, *next); };
  staged st = next->dir + "/" + next->name == vouched ? staged::ok : check();
  // Next in line but not staged yet (it has just moved up, and learns so
  // after the lock changed hands): woken, and given a moment to stage, so
  // that the lock passes on without the path ever being absent. A waiter
  // among several slots never stages: released plainly at once.
  if (st == staged::absent && queue_slot(next->rec) >= 0) {
    wake(base, *next);
    // Woken when it renames its staged lock in (staged_lock::make), or by
    // anything else that changes the lock's parent, then looked at again;
    // without an inotify instance, looked at every millisecond.
    std::string parent, name_unused;
    sys::split_path(t.path, parent, name_unused);
    sys::watcher w;
    const int watching = w.watch_entries(parent);
    const std::int64_t until = sys::monotonic_ms() + kStageWaitMs;
    for (st = check(); st == staged::absent;) {
      const std::int64_t left = until - sys::monotonic_ms();
      if (left <= 0) break;
      (void)w.wait(watching >= 0 ? left : std::min<std::int64_t>(left, 1), {}, nullptr);
      st = check();
    }
  }
  if (st != staged::ok) return false;

  sys::crash_point("handoff.checked");
  // The caller holds the movers' flock on its directory (reclaim.hpp), so no
  // other offload-lock process moves it meanwhile; this look narrows what is
  // left, a v1 runner's rm -rf and mkdir, to the span of one system call.
  auto here = sys::stat_at(t.parent.get(), t.name, t.path);
  if (!here || here->id != own_id) return error(errc::lost, t.path);
  if (sys::rename_exchange(t.parent.get(), name, t.name, t.path)) return false;
  sys::crash_point("handoff.exchanged");
  // What the swap moved out must be this holder's directory; anything else
  // (a v1 runner replaced the lock in the instant since the look above) goes
  // back. Gone already: the waiter, withdrawing at that very moment, moved
  // it aside and holds the lock (handoff.hpp, staged_lock::withdraw).
  auto out = sys::stat_at(t.parent.get(), name, shown);
  if (out && out->id != own_id) {
    (void)sys::rename_exchange(t.parent.get(), name, t.name, t.path);
    return error(errc::lost, t.path);
  }
  // From here on the lock is the waiter's, whatever happens to it next: it
  // may take it (and replace its meta.json) at once, release it, or die
  // holding it (then it is stale, as for any holder that dies). Never
  // swapped back: the lock path may already hold someone else's lock.
  //
  // It runs first: woken by the swap, it may be queued on this processor,
  // and what is left here (removing the old directory) can wait.
  sys::give_way();
  //
  // This holder's old directory, now under the staged name: emptied through
  // its own descriptor (wherever a withdrawing waiter may move it), then
  // removed by name when it is still there and still it.
  (void)sys::unlink_at(own_dir, meta_file_name, false, t.path + " (handed over)");
  // Empty now: an rmdir by name can only ever remove an empty directory, so
  // it never takes a staged lock made there again meanwhile (never empty).
  if (out) {
    auto left = sys::stat_at(t.parent.get(), name, shown);
    if (left && left->id == own_id) (void)sys::unlink_at(t.parent.get(), name, true, shown);
  }
  // Woken by its staged directory's move already; the wake channel too, for
  // a waiter that could not watch it.
  wake(base, *next);
  // The registry directory this holder waited in is tidied here, unless
  // the new holder waited in it too: that one tidies it at its release
  // (having left it, it may hold it empty by now, and the next waiter of
  // this user would make it again).
  if (!own_queue_dir.empty() && own_queue_dir != next->dir) tidy_registry(base, own_queue_dir);
  return true;
}

}  // namespace offload_lock::detail
