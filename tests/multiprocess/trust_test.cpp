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

#include <boost/process.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

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
// plant REGISTRY PID|self COUNT PRIORITY: as another user, makes COUNT queue
// entries naming PID in its own directory (u<uid>) of the registry REGISTRY
// (the top `.<name>.queue`, made 01777 if missing), each write-locked from this process as a live waiter keeps its
// own, prints "planted", then keeps them until stdin ends.
int child_plant(int argc, char** argv);

int child_trust(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string path = argv[1];
  if (std::string(argv[0]) == "fork-hold") return child_fork_hold(path);
  if (std::string(argv[0]) == "plant") return child_plant(argc, argv);
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

int child_plant(int argc, char** argv) {
  if (argc < 5) return 2;
  const std::string top = argv[1];
  const std::string pid = std::string(argv[2]) == "self" ? std::to_string(::getpid()) : argv[2];
  const int count = std::atoi(argv[3]);
  const std::string priority = argv[4];
  if (::mkdir(top.c_str(), 01777) == 0) ::chmod(top.c_str(), 01777);
  const std::string dir = top + "/u" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0755) == 0) ::chmod(dir.c_str(), 0755);
  std::vector<int> fds;
  for (int k = 0; k < count; ++k) {
    char id[16];
    std::snprintf(id, sizeof id, "%012x", k + 0xabc000);
    const std::string name = dir + "/" + pid + "-" + id + ".json";
    const int f = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f < 0) return 1;
    const std::string body = "{\"pid\":" + pid + ",\"label\":\"planted\",\"since\":1,\"gpu\":null,\"gpus\":1,\"priority\":" +
                             priority + ",\"queuedUs\":1}\n";
    if (::write(f, body.data(), body.size()) != static_cast<ssize_t>(body.size())) return 1;
    struct flock wr {};
    wr.l_type = F_WRLCK;
    if (::fcntl(f, F_OFD_SETLK, &wr) != 0) return 1;
    fds.push_back(f);
  }
  std::cout << "planted" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
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
  if (other_uid() < 0) OLT_NOT_RUN("needs root to make and act as another user");
  if (auto why = temp_closed_to(other_uid())) OLT_NOT_RUN(*why);
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
  WARN("another user's flock delayed the reclaim of a dead holder's lock: taken in " << took << " ms");
  CHECK_FALSE(fs::exists(d.lock()));
  forger->close_stdin();
  forger->wait();
}

