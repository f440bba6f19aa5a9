#!/usr/bin/env node
// Contention stress test with an overlap detector.
//
// N participants of mixed kinds loop acquire -> critical section -> release on
// ONE lock directory for a bounded time, while this supervisor SIGKILLs random
// participants at random moments and restarts them. Inside the critical
// section each participant creates <dir>/in-cs exclusively; finding it there
// with a LIVE writer is an overlap: two participants held "the GPU" at once.
// The protocol and the event lines are described in cs.mjs.
//
// Kinds: lib      C++ library loop            (interop_participant loop)
//        run      `offload-lock run -- CMD`   (interop_participant run-loop; CMD does the critical section)
//        compat   compat/node acquireGpuLock  (participant.mjs loop --kind compat)
//        acquire  `offload-lock acquire`/`release --token` from Node (participant.mjs loop --kind acquire)
//        ref      the v1 reference runner     (participant.mjs loop --kind ref)
// Kills: the participant's whole process group (for compat the `offload-lock
// hold` child lives in its own session and is not killed: it must release when
// its Node parent dies; for acquire the detached keeper likewise), or, for run,
// sometimes only the CMD (the recorded holder).
//
// A sentinel whose writer is dead was left by a participant killed inside its
// critical section: the supervisor removes it and counts a kill cleanup, not
// an overlap (a participant that meets it first waits for that).
//
// Modes: offload  offload-lock participants only; overlaps MUST be 0.
//        mixed    with reference runners; every overlap is attributed (which
//                 participant removed whose live lock, from the reference
//                 runners' logged rm -rf calls), and none may be caused by an
//                 offload-lock participant.
//
// lease:         the same offload-lock kinds, a Python one (participant.py,
//                 the package of compat/python), a v1 runner and gpulease
//                 participants (the stand-in of tests/interop/gpulease, `loop`
//                 mode) in one state root (OFFLOAD_LOCK_LEASE_ROOT): every
//                 offload-lock acquisition also holds the lease, so no overlap
//                 may happen that has no v1 runner in it (doc/protocol-gpulease.md,
//                 "Every acquisition holds both"). Needs $GPULEASE_STANDIN
//                 (default <repo>/build/gpulease-standin).
// shared:        the lease mode's participants on ONE directory: GPU_LOCK
//                 names the lock, and gpulease takes it as its lease
//                 directory (its counter beside it). Each offload-lock claim
//                 there is the lock and the lease at once
//                 (doc/protocol-gpulease.md, "GPU_LOCK shared by both"), so
//                 again no overlap may happen that has no v1 runner in it.
//                 A v1 runner's rm -rf of the directory fails a gpulease
//                 acquirer between its MkdirAll and its create (ENOENT):
//                 counted, not failed on, while a v1 runner takes part.
//
// usage: node stress.mjs [--mode offload|mixed|lease|shared|both] [--long] [--duration S]
//          [--participants lib:2,run:2,...] [--kill-every MIN-MAX | --no-kills]
//          [--min-acquisitions N] [--break KIND --expect-overlaps] [--seed N]
//          [--v1-write-delay-ms N] [--keep] [--json FILE] [--verbose]
// Defaults: both modes, offload 45 s then mixed 20 s (--long: 10 min each).
// The offload mode must reach 300 acquisitions (scaled for a shorter
// --duration), a floor on how much was exercised, not on speed: on a loaded
// machine it runs on, up to 3x, to get there. The rate is printed.
// Binaries: $OFFLOAD_LOCK_BIN, $INTEROP_PARTICIPANT (default <repo>/build/...).
// Exit 0 when every check passed, 1 otherwise, 2 on a usage error.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseSentinel, procStat, writerDead } from './cs.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const BIN = process.env.OFFLOAD_LOCK_BIN || path.join(REPO, 'build', 'offload-lock');
const PARTICIPANT = process.env.INTEROP_PARTICIPANT || path.join(REPO, 'build', 'tests', 'interop', 'interop_participant');
const NODE_PARTICIPANT = path.join(HERE, 'participant.mjs');
const STANDIN = process.env.GPULEASE_STANDIN || path.join(REPO, 'build', 'gpulease-standin');
const OFFLOAD_KINDS = ['lib', 'run', 'compat', 'acquire', 'py'];
// The Python participant: Debian's interpreter (its packages are for it), the
// package from this checkout, the library built beside the command.
const PYTHON = '/usr/bin/python3';
const PY_PARTICIPANT = path.join(HERE, 'participant.py');
const ALL_KINDS = [...OFFLOAD_KINDS, 'ref', 'lease'];

// ------------------------------------------------------------ options

function usage(msg) {
  process.stderr.write(`stress.mjs: ${msg}\nusage: node stress.mjs [--mode offload|mixed|lease|shared|both] [--long] [--duration S] [--participants lib:2,run:2,...] [--kill-every MIN-MAX | --no-kills] [--min-acquisitions N] [--break KIND --expect-overlaps] [--seed N] [--v1-write-delay-ms N] [--keep] [--json FILE] [--verbose]\n`);
  process.exit(2);
}

