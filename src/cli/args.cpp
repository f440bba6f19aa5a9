// Parsing the offload-lock command line. Pure: no I/O, so the parser can be
// unit-tested and fuzzed on its own.
#include "cli/args.hpp"

#include <cmath>
#include <cstdlib>
#include <map>

#include "cli/escape.hpp"

namespace offload_lock::cli {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// A plain decimal number: digits, at most one '.', at least one digit.
std::optional<double> decimal(const std::string& s) {
  int dots = 0, digits = 0;
  for (char c : s) {
    if (c == '.') ++dots;
    else if (c >= '0' && c <= '9') ++digits;
    else return std::nullopt;
  }
  if (dots > 1 || digits == 0 || digits > 18) return std::nullopt;
  return std::strtod(s.c_str(), nullptr);
}

// A usage error is one line (exit 2 promises that), yet it quotes arguments,
// which may hold any byte but NUL: show control characters as escapes.
std::string one_line(const std::string& message) {
  return escape_bytes(message, [](unsigned char c, std::string& out) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (is_control(c)) append_hex_escape(out, c);
    else return false;
    return true;
  });
}

const std::map<std::string, std::string>& helps() {
  static const std::map<std::string, std::string> h = {
      {"path",
       "offload-lock path [--explain]\n"
       "  Print the lock path in use: --lock, else $GPU_LOCK, else <tmpdir>/local-offload-gpu.lock\n"
       "  where tmpdir is the first non-empty of $TMPDIR, $TMP, $TEMP, else /tmp (as Node resolves it).\n"
       "  --explain  also say which rule chose it, and the path Go readers use when it differs\n"
       "             (Go reads only $TMPDIR).\n"},
      {"status",
       "offload-lock status [--watch] [--prometheus] [--gpus N|auto | --gpu K]\n"
       "  Show who holds the lock and who waits for it: one line for the holder, one per waiting\n"
       "  offload-lock process (oldest first). Exit 0 when held (every slot held, with several\n"
       "  GPUs), 1 when free. With --json, one object: path, held, pid, startedAt, heldForMs,\n"
       "  label, host, token, stale, ownerUid, slots (one such object per GPU slot) and waiters\n"
       "  (pid, label, host, since, waitedMs, gpu, gpus).\n"
       "  --watch       redraw whenever the holder or the queue changes, until interrupted\n"
       "  --prometheus  print the node_exporter textfile-collector format instead (exit 0)\n"
       "  --gpus N      show slots 0..N-1 (default: slot 0 and every slot that exists)\n"},
      {"acquire",
       "offload-lock acquire [--wait DUR] [--remind DUR] [--pid PID] [--label TEXT] [--priority P] [--expect DUR]\n"
       "                     [--gpus N|auto | --gpu K]\n"
       "  Take the lock on behalf of PID (default: the calling process's parent, so a script or\n"
       "  Node runner calling this command is the recorded holder) and print its token. The lock\n"
       "  stays held after this command exits; a background keeper refreshes it while PID lives\n"
       "  and releases it when PID exits. Exit 0 taken, 1 busy when --wait ends (default forever).\n"
       "  With --gpus or --gpu it prints the token and the slot taken: TOKEN K.\n"
       "  --priority P, --expect DUR: as for run.\n"},
      {"release",
       "offload-lock release [--pid PID | --token TOKEN] [--force] [--gpus N|auto | --gpu K]\n"
       "  Remove the lock only if that holder holds it (default: --pid of the calling process's\n"
       "  parent). Exit 0 released or already free, 3 held by someone else. --force removes it\n"
       "  anyway and says whose it was. With --gpus N, the slot among 0..N-1 held by that holder.\n"},
      {"run",
       "offload-lock run [--wait DUR] [--remind DUR] [--label TEXT] [--priority P] [--expect DUR] [--busy-exit N]\n"
       "                 [--on-lost warn|term] [--gpus N|auto | --gpu K] -- CMD [ARG...]\n"
       "  Hold the lock while CMD runs and exit with CMD's status (128+N when killed by signal N).\n"
       "  CMD's pid is the recorded holder, so the lock stays held while CMD lives even if\n"
       "  offload-lock itself is killed. SIGINT, SIGTERM and SIGHUP sent to offload-lock go to CMD.\n"
       "  CMD sees OFFLOAD_LOCK_PATH and OFFLOAD_LOCK_TOKEN: offload-lock commands and library calls\n"
       "  inside it pass straight through instead of waiting on their own parent.\n"
       "  If someone else removes or replaces the lock while CMD runs, offload-lock says so on\n"
       "  stderr; with --on-lost term it also sends CMD SIGTERM.\n"
       "  Exit 1 (or N with --busy-exit) when still busy after --wait. With --gpus or --gpu, CMD\n"
       "  also sees CUDA_VISIBLE_DEVICES naming the GPU of the slot taken.\n"
       "  Waiters are served in order: --priority P (-100..100, batch, normal (default) or\n"
       "  interactive) first, then arrival. --expect DUR declares how long CMD will hold the lock,\n"
       "  for the ETAs status shows.\n"},
      {"hold",
       "offload-lock hold [--wait DUR] [--remind DUR] [--label TEXT] [--priority P] [--expect DUR]\n"
       "                  [--gpus N|auto | --gpu K]\n"
       "  Take the lock, print one line `acquired {json}` on stdout, hold it until stdin reaches\n"
       "  EOF or SIGTERM/SIGINT arrives, then release it and exit 0. Exit 1 when busy after\n"
       "  --wait, 5 when the lock was taken from it meanwhile. The json has the slot as \"gpu\".\n"
       "  --priority P, --expect DUR: as for run.\n"},
      {"wait-free",
       "offload-lock wait-free [--wait DUR] [--poll DUR] [--within DUR]\n"
       "  Exit 0 as soon as the lock is free, 1 if still held when --wait ends. Wakes on the lock's\n"
       "  removal and its holder's death; --poll (default 1s) is the re-check period where the file\n"
       "  system gives no notifications. --within DUR: exit 1 at once when the holder declared\n"
       "  that it will keep the lock longer than DUR from now.\n"},
  };
  return h;
}

}  // namespace

