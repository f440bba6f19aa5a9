#!/usr/bin/env bash
# What one ordinary local user can do to another's lock and queue: each case
# is one way a hostile (or merely unusual) user could rob or jam the lock,
# played with real users (useradd), real namespaces (unshare) and real files,
# against the real command. Each case asserts the outcome the lock promises:
# never two holders, the live lock untouched, a free lock taken by its waiter.
#
# Usage: local_users_test.sh [OFFLOAD_LOCK] [CASE ...]
#   OFFLOAD_LOCK defaults to $OFFLOAD_LOCK_BIN; CASEs (names below) pick some.
# Needs root (useradd, setpriv, mounts); exits 77 (not run) without it.
# Exits 1 when any case fails, and prints one line per case.
# (KEEP_WORK=1 keeps the files of the cases for a look.)
# The cases are called by name (SC2317); the single-quoted scripts are for
# `sh -c`, which expands them (SC2016).
# shellcheck disable=SC2317,SC2016
set -uo pipefail
cli=${OFFLOAD_LOCK_BIN:-}
if [ $# -gt 0 ] && [ -f "$1" ]; then
  cli=$1
  shift
fi
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if [ -z "$cli" ] || [ ! -x "$cli" ]; then
  echo "usage: local_users_test.sh OFFLOAD_LOCK [CASE ...] (or set OFFLOAD_LOCK_BIN)" >&2
  exit 2
fi
cli=$(cd "$(dirname "$cli")" && pwd)/$(basename "$cli")
if [ "$(id -u)" -ne 0 ]; then
  echo "needs root to make two users and mount namespaces; not run"
  exit 77
fi
for tool in useradd setpriv unshare "$py"; do
  command -v "$tool" >/dev/null || { echo "needs $tool; not run"; exit 77; }
done

# Two ordinary users sharing a group, made once and kept.
group=offload-lock-share
getent group "$group" >/dev/null || groupadd --system "$group" || exit 77
for u in offload-lock-a offload-lock-b; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$u" || { echo "useradd $u failed; not run"; exit 77; }
  fi
  id -nG "$u" | tr ' ' '\n' | grep -qx "$group" || usermod -aG "$group" "$u" || exit 77
done

work=$(mktemp -d /tmp/offload-lock-users.XXXXXX)
chmod 0755 "$work"
started=()  # pids of the background processes this script started
cleanup() {
  for o in "$work"/*.out; do touch "$o/stop"; done 2>/dev/null
  for p in "${started[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

# "${A[@]}" CMD...: CMD as user a, with its groups (B: as user b). Arrays,
# not functions, so that `... &` gives the pid of the command itself.
A=(setpriv --reuid=offload-lock-a --regid=offload-lock-a --init-groups --)
B=(setpriv --reuid=offload-lock-b --regid=offload-lock-b --init-groups --)

# A directory for one case: `group` (setgid, group-writable: the README's
# shared setup), or `sticky` (like /tmp). The lock is DIR/gpu.lock.
case_dir() {
  local d=$work/$1
  mkdir "$d" "$d.out"
  chmod 1777 "$d.out"
  if [ "$2" = group ]; then
    chgrp "$group" "$d"
    chmod 2775 "$d"
  else
    chmod 1777 "$d"
  fi
  echo "$d"
}

# wait_for CONDITION...: until it holds. The bound (60 s) is only there so
# that a broken build fails instead of hanging; every event waited for takes
# well under a second on an idle machine.
wait_for() {
  local until=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$until" ]; do
    "$@" && return 0
    sleep 0.05
  done
  return 1
}

# start_holder DIR PREFIX... :: RUN_OPTIONS...: a holder of DIR/gpu.lock
# started through PREFIX (a user, a namespace); its CMD writes its pid to
# DIR.out/held, a line to DIR.out/yields at each SIGUSR1, and runs until
# DIR.out/stop exists. Sets holder_pid.
start_holder() {
  local d=$1
  shift
  local prefix=()
  while [ "$1" != :: ]; do
    prefix+=("$1")
    shift
  done
  shift
  "${prefix[@]}" "$cli" --lock "$d/gpu.lock" run "$@" -- \
    sh -c 'trap "echo yield >> \"\$0/yields\"" USR1; echo $$ > "$0/held"
      while [ -d "$0" ] && [ ! -e "$0/stop" ]; do sleep 0.1; done' "$d.out" \
    >"$d.out/holder.log" 2>&1 &
  holder_pid=$!
  started+=("$holder_pid")
  wait_for test -s "$d.out/held" || { echo "    the holder never started: $(cat "$d.out/holder.log")"; return 1; }
}

stop_holder() {
  touch "$1.out/stop"
  wait "$holder_pid" 2>/dev/null
}

# The holder's record, as root reads it, to see that nobody replaced it.
meta_of() { cat "$1/gpu.lock/meta.json" 2>/dev/null; }

# robbed DIR PREFIX...: whether a waiter started through PREFIX took the
# lock at DIR/gpu.lock (held by a live holder) within its 5 s wait: 0.2 did
# in 30 ms, or after its 2 s grace for an unreadable meta.json. A waiter
# that keeps waiting the full 5 s never makes the case fail; only a theft
# does. Says what happened.
robbed() {
  local d=$1
  shift
  local before after rc
  before=$(meta_of "$d")
  "$@" "$cli" --lock "$d/gpu.lock" run --wait 5 -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1
  rc=$?
  after=$(meta_of "$d")
  if [ -e "$d.out/taken" ]; then
    echo "    the waiter took the live lock (exit $rc)"
    return 0
  fi
  if [ "$before" != "$after" ] || [ -z "$after" ]; then
    echo "    the live lock's record changed or vanished"
    return 0
  fi
  if ! kill -0 "$(cat "$d.out/held")" 2>/dev/null; then
    echo "    the holder's CMD is gone"
    return 0
  fi
  if [ "$rc" -ne 1 ]; then
    echo "    the waiter exited $rc, not 1 (busy): $(tr '\n' ' ' <"$d.out/waiter.log")"
    return 0
  fi
  return 1
}

userns_ok() { "${B[@]}" unshare -U -r --time --boottime 1000 true 2>/dev/null; }

# ---- the cases: each returns 0 (kept its promise), 1 (broken), 77 (not run) ----

# A waiter in a time namespace (start times shifted by 1000 s) must not
# take another user's live lock.
case_timens_waiter() {
  userns_ok || { echo "    unprivileged user and time namespaces are not available"; return 77; }
  local d
  d=$(case_dir timens_waiter group)
  start_holder "$d" "${A[@]}" :: || return 1
  robbed "$d" "${B[@]}" unshare -U -r --time --boottime 1000 && return 1
  stop_holder "$d"
}

# A holder in a time namespace is as alive as any other.
case_timens_holder() {
  userns_ok || { echo "    unprivileged user and time namespaces are not available"; return 77; }
  local d
  d=$(case_dir timens_holder group)
  start_holder "$d" "${A[@]}" unshare -U -r --time --boottime 1000 :: || return 1
  robbed "$d" "${B[@]}" && return 1
  stop_holder "$d"
}

# A holder in a user namespace of its own (root inside, itself outside).
case_userns_holder() {
  userns_ok || { echo "    unprivileged user namespaces are not available"; return 77; }
  local d
  d=$(case_dir userns_holder group)
  start_holder "$d" "${A[@]}" unshare -U -r :: || return 1
  robbed "$d" "${B[@]}" && return 1
  stop_holder "$d"
}

# A waiter in a user namespace of its own.
case_userns_waiter() {
  userns_ok || { echo "    unprivileged user namespaces are not available"; return 77; }
  local d
  d=$(case_dir userns_waiter group)
  start_holder "$d" "${A[@]}" :: || return 1
  robbed "$d" "${B[@]}" unshare -U -r && return 1
  stop_holder "$d"
}

# A waiter whose monotonic clock a time namespace set back arrives later
# all the same: the one queued first is served first.
case_timens_queue() {
  userns_ok || { echo "    unprivileged user and time namespaces are not available"; return 77; }
  local d back w1 w2
  d=$(case_dir timens_queue group)
  install -m 0666 /dev/null "$d.out/order"
  back=$(($(cut -d. -f1 /proc/uptime) / 2))
  [ "$back" -ge 1 ] || { echo "    the machine has been up too short a time"; return 77; }
  start_holder "$d" "${A[@]}" :: || return 1
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 60 --label first -- sh -c 'echo first >> "$0/order"' "$d.out" \
    >"$d.out/first.log" 2>&1 &
  w1=$!
  started+=("$w1")
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | grep -q "\"first\""' "$cli" "$d" ||
    { echo "    the first waiter never showed in status"; return 1; }
  "${A[@]}" unshare -U -r --time --monotonic "-$back" --boottime "-$back" "$cli" --lock "$d/gpu.lock" run --wait 60 \
    --label second -- sh -c 'echo second >> "$0/order"' "$d.out" >"$d.out/second.log" 2>&1 &
  w2=$!
  started+=("$w2")
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | grep -q "\"second\""' "$cli" "$d" ||
    { echo "    the second waiter never showed in status: $(cat "$d.out/second.log")"; return 1; }
  stop_holder "$d"
  wait "$w1"
  wait "$w2"
  local order
  order=$(tr '\n' ' ' <"$d.out/order" 2>/dev/null)
  [ "$order" = "first second " ] || { echo "    served in the order: $order"; return 1; }
}

# A holder with umask 077 in a group directory: the others can still read
# its lock (so they see it held, and status says so), and never take it.
case_umask077_group() {
  local d
  d=$(case_dir umask077_group group)
  start_holder "$d" "${A[@]}" sh -c 'umask 077; exec "$@"' sh :: || return 1
  robbed "$d" "${B[@]}" && return 1
  "${B[@]}" "$cli" --lock "$d/gpu.lock" status >/dev/null 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || { echo "    status as the other user exits $rc, not 0 (held)"; return 1; }
  stop_holder "$d"
}

# The same in a sticky directory like /tmp: the waiter waits (busy), it
# does not fail.
case_umask077_sticky() {
  local d
  d=$(case_dir umask077_sticky sticky)
  start_holder "$d" "${A[@]}" sh -c 'umask 077; exec "$@"' sh :: || return 1
  robbed "$d" "${B[@]}" && return 1
  stop_holder "$d"
}

# A waiter with umask 077 is still seen by the other users (0.2 made its
# entry 0600: invisible to them, so it was no one's turn).
case_umask077_waiter() {
  local d r=0 waiter
  d=$(case_dir umask077_waiter group)
  start_holder "$d" "${A[@]}" :: || return 1
  "${B[@]}" sh -c 'umask 077; exec "$@"' sh "$cli" --lock "$d/gpu.lock" run --wait 60 --label private -- true \
    >"$d.out/waiter.log" 2>&1 &
  waiter=$!
  started+=("$waiter")
  # Seen by root first (so the entry is surely in place), then by user a.
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | grep -q "\"private\""' "$cli" "$d" ||
    { echo "    the waiter never showed in status"; r=1; }
  if [ "$r" -eq 0 ] && ! "${A[@]}" "$cli" --lock "$d/gpu.lock" --json status | grep -q '"private"'; then
    echo "    the other user does not see the waiter"
    r=1
  fi
  stop_holder "$d"
  wait "$waiter"
  return "$r"
}

# A waiter that sees another boot id (as some sandboxes show) must not take
# the lock of a holder that proves it is alive.
case_boot_id() {
  local d
  d=$(case_dir boot_id group)
  start_holder "$d" "${A[@]}" :: || return 1
  echo 00000000-1111-2222-3333-444444444444 >"$d.out/boot_id"
  robbed "$d" unshare -m sh -c 'mount --bind "$0" /proc/sys/kernel/random/boot_id || exit 99
    exec setpriv --reuid=offload-lock-b --regid=offload-lock-b --init-groups -- "$@"' "$d.out/boot_id" && return 1
  grep -q 'exit 99' "$d.out/waiter.log" && { echo "    could not bind-mount a boot id"; return 77; }
  stop_holder "$d"
}

# A waiter whose /proc hides other users' processes (hidepid=2).
case_hidepid() {
  local d
  d=$(case_dir hidepid group)
  start_holder "$d" "${A[@]}" :: || return 1
  robbed "$d" unshare -m --propagation private sh -c 'mount -t proc -o hidepid=2 proc /proc || exit 99
    exec setpriv --reuid=offload-lock-b --regid=offload-lock-b --init-groups -- "$@"' sh && return 1
  stop_holder "$d"
}

# free_lock_taken DIR: whether user b's waiter takes the free lock at
# DIR/gpu.lock within 10 s while the planter jams the queue. The queue owes
# it at most one 200 ms grace per free period however the planted entries
# churn; 10 s is fifty graces (the slowest seen, at a load average of 25,
# was under 2 s), so only a queue that lets itself be jammed misses it,
# never a busy machine (0.2 needed 22 s for 100 planted processes here, and
# never got there under churn).
free_lock_taken() {
  local d=$1 rc began
  began=$(date +%s%N)
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 10 -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1
  rc=$?
  echo "    the waiter ended after $((($(date +%s%N) - began) / 1000000)) ms"
  [ "$rc" -eq 0 ] && [ -e "$d.out/taken" ] && return 0
  echo "    the waiter did not take the free lock (exit $rc): $(tr '\n' ' ' <"$d.out/waiter.log" | cut -c1-300)"
  return 1
}

# plant DIR COUNT PRIORITY [CHURN_MS]: a planter of user $planter (a
# unless set), until its stdin closes (stop_planter). Sets planter_pid.
plant() {
  local d=$1
  shift
  mkfifo "$d.out/plant.in"
  (ulimit -n 16384; exec setpriv --reuid="offload-lock-${planter:-a}" --regid="offload-lock-${planter:-a}" --init-groups -- \
    "$py" "$here/plant.py" "$d/gpu.lock" "$@" <"$d.out/plant.in" >"$d.out/plant.log" 2>&1) &
  planter_pid=$!
  started+=("$planter_pid")
  exec 9>"$d.out/plant.in"
  # Thousands of entries take a while to make on a loaded machine: up to
  # five of wait_for's bounds.
  local t
  for t in 1 2 3 4 5; do
    wait_for grep -q planted "$d.out/plant.log" && return 0
    kill -0 "$planter_pid" 2>/dev/null || break
  done
  echo "    the planter failed (try $t): $(cat "$d.out/plant.log")"
  return 1
}

stop_planter() {
  exec 9>&-
  wait "$planter_pid" 2>/dev/null
}

# Two top-priority entries of another user replaced every 100 ms.
case_churn() {
  local d r
  d=$(case_dir churn group)
  plant "$d" 1 100 100 || return 1
  free_lock_taken "$d"
  r=$?
  stop_planter
  return "$r"
}

# A single try (--wait 0) under the same churn returns, and takes the free
# lock once the entries ahead have had their grace (0.2 never returned; the
# 30 s cut-off is there so that it fails instead of hanging).
case_churn_wait0() {
  local d r rc
  d=$(case_dir churn_wait0 group)
  plant "$d" 1 100 100 || return 1
  timeout 30 "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 0 -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1
  rc=$?
  r=0
  if [ "$rc" -ne 0 ] || [ ! -e "$d.out/taken" ]; then
    echo "    the single try did not take the free lock (exit $rc): $(tr '\n' ' ' <"$d.out/waiter.log" | cut -c1-300)"
    r=1
  fi
  stop_planter
  return "$r"
}

# Under the same churn, a waiter queued behind a holder takes the lock once
# the holder releases it (within its 60 s wait: a grace of 200 ms is owed,
# so only a jammed queue misses it).
case_churn_release() {
  local d r=0 rc waiter
  d=$(case_dir churn_release group)
  start_holder "$d" "${A[@]}" :: || return 1
  plant "$d" 1 100 100 || return 1
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 60 --label queued -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1 &
  waiter=$!
  started+=("$waiter")
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | grep -q "\"queued\""' "$cli" "$d" ||
    { echo "    the waiter never showed in status"; r=1; }
  stop_holder "$d"
  wait "$waiter"
  rc=$?
  if [ "$rc" -ne 0 ] || [ ! -e "$d.out/taken" ]; then
    echo "    the waiter did not take the released lock (exit $rc): $(tr '\n' ' ' <"$d.out/waiter.log" | cut -c1-300)"
    r=1
  fi
  stop_planter
  return "$r"
}

case_planted_100() {
  local d r
  d=$(case_dir planted_100 group)
  # Each entry names a sleeping process of its own (0.2 gave each planted
  # process a grace of its own).
  PLANT_CHILDREN=1 plant "$d" 100 100 || return 1
  free_lock_taken "$d"
  r=$?
  stop_planter
  return "$r"
}

case_planted_4096() {
  local d r
  d=$(case_dir planted_4096 group)
  plant "$d" 4096 100 || return 1
  free_lock_taken "$d"
  r=$?
  stop_planter
  return "$r"
}

# The registry directory made first by another user (open to all, not
# sticky, as that user may choose): it removes and renames what it can in
# it, and the waiter queued there is still seen, and still served.
case_registry_owner() {
  local d rc
  d=$(case_dir registry_owner group)
  "${A[@]}" sh -c 'mkdir -m 0777 "$0/.gpu.lock.queue" "$0/.gpu.lock.waiters"' "$d"
  start_holder "$d" "${A[@]}" :: || return 1
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 60 --label victim -- touch "$d.out/taken" \
    >"$d.out/waiter.log" 2>&1 &
  local waiter=$!
  started+=("$waiter")
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | grep -q "\"victim\""' "$cli" "$d" ||
    { echo "    the waiter never showed in status"; return 1; }
  "${A[@]}" sh -c 'for top in "$0/.gpu.lock.queue" "$0/.gpu.lock.waiters"; do
      for e in "$top"/* "$top"/*/*; do rm -f "$e"; done
      for e in "$top"/*; do [ -d "$e" ] && mv "$e" "$top/moved-$(basename "$e")"; done
    done 2>/dev/null; true' "$d"
  if ! "$cli" --lock "$d/gpu.lock" --json status | grep -q '"victim"'; then
    echo "    the registry's maker removed the waiter's entry"
    stop_holder "$d"
    wait "$waiter"
    return 1
  fi
  stop_holder "$d"
  wait "$waiter"
  rc=$?
  if [ "$rc" -ne 0 ] || [ ! -e "$d.out/taken" ]; then
    echo "    the waiter was not served (exit $rc)"
    return 1
  fi
}

# Another user's `touch <lock>.gpu1` makes no slot: status of the held lock
# still exits 0.
case_touch_gpu1() {
  local d rc
  d=$(case_dir touch_gpu1 group)
  start_holder "$d" "${A[@]}" :: || return 1
  "${B[@]}" touch "$d/gpu.lock.gpu1"
  "${B[@]}" "$cli" --lock "$d/gpu.lock" status >"$d.out/status.log" 2>&1
  rc=$?
  stop_holder "$d"
  [ "$rc" -eq 0 ] || { echo "    status exits $rc, not 0 (held): $(tr '\n' ' ' <"$d.out/status.log")"; return 1; }
}

# A priority-100 entry of another user asks no yield of a holder: the
# holder is asked by its own user's waiter (priority 50), and by nobody
# else.
case_forged_yield() {
  local d
  d=$(case_dir forged_yield group)
  start_holder "$d" "${A[@]}" :: --yield-signal USR1 || return 1
  planter=b plant "$d" 1 100 || return 1
  "${A[@]}" "$cli" --lock "$d/gpu.lock" run --wait 60 --priority 50 --label own-user -- true \
    >"$d.out/own.log" 2>&1 &
  local own=$!
  started+=("$own")
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | "$2" -c "
import json, sys
y = json.load(sys.stdin).get(\"yieldRequested\")
sys.exit(0 if y else 1)"' "$cli" "$d" "$py" || { echo "    no yield was ever requested"; stop_holder "$d"; stop_planter; return 1; }
  local asked
  asked=$("$cli" --lock "$d/gpu.lock" --json status | "$py" -c 'import json, sys; print(json.load(sys.stdin)["yieldRequested"]["label"])')
  stop_holder "$d"
  stop_planter
  wait "$own"
  [ "$asked" = own-user ] || { echo "    the yield was asked by '$asked', not by the holder's own user"; return 1; }
}

# --json status escapes C1 controls, DEL and bidi overrides in a label,
# and the JSON reads back to the same label.
case_json_escapes() {
  local d label
  d=$(case_dir json_escapes group)
  label=$'in\xc2\x85\x7f\xe2\x80\xae\xe2\x81\xa6out'
  start_holder "$d" "${A[@]}" :: --label "$label" || return 1
  "$cli" --lock "$d/gpu.lock" --json status >"$d.out/status.json"
  stop_holder "$d"
  "$py" - "$d.out/status.json" "$label" <<'EOF'
import json, re, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8", "surrogateescape")
want = sys.argv[2].encode("utf-8", "surrogateescape").decode("utf-8")
bad = re.findall("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]", raw)
if bad:
    print("    raw in the output: " + ", ".join("U+%04X" % ord(c) for c in bad))
    sys.exit(1)
if json.loads(raw).get("label") != want:
    print("    the label does not read back: %r" % json.loads(raw).get("label"))
    sys.exit(1)
EOF
}

# A waiter whose label is 1000 control characters (6000 bytes once
# escaped) is still shown.
case_control_label() {
  local d label
  d=$(case_dir control_label group)
  label=$(printf '\001%.0s' $(seq 1000))
  start_holder "$d" "${A[@]}" :: || return 1
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 60 --label "$label" -- true >"$d.out/waiter.log" 2>&1 &
  local waiter=$!
  started+=("$waiter")
  # The waiter's entry is in place once its process says it waits (its
  # progress line) or, at the latest, within the generous bound.
  local seen=1
  wait_for sh -c '"$0" --lock "$1/gpu.lock" --json status | "$2" -c "
import json, sys
sys.exit(0 if json.load(sys.stdin)[\"waiters\"] else 1)"' "$cli" "$d" "$py" && seen=0
  stop_holder "$d"
  wait "$waiter"
  [ "$seen" -eq 0 ] || { echo "    the waiter never showed in status"; return 1; }
}

# A lock whose startedAt is near INT64_MAX: a dead holder's is still
# reclaimed; a live holder's is still held, and status says so.
case_started_max() {
  local d rc
  d=$(case_dir started_max group)
  "${A[@]}" sh -c 'mkdir "$0/gpu.lock" && printf "{\"pid\":2147483000,\"startedAt\":9223372036854775000}" >"$0/gpu.lock/meta.json"' "$d"
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 10 -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] && [ -e "$d.out/taken" ] ||  # (a failure of either says the same)
    { echo "    a dead holder's lock was not reclaimed (exit $rc): $(tr '\n' ' ' <"$d.out/waiter.log" | cut -c1-300)"; return 1; }
  d=$(case_dir started_max_live group)
  "${A[@]}" sleep 300 &
  local live=$!
  started+=("$live")
  "${A[@]}" sh -c 'mkdir "$0/gpu.lock" && printf "{\"pid\":%s,\"startedAt\":9223372036854775000}" "$1" >"$0/gpu.lock/meta.json"' "$d" "$live"
  "${B[@]}" "$cli" --lock "$d/gpu.lock" run --wait 2 -- touch "$d.out/taken" >"$d.out/waiter.log" 2>&1
  rc=$?
  [ -e "$d.out/taken" ] && { echo "    a live holder's lock was taken"; return 1; }
  [ "$rc" -eq 1 ] || { echo "    the waiter exited $rc, not 1 (busy): $(tr '\n' ' ' <"$d.out/waiter.log" | cut -c1-300)"; return 1; }
  "$cli" --lock "$d/gpu.lock" status >"$d.out/status.log" 2>&1
  rc=$?
  kill "$live"
  [ "$rc" -eq 0 ] || { echo "    status exits $rc, not 0 (held): $(tr '\n' ' ' <"$d.out/status.log")"; return 1; }
}

all=(timens_waiter timens_holder timens_queue userns_holder userns_waiter umask077_group umask077_sticky umask077_waiter boot_id hidepid
  churn churn_wait0 churn_release planted_100 planted_4096 registry_owner touch_gpu1 forged_yield json_escapes control_label started_max)
[ $# -gt 0 ] && all=("$@")
failed=0
for c in "${all[@]}"; do
  if ! declare -F "case_$c" >/dev/null; then
    echo "no case '$c'" >&2
    exit 2
  fi
  began=$SECONDS
  "case_$c"
  r=$?
  case $r in
    0) echo "ok   $c ($((SECONDS - began)) s)" ;;
    77) echo "skip $c" ;;
    *) echo "FAIL $c ($((SECONDS - began)) s)"; failed=1 ;;
  esac
done
exit $failed
