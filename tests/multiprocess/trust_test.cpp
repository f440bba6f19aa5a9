// The trust boundary: what another local user, a forked child or a pid
// namespace can do to the lock. Another user is made with useradd and
// reached with setpriv; the namespaces come from unshare. These need root,
// and say so when they are not run.
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <iostream>

#include "offload_lock/offload_lock.hpp"
#include "support.hpp"

namespace ol = offload_lock;
using namespace olt;

namespace {

// The test user, made once: its uid, or -1 when that cannot be done here.
int other_uid() {
  static const int uid = [] {
    if (!running_as_root()) return -1;
    const char* name = "offload-lock-other";
    if (!::getpwnam(name)) {
      const std::string cmd = std::string("useradd --system --no-create-home --shell /usr/sbin/nologin ") + name +
                              " >/dev/null 2>&1";
      if (std::system(cmd.c_str()) != 0) return -1;
    }
    const struct passwd* pw = ::getpwnam(name);
    return pw ? static_cast<int>(pw->pw_uid) : -1;
  }();
  return uid;
}

std::unique_ptr<child> as_other(const std::vector<std::string>& cmd) {
  const std::string uid = std::to_string(other_uid());
  std::vector<std::string> full = {"--reuid=" + uid, "--regid=" + uid, "--clear-groups"};
  full.insert(full.end(), cmd.begin(), cmd.end());
  return std::make_unique<child>("/usr/bin/setpriv", full);
}

// The time `f` takes, in milliseconds.
template <class F>
long long time_ms(F f) {
  const auto began = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
}

}  // namespace

// forge PATH: as another user, takes every lock it can on the lock directory
// and its meta.json (OFD read locks, exclusive flocks) and tries the ones it
// should not get, prints what it got, then keeps them until stdin ends.
int child_fork_hold(const std::string& path);

int child_trust(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string path = argv[1];
  if (std::string(argv[0]) == "fork-hold") return child_fork_hold(path);
  if (std::string(argv[0]) != "forge") return 2;
  struct flock rd {};
  rd.l_type = F_RDLCK;
  struct flock wr {};
  wr.l_type = F_WRLCK;
  const int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  const int meta = ::open((path + "/meta.json").c_str(), O_RDONLY);
  std::cout << "dir-read-lock " << (::fcntl(dir, F_OFD_SETLK, &rd) == 0) << " dir-flock "
            << (::flock(dir, LOCK_EX | LOCK_NB) == 0) << " meta-read-lock " << (::fcntl(meta, F_OFD_SETLK, &rd) == 0)
            << " meta-flock " << (::flock(meta, LOCK_EX | LOCK_NB) == 0) << " meta-write-lock "
            << (::fcntl(meta, F_OFD_SETLK, &wr) == 0) << " meta-open-for-writing "
            << (::open((path + "/meta.json").c_str(), O_WRONLY) >= 0) << std::endl;
  // "again": once the holder is gone, the read lock on meta.json too.
  std::string line;
  while (std::getline(std::cin, line))
    if (line == "again") std::cout << "meta-read-lock " << (::fcntl(meta, F_OFD_SETLK, &rd) == 0) << std::endl;
  return 0;
}