function parseOptions(argv) {
  const o = { mode: 'both', long: false, kills: true, keep: false, verbose: false, expectOverlaps: false };
  const needs = (i) => {
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--mode': o.mode = needs(i); i++; break;
      case '--long': o.long = true; break;
      case '--duration': o.duration = Number(needs(i)); i++; break;
      case '--participants': o.participants = needs(i); i++; break;
      case '--kill-every': {
        const m = /^(\d+)-(\d+)$/.exec(needs(i)); i++;
        if (!m) usage('--kill-every needs MIN-MAX milliseconds');
        o.killEvery = [Number(m[1]), Number(m[2])];
        break;
      }
      case '--no-kills': o.kills = false; break;
      case '--min-acquisitions': o.minAcquisitions = Number(needs(i)); i++; break;
      case '--break': o.break = needs(i); i++; break;
      case '--expect-overlaps': o.expectOverlaps = true; break;
      case '--seed': o.seed = Number(needs(i)); i++; break;
      case '--v1-write-delay-ms': o.v1WriteDelayMs = Number(needs(i)); i++; break;
      case '--keep': o.keep = true; break;
      case '--json': o.json = needs(i); i++; break;
      case '--verbose': o.verbose = true; break;
      default: usage(`unknown option ${a}`);
    }
  }
  if (!['offload', 'mixed', 'lease', 'shared', 'both'].includes(o.mode)) usage(`unknown mode ${o.mode}`);
  if (o.break && !ALL_KINDS.includes(o.break)) usage(`--break: unknown kind ${o.break}`);
  if (o.duration !== undefined && !(o.duration > 0)) usage('--duration needs a positive number of seconds');
  return o;
}

// A small seeded PRNG (mulberry32), so a run's kill schedule can be replayed.
function makeRandom(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    between: (lo, hi) => lo + next() * (hi - lo),
    pick: (arr) => arr[Math.floor(next() * arr.length)],
  };
}

// ------------------------------------------------------------ one mode

const MODE_DEFAULTS = {
  offload: {
    duration: 45,
    participants: 'lib:2,run:2,compat:2,acquire:1',
    // Enough contention and kills to mean something, far below any rate seen:
    // 45 s on a quiet 2-core machine gives 2,000-5,500. It used to be 2,000,
    // which a machine under a parallel build missed; how fast is for the
    // figures (and scripts/soak), not for pass/fail.
    minAcquisitions: 300,
    think: { lib: [0, 6], run: [0, 6], compat: [0, 10], acquire: [0, 10], ref: [0, 10] },
  },
  mixed: {
    duration: 20,
    participants: 'lib:1,run:1,compat:1,acquire:1,ref:3',
    minAcquisitions: 0,
    // Offload-lock participants think longer here so that the lock is often
    // free when a reference runner makes its once-a-second attempt.
    think: { lib: [5, 40], run: [5, 40], compat: [5, 40], acquire: [5, 40], ref: [0, 20] },
  },
  lease: {
    duration: 30,
    participants: 'lib:1,run:1,compat:1,acquire:1,py:1,lease:2,ref:1',
    minAcquisitions: 0,
    // gpulease waiters look once a second: offload-lock participants think
    // long enough for the lease to be free at some of those looks.
    think: { lib: [5, 40], run: [5, 40], compat: [5, 40], acquire: [5, 40], py: [5, 40], lease: [0, 20], ref: [0, 20] },
  },
  shared: {
    duration: 30,
    participants: 'lib:1,run:1,compat:1,acquire:1,py:1,lease:2,ref:1',
    minAcquisitions: 0,
    think: { lib: [5, 40], run: [5, 40], compat: [5, 40], acquire: [5, 40], py: [5, 40], lease: [0, 20], ref: [0, 20] },
  },
};
// The modes with gpulease participants.
const LEASE_MODES = ['lease', 'shared'];
const CS_MS = [1, 4];
const WAIT_MS = 3000;

function kindOf(tag) {
  return /^[a-z]+/.exec(tag)[0];
}

class Participant {
  constructor(sup, kind, index) {
    this.sup = sup;
    this.kind = kind;
    this.name = `${kind}${index}`;
    this.incarnation = 0;
    this.child = null;
    this.alive = false;
    this.errLog = path.join(sup.dir, 'logs', `${this.name}.stderr`);
  }

  get tag() {
    return `${this.name}#${this.incarnation}`;
  }

  argv() {
    const s = this.sup;
    const think = s.cfg.think[this.kind];
    const common = ['--lock', s.lock, '--dir', s.dir, '--tag', this.tag, '--wait-ms', String(WAIT_MS),
      '--cs-min', String(CS_MS[0]), '--cs-max', String(CS_MS[1]),
      '--think-min', String(think[0]), '--think-max', String(think[1])];
    if (s.opts.break === this.kind) common.push('--skip-lock-every', '4');
    if (this.kind === 'lease') {
      // gpulease's own waiter: polls every second for up to the same wait.
      const place = s.mode === 'shared' ? ['-dir', s.lock] : ['-state-dir', s.leaseRoot];
      const args = ['loop', ...place, '-cs-dir', s.dir, '-tag', this.tag, '-kind', 'lease',
        '-wait', `${WAIT_MS}ms`, '-poll', '1s', '-cs-min', String(CS_MS[0]), '-cs-max', String(CS_MS[1]),
        '-think-min', String(think[0]), '-think-max', String(think[1])];
      if (s.opts.break === this.kind) args.push('-skip-lock-every', '4');
      return [STANDIN, args];
    }
    if (this.kind === 'lib') return [PARTICIPANT, ['loop', ...common]];
    if (this.kind === 'py') return [PYTHON, [PY_PARTICIPANT, 'loop', ...common]];
    if (this.kind === 'run') return [PARTICIPANT, ['run-loop', '--bin', BIN, ...common]];
    return [process.execPath, [NODE_PARTICIPANT, 'loop', '--kind', this.kind, ...common]];
  }

