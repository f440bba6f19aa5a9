// The queue's registry read (registry.hpp, registry_reader): directories and
// entries held open and kept from one read to the next, every file opened
// relative to descriptors without following symlinks.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "meta.hpp"
#include "os/clock.hpp"
#include "os/process.hpp"
#include "registry.hpp"
#include "registry_files.hpp"

namespace offload_lock::detail {

using namespace registry_files;

registry_reader::registry_reader(const std::string& base) : base_(base) {
  std::string parent, name;
  sys::split_path(base, parent, name);
  top_name_ = queue_dir_name(name);
  top_path_ = parent + "/" + top_name_;
}

std::vector<std::string> registry_reader::dir_paths() const {
  std::vector<std::string> out;
  for (const auto& [n, uid] : top_dirs_) out.push_back(top_path_ + "/" + n);
  return out;
}

bool registry_reader::open_top() {
  // Directories held open are listed through their own descriptors (their
  // offsets rewound): a forked child shares those offsets with its parent,
  // so it opens its own.
  if (fork_generation_ != sys::fork_generation()) {
    fork_generation_ = sys::fork_generation();
    parent_.reset();
    borrowed_parent_ = -1;
    top_.reset();
    for (auto& [name, ud] : dirs_) ud.open.reset();
  }
  if (!parent_.valid() && borrowed_parent_ < 0) {
    std::string name;
    auto p = open_parent(base_, name);
    if (!p) return false;
    parent_ = std::move(*p);
  }
  const int parent = parent_.valid() ? parent_.get() : borrowed_parent_;
  // Looked up by name each time (the last waiter out removes the directory
  // and the next one in makes a new one), opened again only when the name
  // holds another directory than the one held open.
  auto named = sys::stat_at(parent, top_name_, top_path_);
  if (!named || !named->is_dir) {
    top_.reset();
    return false;
  }
  result<sys::stat_info> st = *named;
  if (!top_.valid() || named->id != top_open_id_) {
    auto d = sys::open_dir(parent, top_name_, true, top_path_);
    if (!d) {
      top_.reset();
      return false;
    }
    top_ = std::move(*d);
    st = sys::stat_fd(top_.get(), top_path_);
    if (!st) {
      top_.reset();
      return false;
    }
    top_open_id_ = st->id;
  }
  if (!(top_settled_ && st->id == top_id_ && st->mtime_ms == top_mtime_)) {
    auto names = sys::list_dir_again(top_.get(), top_path_, kTopNames);
    if (!names) return false;
    if (st->id != top_id_) {
      top_dirs_.clear();
      top_junk_.clear();
      dirs_.clear();
    }
    std::map<std::string, std::uint32_t> now;
    for (const auto& n : *names) {
      if (top_junk_.count(n)) continue;
      if (auto it = top_dirs_.find(n); it != top_dirs_.end()) {
        now.insert(*it);
        continue;
      }
      auto s = sys::stat_at(top_.get(), n, top_path_);
      if (s && s->is_dir) now[n] = s->uid;
      else if (s) top_junk_.insert(n);
    }
    top_dirs_ = std::move(now);
    top_id_ = st->id;
    top_mtime_ = st->mtime_ms;
    top_settled_ = sys::now_ms() - st->mtime_ms > kSettledMs;
  }
  return true;
}

std::map<std::string, registry_reader::entry_info>& registry_reader::known() {
  thread_local std::map<std::string, entry_info> k;
  return k;
}

std::vector<registry_reader::candidate> registry_reader::candidates(const queue_entry* before) {
  saw_dead_own_ = false;
  std::vector<candidate> out;
  if (!open_top()) return out;
  const std::uint32_t me = sys::effective_uid();
  std::size_t foreign = 0;
  for (const auto& [dir_name, uid] : top_dirs_) {
    if (uid != me && ++foreign > kUserDirs) continue;
    read_dir(dir_name, uid, before, out);
  }
  std::sort(out.begin(), out.end(), [](const candidate& a, const candidate& b) { return served_before(a.e, b.e); });
  return out;
}

std::vector<queue_entry> registry_reader::live(const queue_entry* before) {
  std::vector<queue_entry> out;
  for (auto& c : candidates(before)) {
    if (c.rest) c.e.rec = c.rest->rec;
    // Known to come after `before`: not probed at all.
    if (before && !served_before(c.e, *before)) continue;
    if (!c.proven && !prove(c)) continue;
    if (before && !served_before(c.e, *before)) continue;  // its file changed
    out.push_back(std::move(c.e));
  }
  std::sort(out.begin(), out.end(), served_before);
  return out;
}

std::optional<queue_entry> registry_reader::first(const std::function<bool(const queue_entry&)>& want,
                                                  const std::function<vouch(const queue_entry&)>& vouch_for) {
  // Entries not read before are read for their order, and probed (as the
  // known ones are) only as far as the search goes: a releaser reading the
  // entries that joined behind it since it last read probes one of them,
  // not all.
  defer_probes_ = true;
  auto found = candidates();
  defer_probes_ = false;
  for (auto& c : found) {
    if (c.rest) c.e.rec = c.rest->rec;
    // One placed by its mode alone is read before it is judged: what it
    // would take is in its record.
    if (!c.unread && !want(c.e)) continue;
    if (!c.proven && vouch_for) {
      const vouch v = vouch_for(c.e);
      if (v == vouch::yes) return std::move(c.e);
      if (v == vouch::no) continue;
    }
    if (!c.proven && (!prove(c) || !want(c.e))) continue;
    return std::move(c.e);
  }
  return std::nullopt;
}

void registry_reader::read_dir(const std::string& dir_name, std::uint32_t uid, const queue_entry* before,
                               std::vector<candidate>& out) {
  user_dir& ud = dirs_[dir_name];
  if (ud.uid != uid) ud = user_dir{};
  ud.uid = uid;
  const std::string shown = top_path_ + "/" + dir_name;
  // Opened again only when the name holds another directory than the one
  // held open (as for the registry itself, open_top()).
  auto st = sys::stat_at(top_.get(), dir_name, shown);
  if (!ud.open.valid() || !st || st->id != ud.open_id) {
    ud.open.reset();
    auto d = sys::open_dir(top_.get(), dir_name, true, shown);
    if (!d) return;
    st = sys::stat_fd(d->get(), shown);
    if (!st) return;
    ud.open = std::move(*d);
    ud.open_id = st->id;
  }
  // A directory speaks for its owner alone; one whose owner changed is not read.
  if (!st->is_dir || st->uid != uid) {
    ud.open.reset();
    return;
  }
  const bool mine = uid == sys::effective_uid();
  if (!(ud.settled && st->id == ud.id && st->mtime_ms == ud.mtime)) {
    auto names = sys::list_dir_again(ud.open.get(), shown, mine ? kOwnNames : kForeignNames);
    if (!names) return;
    if (st->id != ud.id) {
      ud.parsed.clear();
      ud.dead.clear();
    }
    ud.names.clear();
    for (auto& n : *names) {
      if (name_kind(n) != kind::entry || ud.dead.count(n)) continue;
      ud.names.push_back(std::move(n));
    }
    // What was read of the entries no longer listed goes (both sorted: one
    // pass, and nothing copied).
    std::sort(ud.names.begin(), ud.names.end());
    auto listed = ud.names.cbegin();
    for (auto it = ud.parsed.begin(); it != ud.parsed.end();) {
      while (listed != ud.names.cend() && *listed < it->first) ++listed;
      if (listed == ud.names.cend() || *listed != it->first) it = ud.parsed.erase(it);
      else ++it;
    }
    ud.id = st->id;
    ud.mtime = st->mtime_ms;
    ud.settled = sys::now_ms() - st->mtime_ms > kSettledMs;
  }
  std::vector<std::string> names = std::move(ud.names);
  ud.names.clear();
  for (auto& n : names) {
    auto cached = ud.parsed.find(n);
    if (cached == ud.parsed.end())
      if (auto k = known().find(top_path_ + "/" + dir_name + "/" + n); k != known().end())
        cached = ud.parsed.emplace(n, k->second).first;
    // Not read before, when only its place is asked for (those before
    // `before`, or the first in line): placed by its mode and ctime if it
    // was written at priority 0, and read only once a caller needs it.
    if (cached == ud.parsed.end() && (before || defer_probes_) && order_by_mode(ud, dir_name, n))
      cached = ud.parsed.find(n);
    if (cached != ud.parsed.end()) {
      // Its order is known: probed only if a caller needs it (prove()), and
      // left out when it comes after `before` (compared on the keys alone).
      const entry_info& i = cached->second;
      if (before) {
        if (served_before_keys(i.rec.priority, i.ctime_ns, uid, dir_name, n, *before))
          out.push_back(candidate{queue_entry{dir_name, n, uid, i.ctime_ns, i.rec}, false, i.partial});
      } else {
        // The whole queue, of which first() usually looks at the front only:
        // the record is copied once it does.
        waiter_record keys;
        keys.pid = i.rec.pid;
        keys.priority = i.rec.priority;
        out.push_back(candidate{queue_entry{dir_name, n, uid, i.ctime_ns, std::move(keys)}, false, i.partial, &i});
      }
      ud.names.push_back(std::move(n));
      continue;
    }
    queue_entry e;
    const bool read = look(ud, dir_name, n, e, !defer_probes_);
    if (!ud.dead.count(n)) ud.names.push_back(std::move(n));
    if (read) out.push_back(candidate{std::move(e), !defer_probes_});
  }
}

bool registry_reader::order_by_mode(user_dir& ud, const std::string& dir_name, const std::string& n) {
  auto st = sys::stat_at(ud.open.get(), n, top_path_ + "/" + dir_name);
  if (!st || !st->is_regular || st->uid != ud.uid || !(st->mode & kPriorityZeroBit) ||
      st->size > static_cast<std::int64_t>(waiter_entry_cap))
    return false;
  std::int64_t name_pid = 0;
  (void)name_kind(n, &name_pid);
  entry_info info;
  info.id = st->id;
  // Arrived as its ctime says (a later change of its metadata only moves
  // that later, never earlier), at priority 0.
  info.ctime_ns = st->ctime_ns;
  info.rec.pid = name_pid;
  info.rec.priority = 0;
  info.partial = true;
  ud.parsed[n] = info;
  // Shared with this thread's other readers (a releaser's), as a read is.
  auto& k = known();
  if (k.size() >= 4096) k.clear();
  k[top_path_ + "/" + dir_name + "/" + n] = info;
  return true;
}

bool registry_reader::prove(candidate& c) {
  auto it = dirs_.find(c.e.dir);
  if (it == dirs_.end() || !it->second.open.valid()) return false;
  if (!look(it->second, c.e.dir, c.e.name, c.e, true)) return false;
  c.proven = true;
  return true;
}

bool registry_reader::look(user_dir& ud, const std::string& dir_name, const std::string& n, queue_entry& out,
                           bool probe) {
  const std::string shown = top_path_ + "/" + dir_name;
  const std::string key = top_path_ + "/" + dir_name + "/" + n;
  auto dead = [&] {
    ud.dead.insert(n);
    ud.parsed.erase(n);
    known().erase(key);
  };
  auto f = sys::open_read(ud.open.get(), n, shown);
  if (!f) {
    if (f.error().code() == std::errc::no_such_file_or_directory) dead();
    return false;  // unreadable for now: looked at again next time
  }
  auto fst = sys::stat_fd(f->get(), shown);
  if (!fst) return false;
  // Only a small regular file of the directory's owner is an entry: one
  // stat, not a read, for each of a flood of oversized or foreign junk.
  if (!fst->is_regular || fst->uid != ud.uid || fst->size > static_cast<std::int64_t>(waiter_entry_cap)) {
    dead();
    return false;
  }
  if (probe) {
    const sys::lock_probe proof = sys::write_locked_elsewhere(f->get());
    if (proof == sys::lock_probe::unlocked) {
      // Unlocked under its final name: its waiter has left or died, for good.
      if (ud.uid == sys::effective_uid()) saw_dead_own_ = true;
      dead();
      return false;
    }
  }
  entry_info info;
  auto cached = ud.parsed.find(n);
  if (cached != ud.parsed.end() && cached->second.id == fst->id && !cached->second.partial) {
    info = cached->second;
  } else {
    auto mb = sys::read_fd(f->get(), *fst, waiter_entry_cap, shown);
    std::int64_t name_pid = 0;
    (void)name_kind(n, &name_pid);
    // One whose mode says priority 0 and whose record says otherwise is
    // not an entry: readers that placed it by its mode alone would disagree
    // with those that read it.
    if (!mb || mb->truncated || !parse_waiter(mb->bytes, info.rec) || info.rec.pid != name_pid ||
        ((fst->mode & kPriorityZeroBit) && info.rec.priority != 0)) {
      dead();
      return false;
    }
    // A file naming a process of another user (visible in this pid
    // namespace) is a forgery: only root speaks for others. (In this
    // user's own directory nothing is gained by one: not looked for.)
    if (ud.uid != 0 && ud.uid != sys::effective_uid())
      if (auto owner = sys::process_uid(info.rec.pid); owner && *owner != ud.uid) {
        dead();
        return false;
      }
    info.id = fst->id;
    info.ctime_ns = fst->ctime_ns;
    ud.parsed[n] = info;
    auto& k = known();
    if (k.size() >= 4096) k.clear();  // bounded: a long queue is read again
    k[key] = info;
  }
  out = queue_entry{dir_name, n, ud.uid, info.ctime_ns, info.rec};
  return true;
}

bool registry_reader::send_to(const queue_entry& e, const std::string& line, bool* gone) {
  auto it = dirs_.find(e.dir);
  if (it == dirs_.end() || !it->second.open.valid() || it->second.uid != sys::effective_uid()) return false;
  auto w = sys::open_fifo_writer(it->second.open.get(), e.stem() + ".wake", top_path_);
  if (!w) {
    if (gone) *gone = w.error().code() == std::errc::no_such_file_or_directory;
    return false;
  }
  const std::string bytes = line + "\n";
  return sys::write_some(w->get(), bytes.data(), bytes.size()) == static_cast<long>(bytes.size());
}

bool registry_reader::present(const queue_entry& e) {
  return top_.valid() && sys::stat_at(top_.get(), e.dir + "/" + e.name, top_path_).has_value();
}

}  // namespace offload_lock::detail