TEST_CASE("another user's read lock on meta.json is no proof of life", "[multiprocess][trust]") {
  if (other_uid() < 0) OLT_NOT_RUN("needs root to make and act as another user");
  if (auto why = temp_closed_to(other_uid())) OLT_NOT_RUN(*why);
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

TEST_CASE("a forked child records its own pid and draws its own tokens, never its parent's", "[multiprocess][trust]") {
  // The library asks the kernel for its pid once, and draws random bytes a
  // pool at a time: a child of fork() must ask and draw afresh, or its
  // meta.json would name its parent and its token would be the one its
  // parent makes next.
  temp_dir d;
  const std::string a = (d.path / "a.lock").string(), b = (d.path / "b.lock").string(),
                    c = (d.path / "c.lock").string();
  {
    auto first = ol::lock::acquire(a, ol::milliseconds(0));
    REQUIRE(first);
    REQUIRE(first->pid() == ::getpid());
  }
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t kid = ::fork();
  if (kid == 0) {
    auto l = ol::lock::acquire(b, ol::milliseconds(0));
    const std::string line = l ? std::to_string(l->pid()) + " " + l->token() + "\n" : "failed\n";
    (void)!::write(report[1], line.data(), line.size());
    std::_Exit(0);
  }
  ::close(report[1]);
  char buf[256] = {};
  const ssize_t n = ::read(report[0], buf, sizeof buf - 1);
  ::close(report[0]);
  int st = 0;
  ::waitpid(kid, &st, 0);
  REQUIRE(n > 0);
  std::istringstream in(std::string(buf, static_cast<std::size_t>(n)));
  long long child_pid = 0;
  std::string child_token;
  in >> child_pid >> child_token;
  CHECK(child_pid == kid);
  auto mine = ol::lock::acquire(c, ol::milliseconds(0));
  REQUIRE(mine);
  CHECK(mine->pid() == ::getpid());
  CHECK_FALSE(child_token.empty());
  CHECK(child_token != mine->token());
}

TEST_CASE("the recorded holder's death frees the lock whatever its forked children hold", "[multiprocess][trust]") {
#if defined(__SANITIZE_THREAD__)
  // The fork guard that drops the lock's descriptors in a forked child is
  // left out under ThreadSanitizer (src/posix/file_locks.cpp): there the child
  // keeps the OFD lock, a proof of life, and the lock stays held.
  OLT_NOT_RUN("not under ThreadSanitizer: the fork guard is left out there");
#endif
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

TEST_CASE("text from meta.json and the waiter registry is escaped at every output", "[multiprocess][trust][cli]") {
  temp_dir d;
  boost::process::child sleeper("/bin/sleep", "60");
  // A holder's label with ESC, BEL, CR, NUL, a right-to-left override and a
  // literal backslash-n; a host with bytes that are not UTF-8.
  make_lock(d.lock(), "{\"pid\":" + std::to_string(sleeper.id()) + ",\"startedAt\":" + std::to_string(now_ms()) +
                          ",\"label\":\"a\\u001b]0;pwned\\u0007b\\rc\\u0000d\\u202ee\\\\nf\",\"host\":\"h\xff\xfe\"}");
  // A waiter's entry, as anyone who can write the lock's parent could plant
  // it: a real newline that fakes a status line, an OSC 52 clipboard write.
  const fs::path mine = queue_dir(d);
  write_file(mine / (std::to_string(::getpid()) + "-0123456789ab.json"),
             "{\"pid\":" + std::to_string(::getpid()) +
                 ",\"label\":\"w\\nheld by root (pid 1)\\u001b]52;c;ZXZpbA==\\u0007\\u2066x\",\"since\":" +
                 std::to_string(now_ms()) + "}");
  // In a registry another user made, where this machine has one (the
  // entry itself is the waiter's: another user's file naming this process
  // would not count at all).
  if (other_uid() >= 0)
    REQUIRE(::chown(queue_top(d).c_str(), static_cast<uid_t>(other_uid()),
                    static_cast<gid_t>(other_uid())) == 0);
  // Held open with the write lock that proves a waiter alive, as a live
  // waiter keeps its entry.
  const int entry_fd = ::open((mine / (std::to_string(::getpid()) + "-0123456789ab.json")).c_str(),
                              O_RDWR | O_CLOEXEC);
  REQUIRE(entry_fd >= 0);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  REQUIRE(::fcntl(entry_fd, F_OFD_SETLK, &fl) == 0);
  auto text = run_cli(with_lock(d, {"status"}));
  CHECK(text.code == 0);
  CHECK(std::count(text.out.begin(), text.out.end(), '\n') == 3);  // the holder's line, the waiter's, the path's
  for (char c : text.out) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
  CHECK(text.out.find("\xe2\x80\xae") == std::string::npos);  // U+202E itself
  CHECK(text.out.find("\xe2\x81\xa6") == std::string::npos);  // U+2066 itself
  CHECK_THAT(text.out, Catch::Contains("a\\x1b]0;pwned\\x07b\\x0dc\\x00d\\u202ee\\\\nf") &&
                           Catch::Contains("w\\nheld by root (pid 1)\\x1b]52;c;ZXZpbA==\\x07\\u2066x") &&
                           Catch::Contains("host h\xef\xbf\xbd\xef\xbf\xbd)"));

  auto prom = run_cli(with_lock(d, {"status", "--prometheus"}));
  CHECK(prom.code == 0);
  for (char c : prom.out) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
  CHECK(prom.out.find("\xe2\x80\xae") == std::string::npos);
  CHECK_THAT(prom.out, Catch::Contains("label=\"a\\\\x1b]0;pwned\\\\x07b\\\\x0dc\\\\x00d\\\\u202ee\\\\nf\""));

  auto js = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(js.code == 0);
  auto j = nlohmann::json::parse(js.out);  // valid JSON, whatever the bytes were
  CHECK(j["label"].get<std::string>().find('\x1b') != std::string::npos);  // JSON escapes it; the value is intact
  ::close(entry_fd);
  sleeper.terminate();
  sleeper.wait();
}

TEST_CASE("hold with standard input closed releases at once, as at end of input", "[multiprocess][trust][cli]") {
  temp_dir d;
  boost::process::ipstream out;
  boost::process::child sh("/bin/sh", "-c", "exec \"$0\" --lock \"$1\" hold <&-", cli_exe(), d.lock(),
                           boost::process::std_out > out);
  std::string first;
  std::getline(out, first);
  CHECK(first.rfind("acquired ", 0) == 0);
  REQUIRE(eventually([&] { return !sh.running(); }));
  sh.wait();
  CHECK(sh.exit_code() == 0);
  CHECK_FALSE(fs::exists(d.lock()));
}

TEST_CASE("a directory a person made is never taken for a lock, nor removed", "[multiprocess][trust][cli]") {
  temp_dir d;
  const fs::path dir = d.path / "gpu-lock";  // `install -d -m 2770`, and GPU_LOCK set to it
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 02770);
  set_mtime(dir, now_ms() - 60'000);  // long past the grace
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"run", "--wait", "3", "--", "true"},
                                              {"status"}, {"acquire", "--wait", "0"}, {"release", "--force"}}) {
    auto r = run_cli(cmd, {{"GPU_LOCK", dir.string()}});
    INFO(cmd[0]);
    CHECK(r.code == 4);
    CHECK_THAT(r.err, Catch::Contains("GPU_LOCK") && Catch::Contains((dir / "gpu.lock").string()) &&
                          Catch::Contains("setgid"));
  }
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 02770);
  // A sticky directory likewise; so is a plain empty directory first seen
  // older than the grace (made by hand, doc/protocol.md B12). An
  // interrupted claim is seen young by whoever waits for it, and is
  // reclaimed after the grace.
  ::chmod(dir.c_str(), 01777);
  CHECK(run_cli({"--lock", dir.string(), "run", "--wait", "3", "--", "true"}).code == 4);
  ::chmod(dir.c_str(), 0755);
  CHECK(run_cli({"--lock", dir.string(), "run", "--wait", "3", "--", "true"}).code == 4);
  CHECK(fs::is_directory(dir));
  ::rmdir(dir.c_str());
  fs::create_directory(dir);  // as a runner's mkdir leaves it, just now
  CHECK(run_cli({"--lock", dir.string(), "run", "--wait", "20", "--", "true"}).code == 0);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("status shows when v1 participants would judge a live holder stale", "[multiprocess][trust][cli]") {
  temp_dir d;
  child holder(self_exe(), {"--child", "hold", d.lock(), "-1"});
  REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
  auto before = nlohmann::json::parse(run_cli(with_lock(d, {"--json", "status"})).out);
  CHECK(before["v1Stale"].is_null());
  // A stalled heartbeat, as v1 sees it: meta.json two hours old.
  set_mtime(fs::path(d.lock()) / "meta.json", now_ms() - 2 * 3'600'000);
  auto r = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["held"] == true);
  CHECK_THAT(j["v1Stale"].get<std::string>(), Catch::Contains("not refreshed"));
  auto text = run_cli(with_lock(d, {"status"}));
  CHECK_THAT(text.out, Catch::Contains("Node runners would judge it stale") && Catch::Contains("may reclaim it"));
  holder.close_stdin();
  holder.wait();
}