std::optional<int> parse_priority(const std::string& text) {
  if (text == "batch") return -10;
  if (text == "normal") return 0;
  if (text == "interactive") return 10;
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.size() > 3 || !all_digits(digits)) return std::nullopt;
  const int v = std::stoi(digits) * (negative ? -1 : 1);
  if (v < -100 || v > 100) return std::nullopt;
  return v;
}

std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  using ms = std::chrono::milliseconds;
  if (text == "forever") return ms::max();
  std::string num = text;
  double unit = 1000.0;
  auto ends = [&](const char* suffix) {
    std::string s(suffix);
    return num.size() > s.size() && num.compare(num.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("ms")) { unit = 1.0; num.resize(num.size() - 2); }
  else if (ends("s")) { unit = 1000.0; num.resize(num.size() - 1); }
  else if (ends("m")) { unit = 60'000.0; num.resize(num.size() - 1); }
  else if (ends("h")) { unit = 3'600'000.0; num.resize(num.size() - 1); }
  auto v = decimal(num);
  if (!v) return std::nullopt;
  double total = std::ceil(*v * unit);
  // Ten years is far beyond any real wait; larger values are a typo.
  if (!std::isfinite(total) || total > 315'360'000'000.0) return std::nullopt;
  return ms(static_cast<long long>(total));
}

std::optional<std::int64_t> parse_pid(const std::string& text) {
  if (!all_digits(text) || text.size() > 10) return std::nullopt;
  long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (v <= 0 || v > 2147483647LL) return std::nullopt;
  return v;
}

namespace {

std::optional<std::string> parse_argv(const std::vector<std::string>& argv, args& out) {
  std::size_t i = 0;
  auto value = [&](const std::string& flag, std::string& into) -> std::optional<std::string> {
    if (i + 1 >= argv.size()) return flag + " needs a value";
    into = argv[++i];
    return std::nullopt;
  };
  auto duration = [&](const std::string& flag, std::chrono::milliseconds& into) -> std::optional<std::string> {
    std::string v;
    if (auto e = value(flag, v)) return e;
    auto d = parse_duration(v);
    if (!d) return "invalid duration for " + flag + ": '" + v +
                   "' (use 0, seconds, a number with ms/s/m/h, or forever)";
    into = *d;
    return std::nullopt;
  };
  const std::string& cmd = out.command;
  auto allowed = [&](std::initializer_list<const char*> cmds) {
    for (const char* c : cmds)
      if (cmd == c) return true;
    return false;
  };
  for (; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (cmd == "run" && (a == "--" || (!a.empty() && a[0] != '-'))) {
      std::size_t from = a == "--" ? i + 1 : i;
      out.cmd.assign(argv.begin() + static_cast<std::ptrdiff_t>(from), argv.end());
      if (out.cmd.empty()) return std::string("run needs a command after --");
      break;
    }
    if (a == "--help" || a == "-h") {
      out.help = true;
    } else if (a == "--version") {
      out.version = true;
    } else if (a == "--lock") {
      if (auto e = value(a, out.lock_path)) return e;
      if (out.lock_path.empty()) return std::string("--lock needs a non-empty path");
    } else if (a == "--ttl") {
      if (auto e = duration(a, out.ttl)) return e;
      if (out.ttl.count() <= 0) return std::string("--ttl must be longer than 0");
    } else if (a == "--json") {
      out.json = true;
    } else if (a == "--quiet" || a == "-q") {
      out.quiet = true;
    } else if (cmd.empty() && !a.empty() && a[0] != '-') {
      if (!helps().count(a)) return "unknown command '" + a + "' (see offload-lock --help)";
      out.command = a;
    } else if (a == "--explain" && allowed({"path"})) {
      out.explain = true;
    } else if (a == "--wait" && allowed({"acquire", "run", "hold", "wait-free"})) {
      std::chrono::milliseconds w{};
      if (auto e = duration(a, w)) return e;
      out.wait = w;
    } else if (a == "--poll" && allowed({"wait-free"})) {
      if (auto e = duration(a, out.poll)) return e;
      if (out.poll.count() <= 0 || out.poll == std::chrono::milliseconds::max())
        return std::string("--poll must be a finite duration longer than 0");
    } else if (a == "--within" && allowed({"wait-free"})) {
      std::chrono::milliseconds w{};
      if (auto e = duration(a, w)) return e;
      out.within = w;
    } else if (a == "--pid" && allowed({"acquire", "release"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      auto p = parse_pid(v);
      if (!p) return "invalid pid for --pid: '" + v + "' (a positive process id)";
      out.pid = *p;
    } else if (a == "--token" && allowed({"release"})) {
      if (auto e = value(a, out.token)) return e;
      if (out.token.empty()) return std::string("--token needs a non-empty token");
    } else if (a == "--force" && allowed({"release"})) {
      out.force = true;
    } else if (a == "--label" && allowed({"acquire", "run", "hold"})) {
      if (auto e = value(a, out.label)) return e;
      if (out.label.size() > 1024) return std::string("--label is longer than 1024 bytes");
    } else if (a == "--priority" && allowed({"acquire", "run", "hold"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      auto p = parse_priority(v);
      if (!p) return "invalid priority for --priority: '" + v + "' (-100 to 100, batch, normal or interactive)";
      out.priority = *p;
    } else if (a == "--expect" && allowed({"acquire", "run", "hold"})) {
      if (auto e = duration(a, out.expect)) return e;
      if (out.expect.count() <= 0 || out.expect == std::chrono::milliseconds::max())
        return std::string("--expect must be a finite duration longer than 0");
    } else if (a == "--gpus" && allowed({"acquire", "run", "hold", "status", "release"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (v == "auto") {
        out.gpus_auto = true;
      } else {
        if (!all_digits(v) || v.size() > 4 || std::stoi(v) < 1 || std::stoi(v) > 1024)
          return "invalid GPU count for --gpus: '" + v + "' (1 to 1024, or auto)";
        out.gpus = std::stoi(v);
        out.gpus_auto = false;
      }
    } else if (a == "--gpu" && allowed({"acquire", "run", "hold", "status", "release"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (!all_digits(v) || v.size() > 4 || std::stoi(v) > 1023)
        return "invalid GPU slot for --gpu: '" + v + "' (0 to 1023)";
      out.gpu = std::stoi(v);
    } else if (a == "--remind" && allowed({"acquire", "run", "hold"})) {
      if (auto e = duration(a, out.remind)) return e;
    } else if (a == "--watch" && allowed({"status"})) {
      out.watch = true;
    } else if (a == "--prometheus" && allowed({"status"})) {
      out.prometheus = true;
    } else if (a == "--busy-exit" && allowed({"run"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (!all_digits(v) || v.size() > 3 || std::stoi(v) > 255)
        return "invalid exit code for --busy-exit: '" + v + "' (0 to 255)";
      out.busy_exit = std::stoi(v);
    } else if (a == "--on-lost" && allowed({"run"})) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (v != "warn" && v != "term") return "invalid value for --on-lost: '" + v + "' (warn or term)";
      out.on_lost_term = v == "term";
    } else if (!a.empty() && a[0] == '-') {
      return cmd.empty() ? "unknown option '" + a + "'"
                         : "unknown option '" + a + "' for " + cmd + " (see offload-lock " + cmd + " --help)";
    } else {
      return "unexpected argument '" + a + "' for " + cmd;
    }
  }
  if (out.help || out.version) return std::nullopt;
  if (cmd.empty()) return std::string("no command given (see offload-lock --help)");
  if (cmd == "run" && out.cmd.empty()) return std::string("run needs a command: offload-lock run -- CMD [ARG...]");
  if (out.pid && !out.token.empty()) return std::string("release takes --pid or --token, not both");
  if (out.gpu >= 0 && !out.gpus_auto && out.gpus > 1 && out.gpu >= out.gpus)
    return "--gpu " + std::to_string(out.gpu) + " is not among the " + std::to_string(out.gpus) +
           " slots of --gpus (0 to " + std::to_string(out.gpus - 1) + ")";
  if (out.watch && out.prometheus) return std::string("status takes --watch or --prometheus, not both");
  if (out.json && out.prometheus) return std::string("status takes --json or --prometheus, not both");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse(const std::vector<std::string>& argv, args& out) {
  auto e = parse_argv(argv, out);
  if (e) *e = one_line(*e);
  return e;
}

std::string usage() {
  std::string u =
      "usage: offload-lock [--lock PATH] [--ttl DUR] [--json] [--quiet] COMMAND ...\n"
      "\n"
      "One machine-wide GPU lock shared with the Node render runners (gpu-lock.mjs) and the Go\n"
      "readers (gpulock): a directory holding meta.json {pid, startedAt}.\n"
      "\n"
      "global options:\n"
      "  --lock PATH   the lock directory (default: $GPU_LOCK, else <tmpdir>/local-offload-gpu.lock)\n"
      "  --ttl DUR     a holder whose meta.json is older than this is stale (default 1h)\n"
      "  --json        machine-readable output (status, acquire, hold, path)\n"
      "  --quiet       no progress messages on stderr\n"
      "\n"
      "commands:\n";
  for (const auto& [name, text] : helps()) u += "  " + text.substr(0, text.find('\n')).substr(13) + "\n";
  u +=
      "\n"
      "DUR: 0, seconds as a number (fractions allowed), a number with ms, s, m or h, or forever.\n"
      "--wait defaults to forever.\n"
      "\n"
      "while acquire, run and hold wait, stderr shows who holds the lock: on a terminal one line\n"
      "kept up to date in place; otherwise a line each time the holder changes and a reminder\n"
      "every --remind DUR (default 1m; 0: none). --quiet silences both.\n"
      "\n"
      "several GPUs: --gpus N (or auto: counted from /proc/driver/nvidia/gpus or nvidia-smi -L)\n"
      "takes the first free of N slots, slot 0 being the lock path itself and slot K the path\n"
      "with the suffix .gpuK; --gpu K takes slot K only.\n"
      "\n"
      "exit codes: 0 ok, 1 busy (status: free; wait-free: still held), 2 usage error,\n"
      "            3 not the owner, 4 system error, 5 lock lost; run exits with CMD's status.\n";
  return u;
}

std::string command_help(const std::string& command) {
  auto it = helps().find(command);
  return it == helps().end() ? usage() : it->second;
}

}  // namespace offload_lock::cli
