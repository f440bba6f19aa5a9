// The critical-section protocol of the stress test (Node side; participant.cpp
// has the same protocol in C++), and the /proc helpers the supervisor shares.
//
// Sentinel: <dir>/in-cs holds "<tag> <pid> <starttime> <L|N>\n" of the
// participant inside (starttime: field 22 of /proc/<pid>/stat, so a reused pid
// is told apart; L: it holds the lock, N: detector self-test, it does not). Entering: the line is written to a private file and link(2)ed to
// in-cs, which fails with EEXIST exactly like open(O_CREAT|O_EXCL) and never
// shows an empty sentinel. On EEXIST:
//   - the writer inside is dead (gone, reused pid, zombie, or already exiting
//     after a SIGKILL): event D, then wait until the supervisor has cleared it;
//   - the writer is alive: event O (an OVERLAP), then take the sentinel over
//     (rename our private file onto it) so the next entrant is checked too.
// Leaving: remove in-cs only if it still holds our line (event G otherwise).
//
// Event lines (one write each, on stdout): TYPE TIME TAG ...
//   A t tag kind pid start ident   entered the critical section holding the lock
//   N t tag kind                   entered WITHOUT the lock (detector self-test)
//   O t tag kind insideTag insidePid myFlag insideFlag
//                                  overlap: someone alive was inside (flags L/N)
//   D t tag insideTag insidePid    found a dead writer's sentinel
//   G t tag what                   our sentinel was gone/replaced on the way out
//   X t tag                        left the critical section (before releasing)
//   F t tag                        released
//   T t tag                        timed out waiting (an ordinary outcome)
//   L t tag how                    release reported the lock lost / not ours
//   K t tag                        (run-loop) the CMD was killed by the supervisor
//   R t tag mode ident             (reference runner) rm -rf of the lock, mode
//                                  release or reclaim, ident of what it removed
//                                  ("absent": the path was empty when read)
//   E t tag message                unexpected error
// ident: the token of the lock the participant took (offload-lock kinds know
// it from the acquisition itself), "p<pid>s<startedAt>" for a v1 runner's lock
// (read back from meta.json when it names the runner), "-" when unknown.
import fs from 'node:fs';
import path from 'node:path';

export function nowStr() {
  return (performance.timeOrigin + performance.now()).toFixed(3);
}

export function emit(type, ...fields) {
  // Synchronous on pipes and files: a SIGKILL never loses a finished line.
  fs.writeSync(1, `${type} ${nowStr()} ${fields.join(' ')}\n`);
}

export function procStat(pid) {
  let text;
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return null;
  }
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  if (f.length < 20) return null;
  return { state: f[0], ppid: Number(f[1]), pgrp: Number(f[2]), flags: Number(f[6]), start: f[19] };
}

const PF_EXITING = 0x4;

// Dead: gone, pid reused (other start time), zombie, or exiting.
export function writerDead(pid, start) {
  const s = procStat(pid);
  if (!s) return true;
  if (start !== undefined && String(s.start) !== String(start)) return true;
  if (s.state === 'Z' || s.state === 'X' || s.state === 'x') return true;
  return (s.flags & PF_EXITING) !== 0;
}

export function parseSentinel(text) {
  const [tag = '?', pid = '0', start = '0', flag = '?'] = String(text).trim().split(/\s+/);
  return { tag, pid: Number(pid), start, flag };
}

// Which lock a meta.json belongs to: its token (offload-lock), else
// "p<pid>s<startedAt>" (a v1 runner's), else "-" (no meta or unreadable).
export function identOfMeta(text) {
  try {
    const m = JSON.parse(text);
    if (m && typeof m.token === 'string' && m.token) return m.token;
    if (m && typeof m.pid === 'number') return `p${m.pid}s${m.startedAt}`;
  } catch { /* not JSON */ }
  return '-';
}

export function lockIdent(lock) {
  try {
    return identOfMeta(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8'));
  } catch {
    return '-';
  }
}

const sab = new Int32Array(new SharedArrayBuffer(4));
export function sleepSync(ms) {
  if (ms > 0) Atomics.wait(sab, 0, 0, ms);
}

function readOr(p) {
  try {
    return fs.readFileSync(p, 'utf8');
  } catch {
    return null;
  }
}

export class Sentinel {
  constructor(dir, tag, kind) {
    this.dir = dir;
    this.tag = tag;
    this.kind = kind;
    this.file = path.join(dir, 'in-cs');
    const me = procStat(process.pid);
    this.id = `${tag} ${process.pid} ${me ? me.start : 0}`;
  }

  // locked: this entry holds the lock ("L") or, in the detector self-test,
  // deliberately does not ("N"); an overlap reports both sides' flag.
  enter(locked = true) {
    this.flag = locked ? 'L' : 'N';
    this.mine = `${this.id} ${this.flag}\n`;
    const tmp = path.join(this.dir, `in-cs.tmp.${process.pid}`);
    fs.writeFileSync(tmp, this.mine);
    // The supervisor clears a killed holder's sentinel; on a loaded machine
    // its event loop may be seconds late, so this bound is generous.
    const deadline = Date.now() + 30000;
    for (;;) {
      try {
        fs.linkSync(tmp, this.file);
        break;
      } catch (err) {
        if (err.code !== 'EEXIST') {
          emit('E', this.tag, `link-in-cs:${err.code}`);
          break;
        }
      }
      const other = readOr(this.file);
      if (other === null) continue;
      const inside = parseSentinel(other);
      if (inside.pid > 0 && writerDead(inside.pid, inside.start)) {
        emit('D', this.tag, inside.tag, inside.pid);
        while (readOr(this.file) === other) {
          if (Date.now() > deadline) {
            emit('E', this.tag, `dead-sentinel-not-cleared ${inside.tag}`);
            try { fs.unlinkSync(this.file); } catch { /* gone */ }
            break;
          }
          sleepSync(1);
        }
        continue;
      }
      emit('O', this.tag, this.kind, inside.tag, inside.pid, this.flag, inside.flag);
      try {
        fs.renameSync(tmp, this.file);
      } catch (err) {
        emit('E', this.tag, `rename-in-cs:${err.code}`);
      }
      return;
    }
    try { fs.unlinkSync(tmp); } catch { /* gone */ }
  }

  leave() {
    const now = readOr(this.file);
    if (now === null) {
      emit('G', this.tag, 'missing');
      return;
    }
    if (now !== this.mine) {
      emit('G', this.tag, 'replaced-by', parseSentinel(now).tag);
      return;
    }
    try { fs.unlinkSync(this.file); } catch { /* gone */ }
  }
}

export function uniform(lo, hi) {
  return hi <= lo ? lo : lo + Math.random() * (hi - lo);
}