  start() {
    this.incarnation++;
    const [exe, args] = this.argv();
    const err = fs.openSync(this.errLog, 'a');
    fs.writeSync(err, `--- ${this.tag} started\n`);
    const child = spawn(exe, args, { env: this.sup.env, stdio: ['ignore', 'pipe', err], detached: true });
    fs.closeSync(err);
    this.child = child;
    this.alive = true;
    const tag = this.tag;
    let partial = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      partial += chunk;
      let nl;
      while ((nl = partial.indexOf('\n')) >= 0) {
        this.sup.onEvent(this, partial.slice(0, nl));
        partial = partial.slice(nl + 1);
      }
    });
    child.on('error', (e) => this.sup.error(`${tag}: spawn failed: ${e.message}`));
    child.on('close', (code, signal) => {
      this.alive = false;
      this.child = null;
      this.sup.onExit(this, tag, code, signal);
    });
  }

  // SIGKILL the whole process group, or (run only) just the CMD inside: the
  // process `offload-lock run` forked, held back until the lock is taken and
  // then running the critical section; it is the recorded holder.
  kill(random) {
    if (!this.alive || !this.child) return false;
    const now = performance.timeOrigin + performance.now();
    if (this.kind === 'run' && random.next() < 0.5) {
      for (const c of groupMembers(this.child.pid)) {
        if (c.ppid === this.child.pid || c.pid === this.child.pid || c.state === 'Z') continue;
        try {
          process.kill(c.pid, 'SIGKILL');
        } catch {
          continue;
        }
        this.sup.killedPids.add(`${c.pid}:${c.start}`);
        this.sup.recordKill(this, 'cmd', now);
        return true;
      }
    }
    try {
      process.kill(-this.child.pid, 'SIGKILL');
    } catch {
      return false;
    }
    this.sup.killedTags.add(this.tag);
    this.sup.recordKill(this, 'group', now);
    return true;
  }
}

