// Taking the lock (claim.hpp): staging + renameat2, and the mkdir fallback
// (doc/protocol.md B1).
#include "claim.hpp"

#include "meta.hpp"
#include "os/clock.hpp"
#include "os/test_hooks.hpp"

namespace offload_lock::detail {

namespace {

bool is(const error& e, std::errc c) { return e.code() == c; }

// Readable (and its meta.json readable) by every user who shares the lock,
// whatever this process's umask: a reader that cannot read meta.json could
// only call the lock unknown. Writable as the umask allows (so that a v1
// runner of the same group can still clear a crashed holder's lock).
error make_readable(int dir, unsigned mode, const std::string& shown) {
  const unsigned want = (mode & 0777) | 0755;
  if (want == (mode & 0777)) return {};
  return sys::chmod_fd(dir, want, shown);
}

claim taken(sys::fd dir, sys::fd meta, const sys::file_id& id) {
  claim c;
  c.taken = true;
  c.dir = std::move(dir);
  c.meta = std::move(meta);
  c.id = id;
  return c;
}

// B1 fallback for file systems that refuse RENAME_NOREPLACE: plain mkdir (as
// Node does), then meta.json written under a temporary name and renamed into
// place, so readers see no meta or a complete one, never a partial one.
result<claim> claim_with_mkdir(const target& t, const std::string& bytes) {
  if (auto e = sys::mkdir_at(t.parent.get(), t.name, 0777, t.path)) {
    if (is(e, std::errc::file_exists)) return claim{};
    return e;
  }
  sys::crash_point("acquire.mkdir-made");
  auto d = sys::open_dir(t.parent.get(), t.name, true, t.path);
  if (!d) {
    // Out of descriptors, say: the directory just made is still empty, and
    // only an empty one is removed (rmdir), so a lock someone else has put
    // there meanwhile stays (tests/multiprocess/fault_test.cpp).
    (void)sys::unlink_at(t.parent.get(), t.name, true, t.path);
    return d.error();
  }
  sys::crash_point("acquire.mkdir-locked");
  const std::string tmp = ".meta.json." + sys::random_hex(6);
  auto dst = sys::stat_fd(d->get(), t.path);
  error e = dst ? make_readable(d->get(), dst->mode, t.path) : dst.error();
  auto meta = sys::create_file_at(d->get(), tmp, bytes, meta_mode, t.path + "/" + tmp);
  if (!e && !meta) e = meta.error();
  if (!e) e = sys::chmod_fd(meta->get(), meta_mode, t.path + "/" + tmp);
  if (!e) e = sys::ofd_lock(meta->get(), true);
  sys::crash_point("acquire.mkdir-meta-staged");
  if (!e) e = sys::rename_at(d->get(), tmp, meta_file_name, t.path + "/" + meta_file_name);
  sys::crash_point("acquire.mkdir-meta-renamed");
  if (e) {
    (void)remove_lock_dir_at(t.parent.get(), t.name, t.path);
    return e;
  }
  // The directory's identity as read before the meta was written (a look
  // failing now would leave a complete lock behind with nobody holding it).
  return taken(std::move(*d), std::move(*meta), dst->id);
}

}  // namespace

result<claim> try_claim(const target& t, const std::string& bytes) {
  const std::string stage = stage_prefix(t) + unique_suffix();
  const std::string shown = "staging directory for " + t.path;
  std::string parent, name;
  sys::split_path(t.path, parent, name);
  const std::string staged_meta = parent + "/" + stage + "/" + meta_file_name + " (claiming " + t.path + ")";
  // 0777 minus the umask: the same mode a Node runner's mkdir gives.
  if (auto e = sys::mkdir_at(t.parent.get(), stage, 0777, shown)) return e;
  sys::crash_point("acquire.stage-made");
  auto fail = [&](const error& e) -> result<claim> {
    (void)remove_lock_dir_at(t.parent.get(), stage, shown);
    return e;
  };
  auto d = sys::open_dir(t.parent.get(), stage, true, shown);
  if (!d) return fail(d.error());
  auto st = sys::stat_fd(d->get(), shown);
  if (!st) return fail(st.error());
  if (auto e = make_readable(d->get(), st->mode, shown)) return fail(e);
  auto meta = sys::create_file_at(d->get(), meta_file_name, bytes, meta_mode, staged_meta);
  if (!meta) return fail(meta.error());
  if (auto e = sys::chmod_fd(meta->get(), meta_mode, staged_meta)) return fail(e);
  if (auto e = sys::ofd_lock(meta->get(), true)) return fail(e);
  sys::crash_point("acquire.stage-locked");
  sys::crash_point("acquire.meta-written");
  error e = sys::rename_noreplace(t.parent.get(), stage, t.name, t.path);
  if (!e) {
    sys::crash_point("acquire.renamed");
    return taken(std::move(*d), std::move(*meta), st->id);
  }
  (void)remove_lock_dir_at(t.parent.get(), stage, shown);
  if (is(e, std::errc::file_exists) || is(e, std::errc::directory_not_empty)) return claim{};
  if (is(e, std::errc::invalid_argument) || is(e, std::errc::function_not_supported)) return claim_with_mkdir(t, bytes);
  return e;
}

}  // namespace offload_lock::detail