TEST_CASE("a holder in another pid namespace: judged by its proof of life, its death noticed at once",
          "[multiprocess][trust][namespaces]") {
  if (!running_as_root()) OLT_NOT_RUN("needs root for unshare --pid");
  for (bool own_proc : {false, true}) {
    INFO((own_proc ? "with its own /proc" : "with the parent's /proc"));
    temp_dir d;
    std::vector<std::string> args = {"--pid", "--fork", "--kill-child"};
    if (own_proc) args.push_back("--mount-proc");
    for (const auto& a : std::vector<std::string>{cli_exe(), "--lock", d.lock(), "hold", "--label", "in-a-container"})
      args.push_back(a);
    child holder("/usr/bin/unshare", args);
    REQUIRE(holder.read_line().value_or("").rfind("acquired ", 0) == 0);
    auto j = nlohmann::json::parse(read_file(fs::path(d.lock()) / "meta.json"));
    CHECK(j["pid"] == 1);  // its own namespace's pid
    REQUIRE(j.contains("pidNs"));
    auto st = run_cli(with_lock(d, {"status"}));
    CHECK(st.code == 0);
    CHECK_THAT(st.out, Catch::Contains("in-a-container") && Catch::Contains("another pid namespace"));
    // A waiter that is already waiting when the holder dies.
    child waiter(cli_exe(), {"--lock", d.lock(), "run", "--wait", "30", "--", "echo", "took it"});
    REQUIRE(eventually([&] { return !ol::waiters(d.lock()).empty(); }));
    holder.kill(SIGKILL);  // unshare, and with it (--kill-child) the holder
    long long took = time_ms([&] { CHECK(waiter.read_line(20s).value_or("") == "took it"); });
    CHECK(waiter.wait() == 0);
    CHECK(took < 2000);
    WARN("a namespaced holder's death was noticed by a waiting process in " << took << " ms");
    holder.wait();
  }
}