class Supervisor {
  constructor(mode, opts, seed) {
    this.mode = mode;
    this.opts = opts;
    this.cfg = MODE_DEFAULTS[mode];
    this.seed = seed;
    this.random = makeRandom(seed);
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `offload-stress-${mode}-`));
    fs.mkdirSync(path.join(this.dir, 'logs'));
    this.lock = path.join(this.dir, 'gpu.lock');
    this.sentinel = path.join(this.dir, 'in-cs');
    this.env = { ...process.env, OFFLOAD_LOCK_BIN: BIN };
    for (const k of ['GPU_LOCK', 'OFFLOAD_LOCK_PATH', 'OFFLOAD_LOCK_TOKEN', 'GPU_LOCK_WAIT_MS']) delete this.env[k];
    if (opts.v1WriteDelayMs) this.env.GPU_LOCK_V1_WRITE_DELAY_MS = String(opts.v1WriteDelayMs);
    else delete this.env.GPU_LOCK_V1_WRITE_DELAY_MS;
    // The gpulease root: only the lease mode has one (elsewhere none
    // exists, so no acquisition takes a lease).
    for (const k of ['OFFLOAD_LOCK_LEASE_ROOT', 'LOCAL_OFFLOAD_STATE_DIR', 'GPU_LEASE_DIR', 'GPU_LEASE_EPOCH', 'GPU_LEASE_CLASS']) delete this.env[k];
    this.leaseRoot = path.join(this.dir, 'lease-root');
    this.env.PYTHONPATH = [path.join(REPO, 'compat', 'python'), process.env.PYTHONPATH].filter(Boolean).join(':');
    this.env.OFFLOAD_LOCK_LIBRARY = path.join(path.dirname(BIN), 'liboffload_lock.so');
    if (mode === 'lease') {
      fs.mkdirSync(path.join(this.leaseRoot, 'gpu', 'lease'), { recursive: true });
      this.env.OFFLOAD_LOCK_LEASE_ROOT = this.leaseRoot;
    } else if (mode === 'shared') {
      // GPU_LOCK for every side, and gpulease's counter beside the lock, as
      // on a site where gpulease has acquired before.
      this.env.GPU_LOCK = this.lock;
      this.env.OFFLOAD_LOCK_LEASE_ROOT = path.join(this.dir, 'no-lease-root');
      fs.writeFileSync(path.join(this.dir, 'epoch'), '0');
    } else {
      this.env.OFFLOAD_LOCK_LEASE_ROOT = path.join(this.dir, 'no-lease-root');
    }

    this.participants = [];
    const spec = opts.participants || this.cfg.participants;
    for (const part of spec.split(',')) {
      const [kind, n] = part.split(':');
      if (!ALL_KINDS.includes(kind)) usage(`--participants: unknown kind ${kind}`);
      for (let i = 1; i <= Number(n || 1); i++) this.participants.push(new Participant(this, kind, i));
    }

    this.stopping = false;
    this.killedTags = new Set(); // incarnations killed as a group
    this.killedPids = new Set(); // "pid:start" of CMDs killed alone
    this.events = { A: [], O: [], R: [], L: [], E: [], D: [], G: [], N: [], T: [], K: [], F: [], X: [] };
    this.rawLines = [];
    this.kills = [];
    this.killCleanups = 0;
    this.unexplainedDead = [];
    this.errors = [];
    this.exitWaiters = [];
  }

  // The acquisitions a run must reach (scaled down for a shorter --duration).
  acquisitionFloor() {
    if (this.opts.expectOverlaps) return 0;
    const min = this.opts.minAcquisitions ?? this.cfg.minAcquisitions;
    const scale = this.opts.duration ? Math.min(1, this.opts.duration / this.cfg.duration) : 1;
    return Math.floor(min * scale);
  }

  log(msg) {
    if (this.opts.verbose) process.stderr.write(`[${this.mode}] ${msg}\n`);
  }

  error(msg) {
    this.errors.push(msg);
    process.stderr.write(`[${this.mode}] ERROR ${msg}\n`);
  }

  onEvent(p, line) {
    const f = line.split(' ');
    const type = f[0];
    const t = Number(f[1]);
    const tag = f[2];
    const list = this.events[type];
    if (!list || !Number.isFinite(t)) {
      this.error(`${p.tag}: unexpected output: ${line}`);
      return;
    }
    const ev = { t, tag, f: f.slice(3), line };
    list.push(ev);
    this.rawLines.push(line);
    switch (type) {
      case 'O':
        process.stderr.write(`[${this.mode}] OVERLAP: ${tag} (${f[3]}) entered while ${f[4]} (pid ${f[5]}) was inside\n`);
        break;
      case 'D':
        this.sweep();
        break;
      case 'E':
        this.log(`error event: ${line}`);
        break;
      default:
        break;
    }
  }

  onExit(p, tag, code, signal) {
    const killed = this.killedTags.has(tag);
    if (!killed && !(this.stopping && code === 0)) this.error(`${tag} exited unexpectedly (code ${code}, signal ${signal}); see ${p.errLog}`);
    for (const w of this.exitWaiters) w();
    this.sweep();
    if (!this.stopping && killed) {
      setTimeout(() => {
        if (!this.stopping) p.start();
      }, this.random.between(20, 200));
    }
  }

  recordKill(p, what, t) {
    this.kills.push({ t, tag: p.tag, kind: p.kind, what });
    this.rawLines.push(`KILL ${t.toFixed(3)} ${p.tag} ${what}`);
    this.log(`killed ${p.tag} (${what})`);
    for (const d of [0, 2, 10, 50, 200, 1000]) setTimeout(() => this.sweep(), d);
  }

  // Clear a sentinel whose writer is dead: a kill cleanup when we killed it.
  sweep() {
    let text;
    try {
      text = fs.readFileSync(this.sentinel, 'utf8');
    } catch {
      return;
    }
    const s = parseSentinel(text);
    if (!(s.pid > 0) || !writerDead(s.pid, s.start)) return;
    // Read it again now that its writer is known dead: if it is still there,
    // it was left behind (a writer that ends normally removes its sentinel
    // first), and nobody else touches it: participants that meet it wait for
    // this removal. Without the re-read, a writer that left and exited
    // between the first read and the check would make us remove its
    // successor's sentinel.
    let again;
    try {
      again = fs.readFileSync(this.sentinel, 'utf8');
    } catch {
      return;
    }
    if (again !== text) return;
    try {
      fs.unlinkSync(this.sentinel);
    } catch {
      return;
    }
    if (this.killedTags.has(s.tag) || this.killedPids.has(`${s.pid}:${s.start}`)) {
      this.killCleanups++;
    } else {
      this.unexplainedDead.push(s);
      this.error(`sentinel of ${s.tag} (pid ${s.pid}) left behind by a writer that was not killed by the supervisor`);
    }
  }

  async run() {
    const started = performance.now();
    const duration = (this.opts.duration ?? (this.opts.long ? 600 : this.cfg.duration)) * 1000;
    process.stderr.write(`[${this.mode}] ${this.participants.length} participants (${this.participants.map((p) => p.name).join(' ')}), ${duration / 1000} s, seed ${this.seed}, dir ${this.dir}\n`);
    for (const p of this.participants) p.start();

    const killEvery = this.opts.killEvery || [150, 600];
    let killTimer = null;
    const scheduleKill = () => {
      killTimer = setTimeout(() => {
        if (this.stopping) return;
        // A kind first, then one of its live participants: every kind gets
        // its share of kills whatever the number of its participants.
        const live = this.participants.filter((p) => p.alive);
        const kinds = [...new Set(live.map((p) => p.kind))];
        if (kinds.length) {
          const kind = this.random.pick(kinds);
          this.random.pick(live.filter((p) => p.kind === kind)).kill(this.random);
        }
        scheduleKill();
      }, this.random.between(killEvery[0], killEvery[1]));
    };
    if (this.opts.kills) scheduleKill();

    let progress = null;
    if (duration >= 120000) {
      progress = setInterval(() => {
        process.stderr.write(`[${this.mode}] ${((performance.now() - started) / 1000).toFixed(0)} s: ${this.events.A.length} acquisitions, ${this.kills.length} kills, ${this.events.O.length} overlaps\n`);
      }, 30000);
    }

    await new Promise((r) => setTimeout(r, duration));
    // Short of the acquisition floor (a loaded machine): run on, up to 3x.
    const floor = this.acquisitionFloor();
    while (this.events.A.length < floor && performance.now() - started < duration * 3) {
      await new Promise((r) => setTimeout(r, 500));
    }
    this.stopping = true;
    clearTimeout(killTimer);
    if (progress) clearInterval(progress);
    fs.writeFileSync(path.join(this.dir, 'stop'), '');
    const runMs = performance.now() - started;

    // Every participant ends its current cycle (bounded by the 3 s wait) and exits.
    const deadline = Date.now() + 30000;
    while (this.participants.some((p) => p.alive) && Date.now() < deadline) {
      await new Promise((r) => {
        this.exitWaiters.push(r);
        setTimeout(r, 500);
      });
    }
    for (const p of this.participants.filter((q) => q.alive)) {
      this.error(`${p.tag} did not stop within 30 s; killing it`);
      try { process.kill(-p.child.pid, 'SIGKILL'); } catch { /* gone */ }
    }
    this.sweep();
    await this.checkLeftovers();
    this.wallMs = performance.now() - started;
    this.runMs = runMs;
  }

  // Processes still running with our lock path in their command line a few
  // seconds after everyone stopped (a `hold` child or a keeper that did not
  // notice its holder's end), and a lock still held.
  async checkLeftovers() {
    const find = () => {
      const found = [];
      for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
        let cmd;
        try {
          cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8');
        } catch {
          continue;
        }
        if (cmd.includes(this.dir)) {
          const st = procStat(Number(e));
          if (st && st.state !== 'Z') found.push({ pid: Number(e), cmd: cmd.split('\0').join(' ').trim() });
        }
      }
      return found;
    };
    const until = Date.now() + 30000;  // generous: a loaded machine reaps slowly
    let left = find();
    while (left.length && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 100));
      left = find();
    }
    for (const l of left) {
      this.error(`leftover process ${l.pid} still running 30 s after the end: ${l.cmd}`);
      try { process.kill(l.pid, 'SIGKILL'); } catch { /* gone */ }
    }
    try {
      // In the participants' environment. A directory without a claim is
      // held until it is the grace (2 s) old by its birth, shared with
      // gpulease or not: it may be a v1 runner's between its mkdir and its
      // write (B3), and a container gpulease made anew after a v1 runner's
      // rm -rf looks the same. So held is an error only once that has
      // passed with nobody left to refresh anything.
      const until = Date.now() + 4000;
      let r = await runQuiet(BIN, ['--lock', this.lock, 'status'], this.env);
      while (r === 0 && Date.now() < until) {
        await new Promise((res) => setTimeout(res, 250));
        r = await runQuiet(BIN, ['--lock', this.lock, 'status'], this.env);
      }
      if (r === 0) this.error(`the lock ${this.lock} is still held 4 s after every participant stopped`);
    } catch (e) {
      this.error(`status: ${e.message}`);
    }
  }

  // ---------------------------------------------------------- analysis

  analyse() {
    const ev = this.events;
    const byKind = (list) => {
      const m = Object.fromEntries(ALL_KINDS.map((k) => [k, 0]));
      for (const e of list) m[kindOf(e.tag)]++;
      return m;
    };
    const acq = byKind(ev.A);
    const killsByKind = Object.fromEntries(ALL_KINDS.map((k) => [k, 0]));
    const cmdKills = this.kills.filter((k) => k.what === 'cmd').length;
    for (const k of this.kills) killsByKind[k.kind]++;

    // Each acquisition's tenure: from its A event to its X event (left the
    // critical section) or the kill that ended it.
    const byTag = (list) => {
      const m = new Map();
      for (const e of list) {
        if (!m.has(e.tag)) m.set(e.tag, []);
        m.get(e.tag).push(e);
      }
      return m;
    };
    const xByTag = byTag(ev.X);
    const killsByTag = byTag(this.kills);
    const aByTag = byTag(ev.A);
    for (const [tag, list] of aByTag) {
      // One process's events arrive in time order: walk them side by side.
      const xs = xByTag.get(tag) || [];
      const ks = killsByTag.get(tag) || [];
      let i = 0;
      let j = 0;
      for (const a of list) {
        while (i < xs.length && xs[i].t < a.t) i++;
        while (j < ks.length && ks[j].t < a.t) j++;
        const x = xs[i];
        const k = ks[j];
        a.end = Math.min(x ? x.t : Infinity, k ? k.t : Infinity);
        a.killed = !!k && (!x || k.t < x.t);
      }
    }
    const acqByIdent = new Map();
    for (const a of ev.A) if (a.f[3] && a.f[3] !== '-') acqByIdent.set(a.f[3], a);
    const isRefIdent = (ident) => /^p\d+s/.test(ident);

    // Every rm -rf a reference runner did: whose lock it removed (by the
    // token or pid/startedAt in its meta.json), and whether that holder still
    // held it (between its acquisition and leaving its critical section).
    const removals = [];
    for (const r of ev.R) {
      const [mode, ident] = r.f;
      const owner = ident && ident !== '-' ? acqByIdent.get(ident) || null : null;
      const defect = mode === 'release' ? 'D3 release' : ident === '-' ? 'D1 reclaim' : 'D2 reclaim';
      let cls;
      let live = false;
      if (ident === 'absent') {
        cls = `${mode} that found the path empty (another reclaimer had just moved the lock aside)`;
      } else if (!owner) {
        cls = ident === '-'
          ? `${mode} of a lock without meta.json (a v1 runner killed or caught in its mkdir->write window)`
          : `${mode} of a ${isRefIdent(ident) ? 'v1' : 'offload-lock'} lock whose holder never entered (killed before, or removed under it)`;
      } else if (owner.tag === r.tag) {
        cls = `own ${mode}`;
      } else if (r.t < owner.end) {
        live = true;
        cls = `${defect} of ${kindOf(owner.tag)}'s LIVE lock`;
      } else {
        cls = `${mode} of ${kindOf(owner.tag)}'s lock after its holder ${owner.killed ? 'was killed' : 'left the critical section (its release still under way)'}`;
      }
      removals.push({ r, mode, ident, owner, cls, live, defect });
    }
    const removalsByClass = {};
    for (const x of removals) removalsByClass[x.cls] = (removalsByClass[x.cls] || 0) + 1;

    // Attribute each overlap: whose lock was removed under it, and by whom?
    // Either the one inside lost its lock before the entrant took a new one,
    // or the entrant's own lock was removed (and someone else took the path)
    // before it entered.
    const overlaps = [];
    for (const o of ev.O) {
      const [enteredKind, insideTag] = o.f;
      // Self-test entries without the lock are flagged N in the sentinel.
      const enteredSkipped = o.f[3] === 'N';
      const victimSkipped = o.f[4] === 'N';
      const entry = ev.A.find((e) => e.tag === o.tag && e.t >= o.t) || null;
      // The acquisition of the one inside: the one whose tenure covers the
      // overlap (with slack: the O line is stamped after the check), or the
      // next one (it had just taken the sentinel over itself).
      let inside = null;
      for (const a of aByTag.get(insideTag) || []) {
        if (a.t <= o.t + 1 && a.end >= o.t - 50) inside = a;
        if (!inside && a.t > o.t) { inside = a; break; }
      }
      let cause;
      let by = null;
      let detail = '';
      if (enteredSkipped || victimSkipped) {
        cause = `detector self-test: ${enteredSkipped ? o.tag : insideTag} entered without the lock`;
      } else {
        const mine = [inside, entry].filter(Boolean);
        const direct = removals.filter((x) => x.owner && mine.includes(x.owner) && x.r.t <= o.t + 1 && x.r.tag !== x.owner.tag);
        if (direct.length) {
          const x = direct[direct.length - 1];
          by = x.r.tag;
          cause = `${kindOf(x.r.tag)} ${x.defect} removed ${kindOf(x.owner.tag)}'s live lock`;
          detail = `${x.r.tag} ${x.mode} at ${x.r.t.toFixed(1)} of ${x.owner.tag}'s lock ${x.ident}`;
        } else {
          // No logged removal names either lock: a reference rm -rf shortly
          // before whose target changed under it. D2: it judged one lock
          // stale and, by the time its rm -rf ran, a fresh lock had replaced
          // it (the rm -rf then removed that one; its meta was read before
          // the switch). D1: the victim wrote its meta.json into the
          // remover's new directory, so no meta names it.
          const since = Math.min(inside ? inside.t : o.t, entry ? entry.t : o.t) - 2000;
          const near = removals.filter((x) => x.r.t >= since && x.r.t <= o.t + 1 && !(x.owner && x.owner.tag === x.r.tag));
          if (near.length) {
            const x = near[near.length - 1];
            by = x.r.tag;
            cause = `${kindOf(x.r.tag)} ${x.defect} just before (probable: its target was replaced between its check and its rm -rf)`;
            detail = `${x.r.tag} ${x.mode} at ${x.r.t.toFixed(1)} of ${x.ident}; inside held ${inside ? inside.f[3] : '?'}, entrant ${entry ? entry.f[3] : '?'}`;
          } else {
            cause = 'UNATTRIBUTED (no reference-runner removal explains it)';
            detail = `inside held ${inside ? inside.f[3] : '?'}, entrant ${entry ? entry.f[3] : '?'}`;
          }
        }
      }
      overlaps.push({ t: o.t, entered: o.tag, enteredKind, inside: insideTag, cause, by, detail });
    }
    const overlapsByCause = {};
    for (const x of overlaps) overlapsByCause[x.cause] = (overlapsByCause[x.cause] || 0) + 1;
    // Who overlapped whom: "<entrant's kind> into <kind inside>".
    const overlapsByPair = {};
    for (const x of overlaps) {
      const pair = `${kindOf(x.entered)} into ${kindOf(x.inside)}`;
      overlapsByPair[pair] = (overlapsByPair[pair] || 0) + 1;
    }

    // Lost locks and run's warnings, from the logs.
    const runWarnings = {};
    for (const p of this.participants) {
      let text = '';
      try { text = fs.readFileSync(p.errLog, 'utf8'); } catch { /* none */ }
      const n = (text.match(/WARNING|had been removed or replaced/g) || []).length;
      if (n) runWarnings[p.name] = n;
    }
    const errorsByKind = byKind(ev.E);

    // run's exits after a CMD kill: 137 (CMD killed while running) or 1
    // ("gave up waiting": killed while run still waited). Each must follow a
    // kill of that participant's CMD.
    const cmdKilledWhileWaiting = ev.K.filter((k) => k.f[0].startsWith('cmd-killed-while-waiting')).length;
    for (const k of ev.K) {
      if (!this.kills.some((x) => x.what === 'cmd' && x.tag === k.tag && x.t <= k.t + 1 && x.t >= k.t - 5000)) {
        this.errors.push(`${k.tag}: offload-lock run ended as after a CMD kill, but no CMD was killed: ${k.line}`);
      }
    }

    return {
      mode: this.mode,
      seed: this.seed,
      participants: this.participants.map((p) => p.name),
      durationS: +(this.runMs / 1000).toFixed(1),
      wallS: +(this.wallMs / 1000).toFixed(1),
      acquisitions: { total: ev.A.length, ...acq },
      acquisitionFloor: this.acquisitionFloor(),
      timeouts: ev.T.length,
      skippedLock: ev.N.length,
      kills: { total: this.kills.length, cmdOnly: cmdKills, ...killsByKind },
      killCleanups: this.killCleanups,
      runExit1AfterCmdKill: cmdKilledWhileWaiting,
      deadSentinelsMet: ev.D.length,
      overlaps: overlaps.length,
      overlapsByCause,
      overlapsByPair,
      overlapList: overlaps,
      refRemovals: removalsByClass,
      lost: { total: ev.L.length, ...byKind(ev.L) },
      runLostWarnings: runWarnings,
      sentinelReplaced: ev.G.length,
      errorEvents: { total: ev.E.length, ...errorsByKind },
      // Offload-lock participants' errors first: they are the ones that fail a run.
      errorSamples: [...ev.E.filter((e) => kindOf(e.tag) !== 'lease'), ...ev.E.filter((e) => kindOf(e.tag) === 'lease')]
        .slice(0, 10).map((e) => e.line),
      errorLines: ev.E.map((e) => e.line),
      supervisorErrors: this.errors,
    };
  }
}

