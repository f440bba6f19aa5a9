// What the command writes: messages, status lines, JSON. See output.hpp.
#include "cli/output.hpp"

#include "cli/escape.hpp"
#include "posix/os.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

std::string printable(const std::string& s) { return escape_text(s, shown_in::terminal); }

std::string prom_quote(const std::string& v) { return "\"" + escape_text(v, shown_in::prometheus) + "\""; }

void say(const std::string& line) { os::write_stderr("offload-lock: " + printable(line) + "\n"); }

std::string who(const info& i) {
  std::string label = i.label;
  // A v1 holder records no label: the kernel's name of its process, when
  // that process is on this host.
  if (label.empty() && i.pid && (i.host.empty() || i.host == os::host_name()))
    if (auto comm = os::command_name(*i.pid); comm && !comm->empty()) label = *comm;
  if (label.empty()) label = "an unnamed holder";
  std::string s = label + " (pid " + (i.pid ? std::to_string(*i.pid) : "unknown");
  if (!i.host.empty()) s += ", host " + i.host;
  return s + ")";
}

std::string status_line(const info& i) {
  // A lock directory someone else owns (in a shared /tmp, another user's).
  std::string owner;
  if (i.owner_uid && *i.owner_uid != os::effective_uid())
    owner = "; lock directory owned by uid " + std::to_string(*i.owner_uid) +
            (os::user_name(*i.owner_uid) ? " (" + *os::user_name(*i.owner_uid) + ")" : std::string());
  if (i.held) {
    std::string doubt;
    // What the other participants would conclude, when it differs.
    if (i.other_pid_namespace)
      doubt += "; the holder runs in another pid namespace: v1 runners and Go readers outside it judge it by a "
               "stranger's pid";
    if (i.v1_stale_reason)
      doubt += "; Node runners would judge it stale (" + *i.v1_stale_reason + ") and may reclaim it at any moment";
    else if (!i.go_held)
      doubt += "; Go readers see it free";
    return printable("held by " + who(i) + " for " + describe_duration(i.held_for) + owner + doubt);
  }
  if (!i.present) return "free";
  return printable("free (stale lock of " + who(i) + ": " + i.stale_reason.value_or("unknown") + owner + ")");
}

ojson to_json(const info& i) {
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
  j["stale"] = i.stale_reason ? ojson(*i.stale_reason) : ojson();
  j["ownerUid"] = i.owner_uid ? ojson(*i.owner_uid) : ojson();
  j["v1Stale"] = i.held && i.v1_stale_reason ? ojson(*i.v1_stale_reason) : ojson();
  j["otherPidNamespace"] = i.other_pid_namespace;
  return j;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

}  // namespace offload_lock::cli