TEST_CASE("queue entries another user plants count for nothing, or for one grace at most", "[multiprocess][trust][queue]") {
  if (other_uid() < 0) OLT_NOT_RUN("needs root to make and act as another user");
  if (auto why = temp_closed_to(other_uid())) OLT_NOT_RUN(*why);
  temp_dir d;
  ::chmod(d.path.c_str(), 01777);  // like /tmp: anyone may make the registry
  const std::string registry = (d.path / ".gpu.lock.queue").string(), log = (d.path / "log").string();
  write_file(log, "");
  ::chmod(log.c_str(), 0666);
  child holder(cli_exe(), with_lock(d, {"run", "--", "sh", "-c", "echo held; read x"}));
  REQUIRE(holder.read_line() == std::optional<std::string>("held"));

  // Entries naming the holder, a process of another user: forgeries, even
  // write-locked and at the top priority.
  auto forger = as_other({self_exe(), "--child", "trust", "plant", registry, std::to_string(holder.pid()), "50", "100"});
  REQUIRE(forger->read_line() == std::optional<std::string>("planted"));
  CHECK(ol::waiters(d.lock()).empty());
  auto js = run_cli(with_lock(d, {"--json", "status"}));
  CHECK(nlohmann::json::parse(js.out)["waiters"].empty());

  // Entries naming the planter itself: it is alive and keeps them locked,
  // so they are waiters, ahead of everyone; but it never claims, so the
  // first waiter behind passes it over after one grace, records that, and
  // nobody after gives it another.
  auto planter = as_other({self_exe(), "--child", "trust", "plant", registry, "self", "20", "100"});
  REQUIRE(planter->read_line() == std::optional<std::string>("planted"));
  CHECK(ol::waiters(d.lock()).size() == 20);
  std::vector<std::unique_ptr<child>> ws;
  for (int k = 0; k < 3; ++k) {
    ws.push_back(std::make_unique<child>(
        cli_exe(), with_lock(d, {"run", "--wait", "30", "--label", "w" + std::to_string(k), "--", "sh", "-c",
                                 "cat \"$OFFLOAD_LOCK_PATH/meta.json\" >> \"$0\"; echo >> \"$0\"", log})));
    REQUIRE(eventually([&] { return ol::waiters(d.lock()).size() == static_cast<std::size_t>(k + 21); }));
  }
  holder.write_line("go");
  REQUIRE(holder.wait() == std::optional<int>(0));
  for (auto& w : ws) CHECK(w->wait(30s) == std::optional<int>(0));
  const std::string held = read_file(log);
  CHECK(std::count(held.begin(), held.end(), '\n') == 3);
  CHECK(held.find("\"label\":\"w0\"") < held.find("\"label\":\"w1\""));
  CHECK(held.find("\"label\":\"w1\"") < held.find("\"label\":\"w2\""));
  // Each passed the planter over, and said so for those behind it.
  // passedOver names entries: "<user's directory>/<entry>".
  const std::string passed =
      "\"passedOver\":[\"u" + std::to_string(other_uid()) + "/" + std::to_string(planter->pid()) + "-";
  CHECK(std::count(held.begin(), held.end(), '[') >= 2);
  CHECK_THAT(held, Catch::Contains(passed));
  planter->close_stdin();
  CHECK(planter->wait() == std::optional<int>(0));
  forger->close_stdin();
  CHECK(forger->wait() == std::optional<int>(0));
}