// The live processes of a process group, from /proc.
function groupMembers(pgid) {
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const st = procStat(Number(e));
    if (st && st.pgrp === pgid) out.push({ pid: Number(e), ...st });
  }
  return out;
}

function runQuiet(exe, args, env = process.env) {
  return new Promise((resolve, reject) => {
    const c = spawn(exe, args, { stdio: 'ignore', env });
    c.on('error', reject);
    c.on('close', (code) => resolve(code));
  });
}

// ------------------------------------------------------------ checks

function check(fig, opts) {
  const failures = [];
  const offloadOnly = fig.mode === 'offload';
  if (fig.supervisorErrors.length) failures.push(`${fig.supervisorErrors.length} supervisor error(s): ${fig.supervisorErrors.slice(0, 3).join(' | ')}`);
  if (opts.expectOverlaps) {
    if (fig.overlaps === 0) failures.push(`detector self-test: ${fig.skippedLock} critical sections without the lock, yet no overlap was detected`);
    const other = fig.overlapList.filter((o) => !o.cause.startsWith('detector self-test'));
    if (other.length) failures.push(`detector self-test: ${other.length} overlap(s) not explained by the skipped locks`);
    return failures;
  }
  if (LEASE_MODES.includes(fig.mode)) {
    // Both protocols, one holder: no overlap, but those of a v1 runner (it
    // sees no lease, and its rm -rf removes live locks: v1 defects).
    const v1 = (o) => kindOf(o.entered) === 'ref' || kindOf(o.inside) === 'ref' || (o.by && kindOf(o.by) === 'ref');
    const bad = fig.overlapList.filter((o) => !v1(o));
    if (bad.length) failures.push(`${bad.length} overlap(s) without a v1 runner in them (must be 0): ${JSON.stringify(fig.overlapsByPair)}`);
    const offloadLost = OFFLOAD_KINDS.reduce((n, k) => n + fig.lost[k], 0);
    const withRef = fig.participants.some((p) => kindOf(p) === 'ref');
    if (offloadLost && !withRef) failures.push(`${offloadLost} lost lock(s) among offload-lock participants (must be 0)`);
    const offloadErrors = OFFLOAD_KINDS.reduce((n, k) => n + fig.errorEvents[k], 0);
    // A gpulease participant killed inside the counter's lock leaves it for
    // gpulease's 30 s; the others' tries fail meanwhile, as gpulease's do.
    // In one shared directory, a v1 runner's rm -rf removes it under a
    // gpulease acquirer between its MkdirAll and its create (ENOENT); nothing
    // offload-lock does removes it.
    const v1RemovedDir = (l) => fig.mode === 'shared' && withRef && l.includes('no such file or directory');
    const leaseErrors = fig.errorLines.filter((l) => kindOf(l.split(' ')[2]) === 'lease' && !l.includes('epoch.lock') && !v1RemovedDir(l));
    if (offloadErrors || leaseErrors.length)
      failures.push(`${offloadErrors + leaseErrors.length} participant error(s): ${fig.errorSamples.join(' | ')}`);
  } else if (offloadOnly) {
    if (fig.overlaps) failures.push(`${fig.overlaps} overlap(s) among offload-lock participants (must be 0)`);
    if (fig.lost.total) failures.push(`${fig.lost.total} lost lock(s) among offload-lock participants (must be 0)`);
    if (Object.keys(fig.runLostWarnings).length) failures.push(`offload-lock warned of a lost lock: ${JSON.stringify(fig.runLostWarnings)}`);
    if (fig.errorEvents.total) failures.push(`${fig.errorEvents.total} participant error(s): ${fig.errorSamples.join(' | ')}`);
  } else {
    const bad = fig.overlapList.filter((o) => !o.by || OFFLOAD_KINDS.includes(kindOf(o.by)));
    if (bad.length) failures.push(`${bad.length} overlap(s) not caused by a reference runner: ${JSON.stringify(bad.slice(0, 5))}`);
    const offloadErrors = OFFLOAD_KINDS.reduce((n, k) => n + fig.errorEvents[k], 0);
    if (offloadErrors) failures.push(`${offloadErrors} error(s) in offload-lock participants: ${fig.errorSamples.join(' | ')}`);
  }
  if (fig.acquisitions.total < fig.acquisitionFloor) failures.push(`only ${fig.acquisitions.total} acquisitions (want at least ${fig.acquisitionFloor})`);
  // A gpulease participant killed inside the counter's lock stops every
  // lease acquisition, offload-lock's among them, for gpulease's 30 s (the
  // lease participants' tries fail meanwhile, naming epoch.lock): in a
  // 20 s run a kind can then get no turn at all. Overlaps are still checked.
  const epochStalled = LEASE_MODES.includes(fig.mode) &&
    fig.errorLines.some((l) => kindOf(l.split(' ')[2]) === 'lease' && l.includes('epoch.lock'));
  for (const k of new Set(fig.participants.map(kindOf))) {
    // A v1 runner among lease holders is a bystander: it polls once a second
    // and may find the lock free at none of its looks on a loaded machine.
    const bystander = LEASE_MODES.includes(fig.mode) && k === 'ref';
    if (fig.acquisitions[k] === 0 && !bystander && !epochStalled) failures.push(`no acquisition at all by the ${k} participants`);
    if (opts.kills && fig.durationS >= 10 && fig.kills[k] === 0) failures.push(`no ${k} participant was killed`);
  }
  return failures;
}

