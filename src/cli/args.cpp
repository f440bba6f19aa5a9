// Parsing the offload-lock command line. Pure: no I/O, so the parser can be
// unit-tested and fuzzed on its own.
#include "cli/args.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iterator>
#include <map>

#include "cli/escape.hpp"
#include "posix/signal_names.hpp"

namespace offload_lock::cli {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
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

}  // namespace

std::optional<int> parse_signal(const std::string& text) {
  if (all_digits(text) && !text.empty() && text.size() <= 2) {
    const int n = std::stoi(text);
    // KILL and STOP cannot be caught: CMD could not yield, only die or stop.
    if (n >= 1 && n <= 64 && os::catchable_signal(n)) return n;
    return std::nullopt;
  }
  std::string name = text;
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.compare(0, 3, "SIG") == 0) name.erase(0, 3);
  return os::signal_by_name(name);
}

std::optional<std::int64_t> parse_pid(const std::string& text) {
  if (!all_digits(text) || text.size() > 10) return std::nullopt;
  long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (v <= 0 || v > 2147483647LL) return std::nullopt;
  return v;
}

namespace {

// The options every command takes, and each command's own.
const std::vector<std::string>& global_options() {
  static const std::vector<std::string> o = {"--lock", "--ttl", "--json", "--quiet", "--help", "--version"};
  return o;
}
const std::map<std::string, std::vector<std::string>>& command_options() {
  static const std::map<std::string, std::vector<std::string>> t = {
      {"path", {"--explain"}},
      {"status", {"--watch", "--prometheus", "--fleet", "--gpus", "--gpu"}},
      {"acquire", {"--wait", "--remind", "--pid", "--label", "--priority", "--expect", "--max-hold", "--class", "--gpus",
                   "--gpu"}},
      {"release", {"--pid", "--token", "--force", "--gpus", "--gpu"}},
      {"run", {"--wait", "--remind", "--label", "--priority", "--expect", "--max-hold", "--max-hold-grace", "--yield-signal",
               "--busy-exit", "--on-lost", "--class", "--gpus", "--gpu"}},
      {"hold", {"--wait", "--remind", "--label", "--priority", "--expect", "--max-hold", "--class", "--gpus", "--gpu"}},
      {"wait-free", {"--wait", "--poll", "--within"}},
      {"doctor", {}},
      {"history", {"--since", "--by", "--start"}},
      {"top", {"--gpus", "--gpu"}},
      {"serve", {"--listen", "--allow-remote", "--gpus", "--gpu"}},
      {"help", {}},
  };
  return t;
}

// Short options and what they stand for.
std::string long_form(const std::string& a) {
  if (a == "-h") return "--help";
  if (a == "-q") return "--quiet";
  if (a == "-j") return "--json";
  if (a == "-w") return "--wait";
  if (a == "-l") return "--label";
  return a;
}

// Edit distance (insertions, deletions, substitutions, adjacent swaps).
std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// " (did you mean 'X'?)" for the nearest of `choices`, when near enough to
// be a typo; empty otherwise.
std::string suggestion(const std::string& typed, const std::vector<std::string>& choices) {
  if (typed.size() > 64) return {};
  std::string best;
  std::size_t best_d = 3;
  for (const auto& c : choices) {
    const std::size_t dist = distance(typed, c);
    // A prefix of one option is that option (--prom for --prometheus).
    const bool prefix = typed.size() >= 4 && c.compare(0, typed.size(), typed) == 0;
    if (prefix || dist < best_d) {
      best = c;
      best_d = prefix ? 0 : dist;
    }
  }
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

std::optional<std::string> parse_argv(const std::vector<std::string>& argv, args& out) {
  std::size_t i = 0;
  // The value given as --opt=value, until the option takes it.
  std::optional<std::string> inline_value;
  auto value = [&](const std::string& flag, std::string& into) -> std::optional<std::string> {
    if (inline_value) {
      into = *inline_value;
      inline_value.reset();
      return std::nullopt;
    }
    if (i + 1 >= argv.size()) return flag + " needs a value";
    into = argv[++i];
    return std::nullopt;
  };
  auto duration = [&](const std::string& flag, std::chrono::milliseconds& into) -> std::optional<std::string> {
    std::string v;
    if (auto e = value(flag, v)) return e;
    auto d = parse_duration(v);
    if (!d) return "invalid duration for " + flag + ": '" + v +
                   "' (use 0, seconds, a number with ms, s, m, h or d, a compound such as 1h30m, or forever)";
    into = *d;
    return std::nullopt;
  };
  const std::string& cmd = out.command;
  // Whether the command on the line so far takes option `a`.
  auto takes = [&](const std::string& a) {
    auto it = command_options().find(cmd);
    return it != command_options().end() && std::find(it->second.begin(), it->second.end(), a) != it->second.end();
  };
  for (; i < argv.size(); ++i) {
    if (cmd == "run" && (argv[i] == "--" || (!argv[i].empty() && argv[i][0] != '-'))) {
      std::size_t from = argv[i] == "--" ? i + 1 : i;
      out.cmd.assign(argv.begin() + static_cast<std::ptrdiff_t>(from), argv.end());
      if (out.cmd.empty()) return std::string("run needs a command after --");
      break;
    }
    std::string a = long_form(argv[i]);
    inline_value.reset();
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        inline_value = a.substr(eq + 1);
        a.resize(eq);
      }
    }
    if (cmd == "help") {
      // help [COMMAND]: that command's help.
      if (a == "--help") a = "help";  // help --help: help's own
      else if (a.empty() || a[0] == '-') return "help takes a command name, not '" + a + "'";
      if (!command_options().count(a)) return "unknown command '" + a + "'" + suggestion(a, command_names());
      out.command = a;
      if (i + 1 < argv.size()) return "help takes one command, not '" + argv[i + 1] + "' too";
      return std::nullopt;
    }
    if (a == "--help") {
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
    } else if (a == "--quiet") {
      out.quiet = true;
    } else if (cmd.empty() && !a.empty() && a[0] != '-') {
      if (!command_options().count(a))
        return "unknown command '" + a + "'" + suggestion(a, command_names()) + " (see offload-lock --help)";
      out.command = a;
      if (a == "help") out.help = true;
    } else if (a == "--explain" && takes(a)) {
      out.explain = true;
    } else if (a == "--wait" && takes(a)) {
      std::chrono::milliseconds w{};
      if (auto e = duration(a, w)) return e;
      out.wait = w;
    } else if (a == "--poll" && takes(a)) {
      if (auto e = duration(a, out.poll)) return e;
      if (out.poll.count() <= 0 || out.poll == std::chrono::milliseconds::max())
        return std::string("--poll must be a finite duration longer than 0");
    } else if (a == "--within" && takes(a)) {
      std::chrono::milliseconds w{};
      if (auto e = duration(a, w)) return e;
      out.within = w;
    } else if (a == "--pid" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      auto p = parse_pid(v);
      if (!p) return "invalid pid for --pid: '" + v + "' (a positive process id)";
      out.pid = *p;
    } else if (a == "--token" && takes(a)) {
      if (auto e = value(a, out.token)) return e;
      if (out.token.empty()) return std::string("--token needs a non-empty token");
    } else if (a == "--force" && takes(a)) {
      out.force = true;
    } else if (a == "--label" && takes(a)) {
      if (auto e = value(a, out.label)) return e;
      if (out.label.size() > 1024) return std::string("--label is longer than 1024 bytes");
    } else if (a == "--class" && takes(a)) {
      if (auto e = value(a, out.lease_class)) return e;
      if (out.lease_class != "media" && out.lease_class != "text")
        return "invalid class for --class: '" + out.lease_class + "' (media or text)";
    } else if (a == "--priority" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      auto p = parse_priority(v);
      if (!p) return "invalid priority for --priority: '" + v + "' (-100 to 100, batch, normal or interactive)";
      out.priority = *p;
    } else if (a == "--expect" && takes(a)) {
      if (auto e = duration(a, out.expect)) return e;
      if (out.expect.count() <= 0 || out.expect == std::chrono::milliseconds::max())
        return std::string("--expect must be a finite duration longer than 0");
    } else if (a == "--max-hold" && takes(a)) {
      if (auto e = duration(a, out.max_hold)) return e;
      if (out.max_hold.count() <= 0 || out.max_hold == std::chrono::milliseconds::max())
        return std::string("--max-hold must be a finite duration longer than 0");
    } else if (a == "--max-hold-grace" && takes(a)) {
      if (auto e = duration(a, out.max_hold_grace)) return e;
      if (out.max_hold_grace == std::chrono::milliseconds::max())
        return std::string("--max-hold-grace must be a finite duration");
    } else if (a == "--gpus" && takes(a)) {
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
    } else if (a == "--gpu" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (!all_digits(v) || v.size() > 4 || std::stoi(v) > 1023)
        return "invalid GPU slot for --gpu: '" + v + "' (0 to 1023)";
      out.gpu = std::stoi(v);
    } else if (a == "--remind" && takes(a)) {
      if (auto e = duration(a, out.remind)) return e;
    } else if (a == "--watch" && takes(a)) {
      out.watch = true;
    } else if (a == "--prometheus" && takes(a)) {
      out.prometheus = true;
    } else if (a == "--fleet" && takes(a)) {
      out.fleet = true;
    } else if (a == "--busy-exit" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (!all_digits(v) || v.size() > 3 || std::stoi(v) > 255)
        return "invalid exit code for --busy-exit: '" + v + "' (0 to 255)";
      out.busy_exit = std::stoi(v);
    } else if (a == "--yield-signal" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      auto sig = parse_signal(v);
      if (!sig) return "invalid signal for --yield-signal: '" + v + "' (a name such as USR1 or TERM, or a number from 1 to 64)";
      out.yield_signal = *sig;
    } else if (a == "--on-lost" && takes(a)) {
      std::string v;
      if (auto e = value(a, v)) return e;
      if (v != "warn" && v != "term") return "invalid value for --on-lost: '" + v + "' (warn or term)";
      out.on_lost_term = v == "term";
    } else if (a == "--since" && takes(a)) {
      std::chrono::milliseconds d{};
      if (auto e = duration(a, d)) return e;
      if (d == std::chrono::milliseconds::max()) out.since.reset();  // forever: all that is kept
      else out.since = d;
    } else if (a == "--by" && takes(a)) {
      if (auto e = value(a, out.by)) return e;
      if (out.by != "label" && out.by != "user" && out.by != "gpu")
        return "invalid value for --by: '" + out.by + "' (label, user or gpu)";
    } else if (a == "--start" && takes(a)) {
      out.start_history = true;
    } else if (a == "--listen" && takes(a)) {
      if (auto e = value(a, out.listen)) return e;
      if (out.listen.empty() || out.listen.size() > 300) return std::string("--listen needs ADDRESS:PORT");
    } else if (a == "--allow-remote" && takes(a)) {
      out.allow_remote = true;
    } else if (!a.empty() && a[0] == '-') {
      std::vector<std::string> known = global_options();
      if (auto it = command_options().find(cmd); it != command_options().end())
        known.insert(known.end(), it->second.begin(), it->second.end());
      return cmd.empty() ? "unknown option '" + a + "'" + suggestion(a, known)
                         : "unknown option '" + a + "' for " + cmd + suggestion(a, known) + " (see offload-lock " +
                               cmd + " --help)";
    } else {
      return "unexpected argument '" + a + "' for " + cmd;
    }
    if (inline_value) return a + " takes no value";
  }
  if (out.help || out.version) {
    if (out.command == "help") out.command.clear();  // help alone: the overview
    return std::nullopt;
  }
  if (cmd.empty()) return std::string("no command given (see offload-lock --help)");
  if (cmd == "run" && out.cmd.empty()) return std::string("run needs a command: offload-lock run -- CMD [ARG...]");
  if (out.pid && !out.token.empty()) return std::string("release takes --pid or --token, not both");
  if (out.gpu >= 0 && !out.gpus_auto && out.gpus > 1 && out.gpu >= out.gpus)
    return "--gpu " + std::to_string(out.gpu) + " is not among the " + std::to_string(out.gpus) +
           " slots of --gpus (0 to " + std::to_string(out.gpus - 1) + ")";
  if (out.watch && out.prometheus) return std::string("status takes --watch or --prometheus, not both");
  if (out.json && out.prometheus) return std::string("status takes --json or --prometheus, not both");
  if (out.fleet && out.watch) return std::string("status takes --fleet or --watch, not both");
  return std::nullopt;
}

}  // namespace

std::optional<std::string> parse(const std::vector<std::string>& argv, args& out) {
  auto e = parse_argv(argv, out);
  if (e) *e = one_line(*e);
  return e;
}

}  // namespace offload_lock::cli
