// The offload-lock command: path, status, acquire, release, run, hold and
// wait-free over the library, with one fixed exit code per outcome
// (cli/args.hpp).
#include <csignal>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "offload_lock/lock.hpp"
#include "offload_lock/path.hpp"
#include "posix/process.hpp"
#include "posix/sys.hpp"

namespace ol = offload_lock;
namespace proc = offload_lock::detail::proc;
using namespace offload_lock::cli;
using ojson = nlohmann::ordered_json;

namespace {

// Control characters (a newline in a path, escape sequences in a label
// read from someone's meta.json) are shown escaped, so every message stays
// one line and a terminal shows what is there instead of obeying it.
std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else {
      const char* hex = "0123456789abcdef";
      out += c == '\n' ? std::string("\\n") : std::string("\\x") + hex[c >> 4] + hex[c & 15];
    }
  }
  return out;
}

void say(const std::string& line) { proc::write_stderr("offload-lock: " + printable(line) + "\n"); }

std::string who(const ol::info& i) {
  std::string label = i.label.empty() ? "an unnamed holder" : i.label;
  std::string s = label + " (pid " + (i.pid ? std::to_string(*i.pid) : "unknown");
  if (!i.host.empty()) s += ", host " + i.host;
  return s + ")";
}

ojson to_json(const ol::info& i) {
  ojson j;
  j["path"] = i.path;
  j["held"] = i.held;
  auto opt = [&](const char* key, const std::string& v) { j[key] = v.empty() ? ojson() : ojson(v); };
  j["pid"] = i.pid ? ojson(*i.pid) : ojson();
  j["startedAt"] = i.started_at ? ojson(*i.started_at) : ojson();
  j["heldForMs"] = i.held ? ojson(i.held_for.count()) : ojson();
  opt("label", i.label);
  opt("host", i.host);
  opt("token", i.token);
  j["stale"] = i.stale ? ojson(*i.stale) : ojson();
  j["ownerUid"] = i.owner_uid ? ojson(*i.owner_uid) : ojson();
  return j;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string status_line(const ol::info& i) {
  // A lock directory someone else owns (in a shared /tmp, another user's).
  std::string owner;
  if (i.owner_uid && *i.owner_uid != ol::detail::sys::effective_uid())
    owner = "; lock directory owned by uid " + std::to_string(*i.owner_uid);
  if (i.held) return printable("held by " + who(i) + " for " + ol::describe_duration(i.held_for) + owner);
  if (!i.present) return "free";
  return printable("free (stale lock of " + who(i) + ": " + i.stale.value_or("unknown") + owner + ")");
}

// Exit code and message for a failed acquisition.
int acquire_failed(const ol::error& e, const args& a, const std::string& path, int busy_code) {
  if (e == ol::errc::busy || e == ol::errc::timed_out) {
    if (!a.quiet) {
      ol::info i = ol::inspect(path, a.ttl);
      say((e == ol::errc::busy ? "busy: " : "timed out: ") + path + " is " + status_line(i));
    }
    return busy_code;
  }
  say(e.message());
  return e == ol::errc::bad_input ? exit_usage : exit_system;
}

ol::lock_options options_for(const args& a, const std::string& path) {
  ol::lock_options o;
  o.path = path;
  o.wait = a.wait.value_or(ol::wait_forever);
  o.ttl = a.ttl;
  o.label = a.label;
  if (!a.quiet)
    o.on_wait = [](const ol::info& i) { say("waiting for " + who(i) + ", held for " + ol::describe_duration(i.held_for)); };
  return o;
}

int cmd_path(const args& a) {
  ol::path_resolution r = ol::resolve_path(a.lock_path);
  if (a.json) {
    ojson j;
    j["path"] = r.path;
    j["rule"] = ol::to_string(r.rule);
    j["goPath"] = r.go_path;
    j["goDisagrees"] = r.go_disagrees();
    std::cout << dump(j) << "\n";
    return exit_ok;
  }
  std::cout << r.path << "\n";
  if (a.explain) {
    std::cout << "rule: " << ol::to_string(r.rule) << "\n";
    if (r.go_disagrees())
      std::cout << "go: " << r.go_path
                << " (Go readers resolve this other path: Go reads only $TMPDIR, not $TMP or $TEMP;"
                   " set TMPDIR or GPU_LOCK for both)\n";
    else
      std::cout << "go: same path\n";
  }
  return exit_ok;
}

int cmd_status(const args& a, const std::string& path) {
  ol::info i = ol::inspect(path, a.ttl);
  if (!i.problem.empty()) {
    say(i.problem);
    return exit_system;
  }
  if (a.json) std::cout << dump(to_json(i)) << "\n";
  else std::cout << status_line(i) << "\n";
  return i.held ? exit_ok : exit_busy;
}

int cmd_acquire(const args& a, const std::string& path) {
  ol::lock_options o = options_for(a, path);
  o.pid = a.pid ? a.pid : ol::detail::sys::parent_pid();
  // The keeper below refreshes the lock from another process.
  o.heartbeat = false;
  auto l = ol::lock::acquire(o);
  if (!l) return acquire_failed(l.err(), a, path, exit_busy);
  if (a.json) std::cout << dump(to_json(ol::inspect(path, a.ttl))) << std::endl;
  else std::cout << l->token() << std::endl;
  if (l->inherited()) {
    // Started under this very lock (inside `offload-lock run`): nothing to keep.
    if (!a.quiet) say("passing through: " + path + " is held by the offload-lock run this process runs under");
    return exit_ok;
  }
  // A detached keeper keeps the lock fresh while the holder lives and
  // releases it when the holder exits.
  auto keeper = proc::fork_detached();
  if (keeper && *keeper) {
    (void)l->hold_for_holder();
    std::_Exit(0);
  }
  l->detach();
  return exit_ok;
}

int cmd_release(const args& a, const std::string& path) {
  ol::release_request req;
  req.token = a.token;
  req.force = a.force;
  if (a.token.empty()) req.pid = a.pid ? a.pid : ol::detail::sys::parent_pid();
  // Inside `offload-lock run` a plain release leaves the enclosing run's lock
  // to the run (B11): its acquire passed through, so there is nothing of ours.
  auto inherited = ol::detail::sys::get_env("OFFLOAD_LOCK_TOKEN");
  if (a.token.empty() && !a.pid && !a.force && inherited && !inherited->empty() &&
      ol::inspect(path, a.ttl).token == *inherited) {
    if (!a.quiet) say("passing through: " + path + " belongs to the offload-lock run this process runs under; left for it");
    return exit_ok;
  }
  auto r = ol::release_lock(path, req, a.ttl);
  if (!r) {
    say(r.err().message());
    return exit_system;
  }
  const ol::info& i = r->before;
  switch (r->status) {
    case ol::release_status::released:
      if (a.force && !a.quiet) say("removed " + path + ", held by " + who(i));
      return exit_ok;
    case ol::release_status::already_free:
      if (i.present && !a.quiet) say("already free; a stale lock of " + who(i) + " remains for the next acquirer to reclaim");
      return exit_ok;
    case ol::release_status::not_owner:
      say(path + " is held by " + who(i) + ", not by " +
          (a.token.empty() ? "pid " + std::to_string(req.pid) : "token " + a.token) + "; left in place");
      return exit_not_owner;
  }
  return exit_system;
}

std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// A wait abandoned by a signal ends like being killed by it.
int cancelled_exit(const args& a, const std::string& what) {
  int sig = proc::take_signal();
  if (!a.quiet) say(what + (sig ? " (" + proc::signal_name(sig) + ")" : ""));
  return sig ? 128 + sig : exit_busy;
}

int cmd_run(const args& a, const std::string& path) {
  // Signals are caught before anything else: one that arrives while waiting
  // abandons the wait; one that arrives once CMD runs is passed on to it.
  const int signals = proc::catch_signals();
  std::string token = ol::new_token();
  auto child = proc::gated_child::fork_gated(a.cmd, {{"OFFLOAD_LOCK_PATH", path}, {"OFFLOAD_LOCK_TOKEN", token}});
  if (!child) {
    say(child.err().message());
    return exit_system;
  }
  ol::lock_options o = options_for(a, path);
  o.pid = child->pid();
  o.token = token;
  if (o.label.empty()) o.label = basename_of(a.cmd[0]);
  std::string cmd_name = a.cmd[0];
  const std::int64_t cmd_pid = child->pid();
  const bool term = a.on_lost_term;
  o.on_lost = [path, cmd_name, cmd_pid, term](const ol::error&) {
    say("WARNING: the lock " + path + " was removed or replaced by someone else while " + cmd_name +
        " runs; the GPU is no longer reserved for it" + (term ? "; sending it SIGTERM" : ""));
    if (term) proc::send_signal(cmd_pid, SIGTERM);
  };
  o.cancel_fds = {signals};
  auto l = ol::lock::acquire(o);
  if (!l) {
    // CMD, held back at the gate, was killed while we waited: it ends like
    // any CMD, with its own status.
    if (auto status = child->ended()) {
      child->reap();
      if (!a.quiet) say(a.cmd[0] + " ended before it could start (status " + std::to_string(*status) + ")");
      return *status;
    }
    child->abandon();
    if (l.err() == ol::errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.err(), a, path, a.busy_exit);
  }
  if (auto e = child->start()) {
    (void)l->release();
    if (child->ended_before_start() >= 0) return child->ended_before_start();
    say("cannot run " + a.cmd[0] + ": " + e.code().message());
    return e.code() == std::errc::no_such_file_or_directory ? 127 : 126;
  }
  int status = child->wait_forwarding();
  // Released while CMD is still an unreaped zombie, so no participant ever
  // sees this lock with a dead holder pid (a v1 runner would reclaim it).
  ol::error released = l->release();
  child->reap();
  if (released == ol::errc::lost && !a.quiet)
    say("the lock " + path + " had been removed or replaced by someone else before " + cmd_name + " ended");
  return status;
}

int cmd_hold(const args& a, const std::string& path) {
  ol::lock_options o = options_for(a, path);
  o.on_lost = [path](const ol::error&) {
    say("WARNING: the lock " + path + " was removed or replaced by someone else");
  };
  // Signals first (see cmd_run); and a hold whose requester is gone (its
  // stdin closed) gives up waiting instead of taking the lock for nobody.
  const int signals = proc::catch_signals();
  o.cancel_fds = {signals, 0};
  auto l = ol::lock::acquire(o);
  if (!l) {
    if (l.err() == ol::errc::cancelled) return cancelled_exit(a, "gave up waiting for " + path);
    return acquire_failed(l.err(), a, path, exit_busy);
  }
  std::cout << "acquired " << dump(to_json(ol::inspect(path, a.ttl))) << std::endl;
  proc::wait_for_eof_or_signal();
  const std::string token = l->token();  // release() empties the handle
  ol::error e = l->release();
  if (e == ol::errc::lost) {
    // Released by its token from elsewhere (compat/node does this) leaves
    // the path free: that is an ordinary end. Someone else's lock is not.
    ol::info now = ol::inspect(path, a.ttl);
    if (now.held && now.token != token) {
      if (!a.quiet) say("the lock had been taken over by " + who(now));
      return exit_lost;
    }
    return exit_ok;
  }
  if (e) {
    say(e.message());
    return exit_system;
  }
  return exit_ok;
}

int cmd_wait_free(const args& a, const std::string& path) {
  ol::info i = ol::wait_free(path, a.wait.value_or(ol::wait_forever), a.poll, a.ttl);
  if (!i.problem.empty()) {
    say(i.problem);
    return exit_system;
  }
  if (a.json) std::cout << dump(to_json(i)) << "\n";
  return i.held ? exit_busy : exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argl(argv + 1, argv + argc);
  args a;
  if (auto e = parse(argl, a)) {
    say(*e);
    return exit_usage;
  }
  if (a.help) {
    std::cout << (a.command.empty() ? usage() : command_help(a.command));
    return exit_ok;
  }
  if (a.version) {
    std::cout << "offload-lock " << ol::version() << "\n";
    return exit_ok;
  }
  const std::string path = ol::resolve_path(a.lock_path).path;
  try {
    if (a.command == "path") return cmd_path(a);
    if (a.command == "status") return cmd_status(a, path);
    if (a.command == "acquire") return cmd_acquire(a, path);
    if (a.command == "release") return cmd_release(a, path);
    if (a.command == "run") return cmd_run(a, path);
    if (a.command == "hold") return cmd_hold(a, path);
    if (a.command == "wait-free") return cmd_wait_free(a, path);
  } catch (const std::exception& ex) {
    say(std::string("internal error: ") + ex.what());
    return exit_system;
  }
  say("unknown command '" + a.command + "'");
  return exit_usage;
}