function printFigures(fig) {
  const kinds = ALL_KINDS.filter((k) => fig.participants.some((p) => kindOf(p) === k));
  const perKind = (o) => kinds.map((k) => `${k} ${o[k]}`).join(', ');
  const lines = [
    `== stress, mode ${fig.mode}: ${fig.participants.join(' ')} (seed ${fig.seed})`,
    `  run ${fig.durationS} s, wall time ${fig.wallS} s`,
    `  acquisitions: ${fig.acquisitions.total} (${perKind(fig.acquisitions)}); timed-out attempts ${fig.timeouts}${fig.skippedLock ? `; WITHOUT the lock (self-test) ${fig.skippedLock}` : ''}`,
    `  kills (SIGKILL): ${fig.kills.total} (${perKind(fig.kills)}; run CMD alone ${fig.kills.cmdOnly}); kill cleanups ${fig.killCleanups}; dead sentinels met ${fig.deadSentinelsMet}`,
    `  overlaps: ${fig.overlaps}`,
  ];
  if (fig.runExit1AfterCmdKill) lines.splice(4, 0, `  offload-lock run exited 1 ("gave up waiting") after its CMD was killed while it waited: ${fig.runExit1AfterCmdKill}`);
  for (const [pair, n] of Object.entries(fig.overlapsByPair)) lines.push(`    ${n} x ${pair}`);
  for (const [cause, n] of Object.entries(fig.overlapsByCause)) lines.push(`    ${n} x ${cause}`);
  for (const o of fig.overlapList.filter((x) => !x.cause.startsWith('detector')).slice(0, 20)) {
    lines.push(`      ${o.entered} entered while ${o.inside} was inside: ${o.cause}${o.detail ? ` [${o.detail}]` : ''}`);
  }
  if (Object.keys(fig.refRemovals).length) {
    lines.push('  reference-runner rm -rf of the lock:');
    for (const [cls, n] of Object.entries(fig.refRemovals)) lines.push(`    ${n} x ${cls}`);
  }
  lines.push(`  lost locks reported: ${fig.lost.total} (${perKind(fig.lost)}); run warnings ${JSON.stringify(fig.runLostWarnings)}; sentinels found replaced on exit ${fig.sentinelReplaced}`);
  lines.push(`  participant errors: ${fig.errorEvents.total} (${perKind(fig.errorEvents)})`);
  for (const s of fig.errorSamples) lines.push(`    ${s}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

// ------------------------------------------------------------ main

const opts = parseOptions(process.argv.slice(2));
for (const exe of LEASE_MODES.includes(opts.mode) ? [BIN, PARTICIPANT, STANDIN] : [BIN, PARTICIPANT]) {
  try {
    fs.accessSync(exe, fs.constants.X_OK);
  } catch {
    process.stderr.write(`stress.mjs: ${exe} is missing; build first (scripts/build) or set OFFLOAD_LOCK_BIN / INTEROP_PARTICIPANT\n`);
    process.exit(2);
  }
}
const modes = opts.mode === 'both' ? ['offload', 'mixed'] : [opts.mode];
const baseSeed = opts.seed ?? (Date.now() % 1000000);
const results = [];
let failed = false;
const supervisors = [];
process.on('SIGINT', () => {
  for (const s of supervisors) for (const p of s.participants) if (p.alive) try { process.kill(-p.child.pid, 'SIGKILL'); } catch { /* gone */ }
  process.exit(130);
});
for (const [i, mode] of modes.entries()) {
  const sup = new Supervisor(mode, opts, baseSeed + i);
  supervisors.push(sup);
  await sup.run();
  const fig = sup.analyse();
  printFigures(fig);
  const failures = check(fig, opts);
  for (const f of failures) process.stdout.write(`  FAIL: ${f}\n`);
  if (!failures.length) process.stdout.write('  OK\n');
  failed = failed || failures.length > 0;
  fig.failures = failures;
  results.push(fig);
  fs.writeFileSync(path.join(sup.dir, 'events.log'), `${sup.rawLines.join('\n')}\n`);
  if (!opts.keep && !failures.length) fs.rmSync(sup.dir, { recursive: true, force: true });
  else process.stdout.write(`  kept ${sup.dir}\n`);
}
if (opts.json) fs.writeFileSync(opts.json, `${JSON.stringify(results, null, 2)}\n`);
process.exit(failed ? 1 : 0);
