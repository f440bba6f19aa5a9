// change_watch (include/offload_lock/watch.hpp): the library's one watcher,
// aimed at what a status board shows.
#include "offload_lock/watch.hpp"

#include "os/files.hpp"
#include "os/watch.hpp"
#include "registry.hpp"

namespace offload_lock {

change_watch::change_watch(std::string path) : path_(std::move(path)), w_(std::make_unique<detail::sys::watcher>()) {}
change_watch::~change_watch() = default;
change_watch::change_watch(change_watch&&) noexcept = default;
change_watch& change_watch::operator=(change_watch&&) noexcept = default;

bool change_watch::arm_directories() {
  std::string parent, name;
  detail::sys::split_path(path_, parent, name);
  const bool watched = w_->watch_entries(parent) >= 0;
  // The registry comes and goes with its waiters; its appearing is an event
  // in the parent, and it is watched from the next round on; so are the
  // users' directories in it, where the entries come and go.
  (void)w_->watch_entries(parent + "/" + detail::queue_dir_name(name));
  detail::registry_reader reader(path_);
  (void)reader.live();
  for (const auto& d : reader.dir_paths()) (void)w_->watch_entries(d);
  return watched;
}

change_watch::processes change_watch::arm_processes(const std::vector<std::int64_t>& pids) {
  for (int id : pid_ids_) w_->unwatch(id);
  pid_ids_.clear();
  processes result = processes::watched;
  for (std::int64_t pid : pids) {
    const int id = w_->watch_pid(pid);
    if (id >= 0) pid_ids_.push_back(id);
    else if (w_->has_pidfd()) return processes::gone;  // ESRCH: it has exited
    else result = processes::unwatched;
  }
  return result;
}

bool change_watch::wait(milliseconds timeout, const std::vector<int>& extra_fds) {
  const std::int64_t ms = timeout.count() < 0 ? -1 : timeout.count();
  return w_->wait(ms, extra_fds) != detail::sys::watcher::wake::extra_fd;
}

}  // namespace offload_lock
