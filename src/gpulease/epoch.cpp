// The fencing counter. See epoch.hpp.
#include "gpulease/epoch.hpp"

#include <limits>
#include <string>
#include <string_view>

#include "gpulease/location.hpp"
#include "gpulease/record.hpp"
#include "os/clock.hpp"
#include "os/files.hpp"
#include "os/process.hpp"
#include "os/test_hooks.hpp"

namespace offload_lock::detail::gpulease {

namespace {

bool is(const error& e, std::errc c) { return e.code() == sys::errno_code(c); }

// A lock judged stale, moved aside under a name of ours and removed only if
// the file moved is the one judged. Another acquirer may have removed the
// stale lock and made its own between our look and the move: that one is
// put back, so it keeps guarding its holder's two file operations.
void remove_stale_lock(int gpu, const sys::file_id& judged, const std::string& gpu_dir) {
  const std::string aside =
      std::string(counter_lock_name) + ".stale-" + std::to_string(sys::self_pid()) + "-" + sys::random_hex(6);
  const std::string shown = gpu_dir + "/" + counter_lock_name;
  error moved = sys::rename_noreplace(gpu, counter_lock_name, aside, shown);
  if (moved && is(moved, std::errc::invalid_argument)) moved = sys::rename_at(gpu, counter_lock_name, aside, shown);
  if (moved) return;  // gone already, or not ours to move: the next attempt looks again
  auto st = sys::stat_at(gpu, aside, gpu_dir + "/" + aside);
  if (st && st->id != judged && !sys::rename_noreplace(gpu, aside, counter_lock_name, shown)) return;
  (void)sys::unlink_at(gpu, aside, false, gpu_dir + "/" + aside);
}

// The counter's lock as offload-lock makes it names its maker ("offload-lock
// pid N"; gpulease makes it empty, and reads only its age): one whose maker
// is dead (killed between its two file operations) is debris at once, not
// after gpulease's 30 s, in which every acquirer would stall.
constexpr std::string_view lock_marker = "offload-lock pid ";

// The maker's pid namespace is written too: a pid of another namespace
// (a container sharing the root) says nothing here.
std::string own_marker() {
  return std::string(lock_marker) + std::to_string(sys::self_pid()) + " ns " +
         std::to_string(sys::pid_namespace().value_or(0)) + "\n";
}

bool maker_dead(int gpu, const std::string& shown) {
  auto r = sys::read_file_at(gpu, counter_lock_name, 96, shown);
  if (!r || r->bytes.compare(0, lock_marker.size(), lock_marker) != 0) return false;
  const std::string rest = r->bytes.substr(lock_marker.size());
  const auto ns_at = rest.find(" ns ");
  const auto here = sys::pid_namespace();
  if (ns_at == std::string::npos || !here || *here == 0) return false;
  auto ns = parse_go_uint(trim_space(std::string_view(rest).substr(ns_at + 4)));
  if (!ns || *ns != *here) return false;
  auto pid = parse_go_uint(trim_space(std::string_view(rest).substr(0, ns_at)));
  if (!pid || *pid == 0 || *pid > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) return false;
  return sys::probe(static_cast<std::int64_t>(*pid)) == sys::liveness::dead;
}

result<sys::file_id> take_counter_lock(int gpu, const std::string& gpu_dir) {
  const std::string shown = gpu_dir + "/" + counter_lock_name;
  const std::string mine = own_marker();
  for (int attempt = 0;; ++attempt) {
    auto made = sys::create_file_at(gpu, counter_lock_name, mine, 0666, shown);
    if (made) {
      auto st = sys::stat_fd(made->get(), shown);
      if (!st) return st.error();
      return st->id;
    }
    if (!is(made.error(), std::errc::file_exists)) return made.error();
    if (auto st = sys::stat_at(gpu, counter_lock_name, shown);
        st && (sys::now_ms() - st->mtime_ms > counter_lock_stale_ms || maker_dead(gpu, shown))) {
      remove_stale_lock(gpu, st->id, gpu_dir);
      continue;
    }
    if (attempt >= counter_lock_attempts)
      return error(sys::errno_code(std::errc::resource_unavailable_try_again),
                   shown +
                       " did not clear in 2 s (an acquisition is stuck inside the counter's lock, or it is "
                       "debris younger than 30 s)");
    sys::wait_readable({}, counter_lock_pause_ms);
  }
}

result<std::uint64_t> bump(int gpu, const std::string& gpu_dir) {
  auto cur = read_counter(gpu_dir);
  if (!cur) return cur.error();
  const std::uint64_t now = cur->value_or(0);
  if (now == std::numeric_limits<std::uint64_t>::max())
    return error(sys::errno_code(std::errc::value_too_large),
                 gpu_dir + "/" + counter_name + " is at its largest value");
  const std::uint64_t next = now + 1;
  const std::string tmp_shown = gpu_dir + "/" + counter_temp_name;
  // A temporary left by a process that died here is stale: we hold the lock.
  if (auto e = sys::unlink_at(gpu, counter_temp_name, false, tmp_shown)) return e;
  {
    auto f = sys::create_file_at(gpu, counter_temp_name, std::to_string(next), 0666, tmp_shown);
    if (!f) return f.error();
  }
  sys::crash_point("lease.counter-written");
  if (auto e = sys::rename_at(gpu, counter_temp_name, counter_name, tmp_shown)) {
    (void)sys::unlink_at(gpu, counter_temp_name, false, tmp_shown);
    return e;
  }
  return next;
}

}  // namespace

result<std::optional<std::uint64_t>> read_counter(const std::string& gpu_dir) {
  auto gpu = sys::open_dir(sys::cwd, gpu_dir, /*nofollow=*/false, gpu_dir);
  if (!gpu) return gpu.error();
  const std::string shown = gpu_dir + "/" + counter_name;
  auto r = sys::read_file_at(gpu->get(), counter_name, 4096, shown);
  if (!r) {
    if (is(r.error(), std::errc::no_such_file_or_directory)) return std::optional<std::uint64_t>();
    return r.error();
  }
  auto v = parse_go_uint(r->bytes);
  if (!v || r->truncated)
    return error(sys::errno_code(std::errc::invalid_argument),
                 shown + " does not hold a counter (\"" + std::string(trim_space(r->bytes.substr(0, 40))) +
                     "\"): refusing to restart the fencing epochs from zero");
  return std::optional<std::uint64_t>(*v);
}

result<std::uint64_t> issue_epoch(const std::string& gpu_dir) {
  auto gpu = sys::open_dir(sys::cwd, gpu_dir, /*nofollow=*/false, gpu_dir);
  if (!gpu) return gpu.error();
  auto lock = take_counter_lock(gpu->get(), gpu_dir);
  if (!lock) return lock.error();
  sys::crash_point("lease.counter-locked");
  auto next = bump(gpu->get(), gpu_dir);
  // Our own lock, unless it was taken for debris and replaced meanwhile.
  const std::string shown = gpu_dir + "/" + counter_lock_name;
  if (auto st = sys::stat_at(gpu->get(), counter_lock_name, shown); st && st->id == *lock)
    (void)sys::unlink_at(gpu->get(), counter_lock_name, false, shown);
  return next;
}

}  // namespace offload_lock::detail::gpulease