// fork-hold PATH: takes the lock (library), forks a child that keeps every
// descriptor and sleeps, says "acquired PID" and "forked CHILD_PID", then
// waits for stdin to end.
int child_fork_hold(const std::string& path) {
  auto l = ol::lock::acquire(path, ol::milliseconds(0));
  if (!l) return 1;
  const pid_t kid = ::fork();
  if (kid == 0) {
    ::sleep(60);
    std::_Exit(0);
  }
  std::cout << "acquired " << ::getpid() << std::endl;
  std::cout << "forked " << kid << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

TEST_CASE("another user's locks neither keep a dead holder's lock alive nor delay its reclaim past a second",
          "[multiprocess][trust]") {
  if (other_uid() < 0) {
    WARN("needs root to make and act as another user; not run");
    return;
  }
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);  // a shared, sticky /tmp
  child holder(self_exe(), {"--child", "hold", d.lock(), "-1"});
  REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
  auto forger = as_other({self_exe(), "--child", "trust", "forge", d.lock()});
  // Read locks and flocks it can take (a read lock on meta.json only once
  // the holder's write lock is gone); the write lock that proves a holder
  // alive it cannot, nor open meta.json for writing.
  CHECK(forger->read_line().value_or("") ==
        "dir-read-lock 1 dir-flock 1 meta-read-lock 0 meta-flock 1 meta-write-lock 0 meta-open-for-writing 0");

  holder.kill(SIGKILL);
  REQUIRE(holder.wait());
  forger->write_line("again");
  CHECK(forger->read_line().value_or("") == "meta-read-lock 1");
  // Dead is dead for every participant, whatever the other user holds.
  auto status = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(status.code == 1);
  CHECK_THAT(status.out, Catch::Contains("\"held\":false") && Catch::Contains("dead"));
  // The reclaim waits for the other user's flock one second at most.
  cli_result r;
  const long long took = time_ms([&] { r = run_cli(with_lock(d, {"run", "--wait", "8", "--", "true"})); });
  CHECK(r.code == 0);
  CHECK(took < 3000);
  CHECK_FALSE(fs::exists(d.lock()));
  forger->close_stdin();
  forger->wait();
}

TEST_CASE("another user's read lock on meta.json is no proof of life", "[multiprocess][trust]") {
  if (other_uid() < 0) {
    WARN("needs root to make and act as another user; not run");
    return;
  }
  temp_dir d;
  ::chmod(d.str().c_str(), 01777);
  // A holder of another pid namespace (its pid means nothing here) whose
  // process has gone: only a proof of life could keep this lock held.
  make_lock(d.lock(), "{\"pid\":1,\"startedAt\":" + std::to_string(now_ms()) + ",\"pidNs\":1}");
  ::chmod((d.lock() + "/meta.json").c_str(), 0644);
  ::chmod(d.lock().c_str(), 0755);
  CHECK(run_cli(with_lock(d, {"status"})).code == 1);
  auto forger = as_other({self_exe(), "--child", "trust", "forge", d.lock()});
  CHECK_THAT(forger->read_line().value_or(""), Catch::Contains("meta-read-lock 1"));
  auto status = run_cli(with_lock(d, {"status"}));
  CHECK(status.code == 1);
  CHECK_THAT(status.out, Catch::Contains("another pid namespace"));
  forger->close_stdin();
  forger->wait();
}

TEST_CASE("a forked child neither holds nor releases its parent's lock", "[multiprocess][trust]") {
  temp_dir d;
  auto l = ol::lock::acquire(d.lock(), ol::milliseconds(0));
  REQUIRE(l);
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t kid = ::fork();
  if (kid == 0) {
    // The child's copy: not held here, and releasing it touches nothing.
    char got[2] = {l->still_held() ? 'H' : 'n', l->release() == ol::errc::lost ? 'L' : '?'};
    (void)!::write(report[1], got, 2);
    std::_Exit(0);
  }
  ::close(report[1]);
  char got[2] = {};
  REQUIRE(::read(report[0], got, 2) == 2);
  ::close(report[0]);
  int st = 0;
  ::waitpid(kid, &st, 0);
  CHECK(got[0] == 'n');
  CHECK(got[1] == 'L');
  CHECK(l->still_held());
  CHECK_FALSE(l->release());
}

TEST_CASE("the recorded holder's death frees the lock whatever its forked children hold", "[multiprocess][trust]") {
  temp_dir d;
  child holder(self_exe(), {"--child", "trust", "fork-hold", d.lock()});
  REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
  const auto forked = holder.read_line().value_or("");
  REQUIRE(forked.rfind("forked ", 0) == 0);
  const int grandchild = std::stoi(forked.substr(7));
  // The holder dies; its forked child lives on with every descriptor of the
  // lock, its OFD write lock included.
  holder.kill(SIGKILL);
  REQUIRE(holder.wait());
  REQUIRE(::kill(grandchild, 0) == 0);
  cli_result r;
  const long long took = time_ms([&] { r = run_cli(with_lock(d, {"run", "--wait", "5", "--", "true"})); });
  ::kill(grandchild, SIGKILL);
  CHECK(r.code == 0);
  CHECK(took < 2000);
}
