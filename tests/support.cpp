// Test support. See support.hpp.
#include "support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace bp = boost::process;

namespace olt {

namespace {
void cloexec(int fd) { ::fcntl(fd, F_SETFD, FD_CLOEXEC); }

int decode_status(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}
}  // namespace

temp_dir::temp_dir() {
  path = fs::temp_directory_path() / fs::unique_path("offload-lock-test-%%%%-%%%%-%%%%");
  fs::create_directories(path);
  fs::permissions(path, fs::owner_all | fs::group_read | fs::group_exe | fs::others_read | fs::others_exe);
}

temp_dir::~temp_dir() {
  boost::system::error_code ec;
  // Tests may leave read-only directories behind; make them removable.
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (fs::is_directory(it->symlink_status())) fs::permissions(it->path(), fs::owner_all, ec);
  }
  fs::permissions(path, fs::owner_all, ec);
  fs::remove_all(path, ec);
}

child::child(const std::string& exe, const std::vector<std::string>& args, const env_changes& env) {
  bp::pipe in, out;
  // Boost.Process 1.74 leaves its pipes inheritable: without this, one
  // child holds another's stdin open and EOF never comes.
  cloexec(in.native_source());
  cloexec(in.native_sink());
  cloexec(out.native_source());
  cloexec(out.native_sink());
  err_path_ = fs::temp_directory_path() / fs::unique_path("offload-lock-test-err-%%%%-%%%%");
  // Environment changes go through env(1), which execs the program in place
  // (same pid): Boost.Process 1.74's environment class reads freed memory
  // when edited (ThreadSanitizer caught it), so it is not used.
  std::string program = exe;
  std::vector<std::string> argv = args;
  if (!env.empty()) {
    std::vector<std::string> prefix;
    for (const auto& [k, v] : env) {
      if (v) prefix.push_back(k + "=" + *v);
      else prefix.insert(prefix.begin(), {"-u", k});
    }
    prefix.push_back(exe);
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
    program = "/usr/bin/env";
  }
  bp::child c(program, bp::args(argv), bp::std_in < in, bp::std_out > out, bp::std_err > err_path_);
  pid_ = c.id();
  c.detach();  // this class reaps it with waitpid
  in_ = ::dup(in.native_sink());
  out_ = ::dup(out.native_source());
  cloexec(in_);
  cloexec(out_);
}

child::~child() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    wait(30s);
  }
  if (in_ >= 0) ::close(in_);
  if (out_ >= 0) ::close(out_);
  boost::system::error_code ec;
  fs::remove(err_path_, ec);
}

std::optional<std::string> child::read_line(ms timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    // Polls at least once, so a zero timeout still sees what has arrived.
    auto left = std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now()).count();
    struct pollfd p = {out_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    char tmp[4096];
    ssize_t n = ::read(out_, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buf_.append(tmp, static_cast<std::size_t>(n));
  }
}

void child::write_line(const std::string& line) {
  std::string s = line + "\n";
  if (::write(in_, s.data(), s.size()) != static_cast<ssize_t>(s.size()))
    throw std::runtime_error("write to child failed");
}

void child::close_stdin() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void child::kill(int sig) {
  if (!status_) ::kill(pid_, sig);
}

std::optional<int> child::wait(ms timeout) {
  if (status_) return status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = decode_status(st);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(2ms);
  }
}

std::string child::err_text() const { return read_file(err_path_); }

std::string self_exe() { return fs::read_symlink("/proc/self/exe").string(); }
std::string cli_exe() { return OFFLOAD_LOCK_CLI; }

std::vector<std::string> with_lock(const temp_dir& d, std::vector<std::string> args) {
  args.insert(args.begin(), {"--lock", d.lock()});
  return args;
}

cli_result run_cli(const std::vector<std::string>& args, const env_changes& env, ms timeout) {
  child c(cli_exe(), args, env);
  c.close_stdin();
  cli_result r;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (auto line = c.read_line(std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now())))
    r.out += *line + "\n";
  auto code = c.wait(std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now()) + 1s);
  r.code = code ? *code : -1;
  r.err = c.err_text();
  return r;
}

bool eventually(const std::function<bool()>& pred, ms timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(2ms);
  }
}

char process_state(int pid) {
  const std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = st.rfind(')');
  return close != std::string::npos && close + 2 < st.size() ? st[close + 2] : '\0';
}

bool stop_process(int pid, ms timeout) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  return eventually([&] { return process_state(pid) == 'T'; }, timeout);
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p.string(), std::ios::binary | std::ios::trunc);
  f << bytes;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p.string(), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void set_mtime(const fs::path& p, std::int64_t epoch_ms) {
  struct timespec ts[2];
  ts[0].tv_sec = ts[1].tv_sec = epoch_ms / 1000;
  ts[0].tv_nsec = ts[1].tv_nsec = (epoch_ms % 1000) * 1000000;
  if (::utimensat(AT_FDCWD, p.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0)
    throw std::runtime_error("cannot set mtime of " + p.string());
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int dead_pid() {
  bp::child c("/bin/true");
  int pid = c.id();
  c.wait();
  return pid;
}

void make_lock(const std::string& lock, const std::optional<std::string>& meta) {
  if (::mkdir(lock.c_str(), 0777) != 0) throw std::runtime_error("mkdir " + lock + " failed");
  if (meta) write_file(fs::path(lock) / "meta.json", *meta);
}

bool running_as_root() { return ::geteuid() == 0; }

fs::path queue_top(const temp_dir& d) {
  const fs::path top = d.path / ".gpu.lock.queue";
  if (!fs::exists(top)) {
    fs::create_directory(top);
    ::chmod(top.c_str(), 01777);
  }
  return top;
}

fs::path queue_dir(const temp_dir& d, long uid) {
  const long who = uid < 0 ? static_cast<long>(::geteuid()) : uid;
  const fs::path dir = queue_top(d) / ("u" + std::to_string(who));
  if (!fs::exists(dir)) {
    fs::create_directory(dir);
    ::chmod(dir.c_str(), 0755);
    if (who != static_cast<long>(::geteuid()) && ::chown(dir.c_str(), static_cast<uid_t>(who), static_cast<gid_t>(who)) != 0)
      throw std::runtime_error("chown " + dir.string());
  }
  return dir;
}

std::optional<std::string> temp_closed_to(int uid) {
  const std::string tmp = fs::temp_directory_path().string();
  const std::string u = std::to_string(uid);
  child probe("/usr/bin/setpriv", {"--reuid=" + u, "--regid=" + u, "--clear-groups", "/usr/bin/test", "-x", tmp});
  probe.close_stdin();
  if (probe.wait() == 0) return std::nullopt;
  return "uid " + u + " cannot reach the temp directory " + tmp +
         " (TMPDIR): a test acting as another user needs every directory above its own searchable by that user";
}

}  // namespace olt
