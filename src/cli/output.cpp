// What the command writes: messages, status lines, JSON. See output.hpp.
#include "cli/output.hpp"

#include "cli/escape.hpp"
#include "offload_lock/describe.hpp"
#include "offload_lock/etcd.hpp"
#include "posix/os.hpp"
#include "posix/terminal.hpp"

namespace offload_lock::cli {

std::string printable(const std::string& s) { return escape_text(s, shown_in::terminal); }

std::string prom_quote(const std::string& v) { return "\"" + escape_text(v, shown_in::prometheus) + "\""; }

void say(const std::string& line) { os::write_stderr("offload-lock: " + printable(line) + "\n"); }

std::string who(const info& i) { return describe_holder(i); }

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
    return printable(describe_state(i, owner + doubt));
  }
  return printable(describe_state(i, owner));
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
  // An etcd lock's fencing token (offload_lock/etcd.hpp); a local lock has
  // none, and its object no such key.
  if (is_etcd_lock(i.path)) j["fence"] = i.fence ? ojson(i.fence) : ojson();
  return j;
}

std::string dump(const ojson& j) {
  const std::string raw = j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  // JSON itself escapes only the controls below 0x20. DEL, the C1 controls
  // and the bidirectional overrides a terminal or a reader could be fooled
  // by are written as \uXXXX too: the same value for every JSON parser,
  // nothing a terminal obeys when the line is shown raw. They occur only
  // inside strings (the rest of the text is ASCII punctuation and digits).
  std::string out;
  out.reserve(raw.size());
  const char* hex = "0123456789abcdef";
  for (std::size_t i = 0; i < raw.size();) {
    const unsigned char c = static_cast<unsigned char>(raw[i]);
    char32_t cp = 0;
    const std::size_t n = c < 0x80 ? 1 : utf8_at(raw, i, cp);
    if (c < 0x80) cp = c;
    if (n != 0 && (cp == 0x7f || is_deceptive(cp))) {
      out += "\\u";
      for (int shift : {12, 8, 4, 0}) out += hex[(cp >> shift) & 15];
      i += n;
      continue;
    }
    const std::size_t take = n == 0 ? 1 : n;
    out.append(raw, i, take);
    i += take;
  }
  return out;
}

}  // namespace offload_lock::cli
