// What `offload-lock doctor` asks of the system. See probe.hpp.
#include "posix/probe.hpp"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <vector>

#include "posix/sys.hpp"

namespace offload_lock::cli::os {

namespace {

std::string why(int err) { return err ? std::error_code(err, std::generic_category()).message() : std::string("failed"); }

}  // namespace

std::optional<dir_facts> facts_of(const std::string& path, std::string& error) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    error = why(errno);
    return std::nullopt;
  }
  dir_facts f;
  f.uid = st.st_uid;
  f.gid = st.st_gid;
  f.mode = st.st_mode & 07777;
  f.is_dir = S_ISDIR(st.st_mode);
  return f;
}

std::optional<std::string> group_name(std::uint32_t gid) {
  struct group gr {};
  struct group* found = nullptr;
  std::vector<char> buf(16384);
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) != 0 || !found || !gr.gr_name) return std::nullopt;
  return std::string(gr.gr_name);
}

bool in_group(std::uint32_t gid) {
  if (::getegid() == gid) return true;
  std::vector<gid_t> groups(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))) + 1);
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  for (int k = 0; k < n; ++k)
    if (groups[static_cast<std::size_t>(k)] == gid) return true;
  return false;
}

feature_probe probe_features(const std::string& dir) {
  feature_probe p;
  const std::string base = dir + "/.offload-lock-doctor-" + std::to_string(::getpid());
  const std::string a = base + "-a", b = base + "-b", f = base + "-f";
  if (::mkdir(a.c_str(), 0700) != 0) return p;
  p.writable = true;
  // inotify: a watch on the directory sees the scratch directory go.
  if (int in = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK); in < 0) {
    p.inotify = why(errno);
  } else {
    if (::inotify_add_watch(in, dir.c_str(), IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO) < 0) p.inotify = why(errno);
    ::close(in);
  }
  // pidfd: of this very process.
  if (long pfd = ::syscall(SYS_pidfd_open, ::getpid(), 0); pfd < 0) p.pidfd = why(errno);
  else ::close(static_cast<int>(pfd));
  // renameat2(RENAME_NOREPLACE): a move into a free name.
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), 1 /* RENAME_NOREPLACE */) != 0) {
    p.rename_noreplace = why(errno);
    ::rmdir(a.c_str());
  } else {
    ::rmdir(b.c_str());
  }
  // OFD locks: a read lock on a scratch file.
  if (int fd = ::open(f.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600); fd < 0) {
    p.ofd_locks = why(errno);
  } else {
    struct flock fl {};
    fl.l_type = F_RDLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) p.ofd_locks = why(errno);
    ::close(fd);
    ::unlink(f.c_str());
  }
  return p;
}

bool proc_is_own() { return detail::sys::proc_is_own(); }

}  // namespace offload_lock::cli::os
