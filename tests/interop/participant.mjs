#!/usr/bin/env node
// Node participants of the interop suite.
//
//   node participant.mjs hold --kind acquire|compat --lock P [--wait-ms N] [--label L]
//       A holder or waiter for the matrix. Prints `acquired <recorded pid> <own pid>`
//       once it holds the lock (or `busy`, exit 1), holds it until stdin reaches
//       EOF, releases, prints `released`, exits 0.
//         acquire: `offload-lock acquire` / `release --token` through execFileSync
//                  (the recorded holder is this Node process);
//         compat:  compat/node acquireGpuLock() (the recorded holder is its
//                  `offload-lock hold` child).
//   node participant.mjs loop --kind acquire|compat|ref --lock P --dir D --tag T
//        [--wait-ms N] [--cs-min N] [--cs-max N] [--think-min N] [--think-max N]
//        [--skip-lock-every N]
//       A stress participant (see stress.mjs): acquire -> critical section ->
//       release until <D>/stop exists. ref: the v1 reference runner
//       (reference/gpu-lock-v1.mjs, unmodified); its rm -rf calls are logged as
//       R events by wrapping fs.rmSync in this process (nothing else changes).
//
// The offload-lock binary: $OFFLOAD_LOCK_BIN, else <repo>/build/offload-lock.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sentinel, emit, lockIdent, procStat, sleepSync, uniform } from './cs.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.OFFLOAD_LOCK_BIN || path.resolve(HERE, '..', '..', 'build', 'offload-lock');
process.env.OFFLOAD_LOCK_BIN = BIN; // compat/node finds the same binary

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    if (!k.startsWith('--') || i + 1 >= argv.length) {
      process.stderr.write(`participant.mjs: bad argument ${k}\n`);
      process.exit(2);
    }
    o[k.slice(2)] = argv[++i];
  }
  return o;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ------------------------------------------------------------ the kinds

// Each kind: acquire({lock, waitMs, label}) -> handle {recordedPid, release() -> 'released'|'lost'} or null when busy.
const kinds = {
  async acquire({ lock, waitMs, label }) {
    let token;
    try {
      token = execFileSync(BIN, ['--lock', lock, '--quiet', 'acquire', '--wait', `${waitMs}ms`, '--label', label],
        { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
    } catch (err) {
      if (err.status === 1) return null;
      throw new Error(`offload-lock acquire: exit ${err.status} ${String(err.stderr).trim()}`);
    }
    return {
      recordedPid: process.pid,
      ident: token,
      release() {
        try {
          execFileSync(BIN, ['--lock', lock, '--quiet', 'release', '--token', token], { stdio: ['ignore', 'ignore', 'pipe'] });
          return 'released';
        } catch (err) {
          if (err.status === 3) return 'lost';
          throw new Error(`offload-lock release: exit ${err.status} ${String(err.stderr).trim()}`);
        }
      },
    };
  },

  async compat({ lock, waitMs, label }) {
    const { acquireGpuLock } = await import('../../compat/node/index.mjs');
    const h = await acquireGpuLock({ lockPath: lock, waitMs, label });
    if (!h) return null;
    return {
      recordedPid: h.pid,
      ident: h.token,
      release() {
        h.release();
        return 'released';
      },
    };
  },

  async ref({ lock, waitMs, tag }) {
    const v1 = await import('./reference/gpu-lock-v1.mjs');
    const h = await v1.acquireGpuLock({ lockPath: lock, waitMs });
    if (!h) return null;
    // The runner's own meta.json, if it still is there (a D1 race may
    // already have replaced it).
    const ident = lockIdent(lock);
    return {
      recordedPid: process.pid,
      ident: ident.startsWith(`p${process.pid}s`) ? ident : '-',
      release() {
        refReleasing = true;
        try {
          h.release();
        } finally {
          refReleasing = false;
        }
        return 'released';
      },
    };
  },
};

// Attribution for the reference runner: log every rm -rf it does on the lock,
// with what it removes. gpu-lock-v1.mjs calls fs.rmSync through the module
// object, so wrapping the property here sees its calls; its behaviour is
// unchanged.
let refReleasing = false;
function wrapRmSync(lock, tag) {
  const original = fs.rmSync;
  fs.rmSync = function rmSyncLogged(p, options) {
    if (path.resolve(String(p)) === path.resolve(lock)) {
      // "absent": nothing at the path when it was read (another reclaimer
      // had just moved it aside); whatever appears before the rm -rf runs
      // is removed unseen.
      const ident = fs.existsSync(lock) ? lockIdent(lock) : 'absent';
      emit('R', tag, refReleasing ? 'release' : 'reclaim', ident);
    }
    return original.call(this, p, options);
  };
}

// ------------------------------------------------------------ modes

async function hold(o) {
  const kind = kinds[o.kind];
  if (!kind || o.kind === 'ref') throw new Error(`hold: unknown kind ${o.kind}`);
  const waitMs = o['wait-ms'] !== undefined ? Number(o['wait-ms']) : 20000;
  const h = await kind({ lock: o.lock, waitMs, label: o.label || `interop-${o.kind}` });
  if (!h) {
    process.stdout.write('busy\n');
    process.exit(1);
  }
  process.stdin.on('error', () => {});
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    const r = h.release();
    process.stdout.write(`${r}\n`, () => process.exit(r === 'released' ? 0 : 5));
  };
  process.stdin.on('end', finish);
  process.stdin.on('close', finish);
  process.stdin.resume();
  let recorded = h.recordedPid;
  if (o.kind === 'compat') {
    // compat/node says which pid it recorded; it must be the `offload-lock
    // hold` child it spawned, found here independently.
    const holds = childProcesses(process.pid).filter((c) => c.cmd.includes(' hold '));
    if (holds.length !== 1 || holds[0].pid !== h.recordedPid) {
      process.stderr.write(`participant.mjs: compat/node reports pid ${h.recordedPid}, its hold children are ${JSON.stringify(holds)}\n`);
      process.exit(4);
    }
    recorded = holds[0].pid;
  }
  process.stdout.write(`acquired ${recorded} ${process.pid}\n`);
}

function childProcesses(ppid) {
  const out = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    const st = procStat(Number(e));
    if (!st || st.ppid !== ppid) continue;
    let cmd = '';
    try {
      cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0').join(' ');
    } catch { /* gone */ }
    out.push({ pid: Number(e), cmd });
  }
  return out;
}

