// The help texts of offload-lock: the overview and one text per command.
// The overview's list of commands is made from each command's synopsis, so
// the two cannot disagree; tests/cli/docs_test.sh holds the man page, the
// completion and doc/command.md to the same texts.
#include <map>

#include "cli/args.hpp"

namespace offload_lock::cli {

namespace {

const std::map<std::string, std::string>& helps() {
  // First the synopsis (the lines up to the first one indented by two
  // spaces), then what the command does.
  static const std::map<std::string, std::string> h = {
      {"path",
       "offload-lock path [--explain]\n"
       "  Print the lock path in use: --lock, else $GPU_LOCK, else <tmpdir>/local-offload-gpu.lock\n"
       "  where tmpdir is the first non-empty of $TMPDIR, $TMP, $TEMP, else /tmp (as Node resolves it).\n"
       "  --explain  also say which rule chose it, and the path Go readers use when it differs\n"
       "             (Go reads only $TMPDIR).\n"},
      {"status",
       "offload-lock status [--watch] [--prometheus] [--fleet] [--gpus N|auto | --gpu K]\n"
       "  Show who holds the lock and who waits for it: one line for the holder (with its expected\n"
       "  free time when it declared a duration), one per waiting offload-lock process in the order\n"
       "  the lock serves them, with position, priority and ETA. Under each slot, the GPU as nvidia-smi reports it:\n"
       "  memory used and total, utilization, and each process on it, with or without the lock.\n"
       "  Exit 0 when held (every slot held, with several GPUs), 1 when free. Where a gpulease\n"
       "  root exists, a gpulease holder keeps the GPU (slot 0) busy though its lock is free: the\n"
       "  first line names it and the exit status is 0. With --json, one object: path, held (the\n"
       "  lock), busy and busyBy (the GPU: lock, gpulease or null), pid, startedAt, heldForMs,\n"
       "  label, host, token, stale, ownerUid, gpu, device (null, or index, uuid, name,\n"
       "  memoryUsedMiB, memoryTotalMiB, utilizationPct, processes: pid, name, memoryMiB,\n"
       "  holdsLock), slots (one such object per GPU slot), gpulease (null where no root exists) and\n"
       "  waiters (pid, label, host, since, waitedMs, gpu, gpus, position, priority, expectMs,\n"
       "  etaMs), and for the holder priority, expectMs, freeInMs and yieldRequested.\n"
       "  --watch       redraw whenever the holder or the queue changes, until interrupted; with\n"
       "                --json, one line per change, each line the --json object\n"
       "  --prometheus  print the node_exporter textfile-collector format instead (exit 0)\n"
       "  --fleet       every host's locks instead, as published to $OFFLOAD_LOCK_FLEET\n"
       "                (etcd://HOST:PORT[,...]): each holder and its queue (--json, --prometheus\n"
       "                too; exit 4 when etcd cannot be reached)\n"
       "  --gpus N      show slots 0..N-1 (default: slot 0 and every slot that exists)\n"},
      {"acquire",
       "offload-lock acquire [-w|--wait DUR] [--remind DUR] [--pid PID] [-l|--label TEXT]\n"
       "                     [--priority P] [--expect DUR] [--max-hold DUR] [--class media|text]\n"
       "                     [--gpus N|auto | --gpu K]\n"
       "  Take the lock on behalf of PID (default: the calling process's parent, so a script or\n"
       "  Node runner calling this command is the recorded holder) and print its token. The lock\n"
       "  stays held after this command exits; a background keeper refreshes it while PID lives\n"
       "  and releases it when PID exits. Exit 0 taken, 1 busy when --wait ends (default forever).\n"
       "  With --gpus or --gpu it prints the token and the slot taken: TOKEN K.\n"
       "  --priority P, --expect DUR: as for run. --max-hold DUR is recorded for status (\"max hold\n"
       "  passed 3m ago\"); nothing ends the hold when it passes. --class: as for run.\n"},
      {"release",
       "offload-lock release [--pid PID | --token TOKEN] [--force] [--gpus N|auto | --gpu K]\n"
       "  Remove the lock only if that holder holds it (default: --pid of the calling process's\n"
       "  parent). Exit 0 released or already free, 3 held by someone else. --force removes it\n"
       "  anyway and says whose it was. With --gpus N, the slot among 0..N-1 held by that holder.\n"},
      {"run",
       "offload-lock run [-w|--wait DUR] [--remind DUR] [-l|--label TEXT] [--priority P] [--expect DUR]\n"
       "                 [--max-hold DUR [--max-hold-grace DUR]] [--yield-signal SIG] [--busy-exit N]\n"
       "                 [--on-lost warn|term] [--class media|text] [--gpus N|auto | --gpu K] -- CMD [ARG...]\n"
       "  Hold the lock while CMD runs and exit with CMD's status (128+N when killed by signal N).\n"
       "  CMD's pid is the recorded holder, so the lock stays held while CMD lives even if\n"
       "  offload-lock itself is killed. SIGINT, SIGTERM and SIGHUP sent to offload-lock go to CMD.\n"
       "  CMD sees OFFLOAD_LOCK_PATH and OFFLOAD_LOCK_TOKEN: offload-lock commands and library calls\n"
       "  inside it pass straight through instead of waiting on their own parent.\n"
       "  If someone else removes or replaces the lock while CMD runs, offload-lock says so on\n"
       "  stderr; with --on-lost term it also sends CMD SIGTERM.\n"
       "  Exit 1 (or N with --busy-exit) when still busy after --wait. With --gpus or --gpu, CMD\n"
       "  also sees OFFLOAD_LOCK_GPU=K and CUDA_VISIBLE_DEVICES naming GPU K by its UUID (else K,\n"
       "  with CUDA_DEVICE_ORDER=PCI_BUS_ID).\n"
       "  Waiters are served in order: --priority P (-100 to 100, or batch, normal (the default),\n"
       "  interactive) first, then arrival. --expect DUR declares how long CMD will hold the lock,\n"
       "  for the ETAs status shows. --yield-signal SIG (a name such as USR1, or a number): CMD\n"
       "  receives SIG once when a waiter of higher priority than its own arrives.\n"
       "  --max-hold DUR: CMD may hold the lock that long. Then it receives the yield signal (with\n"
       "  --yield-signal), after --max-hold-grace DUR (default 30s) SIGTERM, after another grace\n"
       "  SIGKILL (to its process group when it leads one); the lock is released and run exits\n"
       "  124, however CMD ended once the maximum hold had passed.\n"
       "  Where a gpulease state root exists (OFFLOAD_LOCK_LEASE_ROOT, LOCAL_OFFLOAD_STATE_DIR or\n"
       "  /var/lib/local-offload), the lock comes with a gpulease lease of --class (default media),\n"
       "  and CMD sees its GPU_LEASE_DIR, GPU_LEASE_EPOCH and GPU_LEASE_CLASS.\n"},
      {"hold",
       "offload-lock hold [-w|--wait DUR] [--remind DUR] [-l|--label TEXT] [--priority P] [--expect DUR]\n"
       "                  [--max-hold DUR] [--class media|text] [--gpus N|auto | --gpu K]\n"
       "  Take the lock, print one line `acquired {json}` on stdout, hold it until stdin reaches\n"
       "  EOF or SIGTERM/SIGINT arrives, then release it and exit 0. Exit 1 when busy after\n"
       "  --wait, 5 when the lock was removed or replaced during the hold (whoever did it, even\n"
       "  if the path is free again). The json has the slot as \"gpu\".\n"
       "  --priority P, --expect DUR: as for run. --max-hold DUR: at the maximum hold it releases\n"
       "  the lock and exits 124.\n"},
      {"doctor",
       "offload-lock doctor\n"
       "  Check the setup and explain it, one line each: the path Node's rule, Go's rule and\n"
       "  GPU_LOCK give and whether they agree; what is at the lock path; the parent directory's\n"
       "  owner, mode, sticky and setgid bits and who can reclaim whose stale lock there; whether\n"
       "  inotify, pidfd, RENAME_NOREPLACE and OFD locks work on that file system; whether /proc\n"
       "  is this pid namespace's; nvidia-smi and the GPU count. Exit 0 when all is well, 1 with\n"
       "  warnings. With --json, one object: path, checks (name, ok, detail), warnings.\n"},
      {"history",
       "offload-lock history [--since DUR] [--by label|user|gpu] [--start]\n"
       "  What the lock's history says: time held, acquisitions, waits (p50, p90, max), waits that\n"
       "  timed out or were cancelled, and crashes, in all and, with --by, for each label, user or\n"
       "  GPU slot; then the last 20 entries. It is kept only once started (--start), in\n"
       "  .<name>.history beside the lock: one file per user that only that user can write, so no\n"
       "  entry speaks for anyone else; lines that are not entries, or that claim another user than\n"
       "  their file's owner, are skipped and counted. With --json, one object: path, kept, since,\n"
       "  totals, by, groups, recent, files, skipped.\n"
       "  --since DUR   only what happened in the last DUR (default: all that is kept)\n"
       "  --by WHAT     the sums for each label, user or gpu too\n"
       "  --start       start keeping the history: make its directory, as open as the lock's\n"
       "                parent and sticky where others can write (exit 4 when it cannot)\n"},
      {"top",
       "offload-lock top [--gpus N|auto | --gpu K]\n"
       "  A live view on a terminal: each slot's holder, how long it has held the lock and when it\n"
       "  expects to be done; the queue with positions, priorities and ETAs; the last entries of\n"
       "  the history. Redrawn as soon as the lock, the queue or the history changes (no polling;\n"
       "  the times move every second). Keys: q quits; Up and Down (or k and j) select a row;\n"
       "  w cancels the selected waiter when it is a process of yours (SIGTERM, once confirmed\n"
       "  with w); y asks the selected holder to make way when it is a process of yours that\n"
       "  offered to (run's yield signal, the library's on_yield_request); asking another user's\n"
       "  holder is not allowed by the site policy. Needs a terminal, and gives it back as it\n"
       "  found it however it ends (q, Ctrl-C, SIGTERM, SIGHUP).\n"},
      {"serve",
       "offload-lock serve [--listen ADDR:PORT] [--allow-remote] [--gpus N|auto | --gpu K]\n"
       "  A read-only web view of the lock on ADDR:PORT (default 127.0.0.1:9479; port 0 picks a\n"
       "  free one; the first line on stdout names the address). / is a page showing what top\n"
       "  shows, updated live through Server-Sent Events (/events); /status.json is the --json\n"
       "  status object, /metrics the Prometheus exposition format (status's gauges and the\n"
       "  history's counters, for a Prometheus server to scrape), /history.json the --json\n"
       "  history object. GET and HEAD only; at most 64 clients at once, 8 KiB of request\n"
       "  headers, no request body.\n"
       "  --listen ADDR:PORT  where to listen: a loopback address unless --allow-remote\n"
       "  --allow-remote      listen on any address: everyone who can reach it sees who uses the\n"
       "                      GPU, and nobody is asked who they are\n"
       "  Ends on SIGINT, SIGTERM or SIGHUP.\n"},
      {"help",
       "offload-lock help [COMMAND]\n"
       "  Without COMMAND, the overview of every command (as offload-lock --help); with one, that\n"
       "  command's help (as offload-lock COMMAND --help).\n"},
      {"wait-free",
       "offload-lock wait-free [-w|--wait DUR] [--poll DUR] [--within DUR]\n"
       "  Exit 0 as soon as the GPU is free, 1 if still held when --wait ends: the lock, and where\n"
       "  a gpulease root exists the gpulease lease every acquisition also takes. Wakes on the\n"
       "  lock's removal, the lease's release and either holder's death; --poll (default 1s) is\n"
       "  the re-check period where the file system gives no notifications, and how soon a lease\n"
       "  that goes stale by time alone is seen. --within DUR: exit 1 at once when the lock's\n"
       "  holder declared that it will keep the lock longer than DUR from now.\n"},
  };
  return h;
}

// The synopsis of a command's help, without "offload-lock ", indented by two.
std::string synopsis(const std::string& text) {
  std::string out;
  std::string::size_type from = 0;
  while (from < text.size()) {
    auto end = text.find('\n', from);
    const std::string line = text.substr(from, end - from);
    if (from > 0 && line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] != ' ') break;
    out += "  " + line.substr(std::string("offload-lock ").size()) + "\n";
    from = end + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const auto& kv : helps()) names.push_back(kv.first);
  return names;
}

std::string usage() {
  std::string u =
      "usage: offload-lock [--lock PATH] [--ttl DUR] [-j|--json] [-q|--quiet] COMMAND ...\n"
      "       offload-lock help [COMMAND]\n"
      "\n"
      "One machine-wide GPU lock shared with the Node render runners (gpu-lock.mjs) and the Go\n"
      "readers (gpulock): a directory holding meta.json {pid, startedAt}.\n"
      "\n"
      "global options:\n"
      "  --lock PATH   the lock directory (default: $GPU_LOCK, else <tmpdir>/local-offload-gpu.lock),\n"
      "                or a lock several hosts share: etcd://HOST:PORT[,HOST:PORT...]/NAME\n"
      "  --ttl DUR     a holder whose meta.json is older than this is stale (default 1h); for an\n"
      "                etcd lock, the lease's TTL (default 10s)\n"
      "  -j, --json    machine-readable output (path, status, acquire, wait-free; hold always)\n"
      "  -q, --quiet   no progress messages or warnings on stderr\n"
      "  -h, --help    this text; COMMAND --help: that command's\n"
      "  --version     the version\n"
      "Every option also takes its value as --opt=value; -w is --wait, -l is --label.\n"
      "\n"
      "commands:\n";
  for (const auto& [name, text] : helps()) u += synopsis(text);
  u += "\n"
       "DUR: 0, seconds as a number (fractions allowed), a number with ms, s, m, h or d, a\n"
       "compound of those from the largest unit down (1h30m, 2m30s, 1d12h), or forever.\n"
       "--wait defaults to forever.\n"
       "\n"
       "while acquire, run and hold wait, stderr shows who holds the lock: on a terminal one line\n"
       "kept up to date in place; otherwise a line each time the holder changes and a reminder\n"
       "every --remind DUR (default 1m; 0: none). --quiet silences both.\n"
       "\n"
       "several GPUs: --gpus N (or auto: the GPUs nvidia-smi -L lists) takes the first free of N\n"
       "slots; --gpu K takes slot K only. Slot K is the machine's GPU K in nvidia-smi's (PCI bus)\n"
       "order; slot 0 is the lock path itself and slot K the path with the suffix .gpuK. For\n"
       "acquire, run and hold, a CUDA_VISIBLE_DEVICES list (indices or GPU-... UUIDs) names the\n"
       "GPUs they may take; --gpu K outside it is a usage error.\n"
       "\n"
       "exit codes: 0 ok, 1 busy (status: free; wait-free: still held), 2 usage error,\n"
       "            3 not the owner (release), 4 system error, 5 hold's lock was removed or\n"
       "            replaced during the hold; run exits with CMD's status; 124: run or hold\n"
       "            ended by --max-hold; 128+N: signal N ended a wait.\n";
  return u;
}

std::string command_help(const std::string& command) {
  auto it = helps().find(command);
  return it == helps().end() ? usage() : it->second;
}

}  // namespace offload_lock::cli