async function loop(o) {
  const kind = kinds[o.kind];
  if (!kind) throw new Error(`loop: unknown kind ${o.kind}`);
  const { lock, dir, tag } = o;
  const num = (k, d) => (o[k] !== undefined ? Number(o[k]) : d);
  const waitMs = num('wait-ms', 3000);
  const csMin = num('cs-min', 1);
  const csMax = num('cs-max', 4);
  const thinkMin = num('think-min', 0);
  const thinkMax = num('think-max', 5);
  const skipEvery = num('skip-lock-every', 0);
  const stopFile = path.join(dir, 'stop');
  if (o.kind === 'ref') wrapRmSync(lock, tag);
  const me = procStat(process.pid);
  const cs = new Sentinel(dir, tag, o.kind);

  for (let cycle = 1; !fs.existsSync(stopFile); cycle++) {
    await sleep(uniform(thinkMin, thinkMax));
    if (fs.existsSync(stopFile)) break;
    if (skipEvery > 0 && cycle % skipEvery === 0) {
      cs.enter(false);
      emit('N', tag, o.kind);
      sleepSync(uniform(csMin, csMax));
      cs.leave();
      emit('X', tag);
      continue;
    }
    let h;
    try {
      h = await kind({ lock, waitMs, label: tag, tag });
    } catch (err) {
      emit('E', tag, `acquire:${String(err.message).replace(/\s+/g, '_')}`);
      await sleep(50);
      continue;
    }
    if (!h) {
      emit('T', tag);
      continue;
    }
    cs.enter(true);
    emit('A', tag, o.kind, process.pid, me ? me.start : 0, h.ident);
    sleepSync(uniform(csMin, csMax));
    cs.leave();
    emit('X', tag);
    let r;
    try {
      r = h.release();
    } catch (err) {
      emit('E', tag, `release:${String(err.message).replace(/\s+/g, '_')}`);
      continue;
    }
    if (r === 'lost') emit('L', tag, `${o.kind} release`);
    emit('F', tag);
  }
}

const [mode, ...rest] = process.argv.slice(2);
const opts = parseArgs(rest);
try {
  if (mode === 'hold') await hold(opts);
  else if (mode === 'loop') await loop(opts);
  else {
    process.stderr.write('usage: node participant.mjs hold|loop --kind K --lock P ...\n');
    process.exit(2);
  }
} catch (err) {
  process.stderr.write(`participant.mjs: ${err.stack || err}\n`);
  process.exit(4);
}
