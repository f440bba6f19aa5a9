#!/usr/bin/env node
// Soak test (scripts/soak): the contention stress loop of stress.mjs, offload-lock
// participants only, for a given time with random SIGKILLs, plus what a long run must
// also show: no file left behind and no memory growing out of bounds.
//
// It runs `stress.mjs --mode offload` with TMPDIR pointing at a directory of its own, so
// every participant's command line names that directory; samples /proc every 200 ms for
// the peak resident memory (VmHWM) of each kind of process; and at the end counts what
// is left beside the lock: staging (.gpu.lock.stage-*), moved-aside (.gpu.lock.aside-*)
// and handed-over (.gpu.lock.next-*) directories, the queue registry (.gpu.lock.queue), the
// critical-section sentinel, and the lock itself. A SIGKILL can leave a staging, moved-aside
// or handed-over directory, or a waiter's registry entry, until the next acquisition cleans
// it up, so those
// are counted again after one more acquisition (`offload-lock run -- true`): anything
// still there then is a leak.
//
// usage: node soak.mjs [--minutes N | --seconds N] [--seed N] [--json FILE]
// Exit 0 when the stress run passed, with 0 overlaps and 0 leaked files.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const BIN = process.env.OFFLOAD_LOCK_BIN || path.join(REPO, 'build', 'offload-lock');

function usage(msg) {
  process.stderr.write(`soak: ${msg}\nusage: scripts/soak [--minutes N | --seconds N] [--seed N] [--json FILE]\n`);
  process.exit(2);
}

const o = { seconds: 600 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const value = () => {
    if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
    return argv[++i];
  };
  const number = (v) => {
    if (!/^\d+(\.\d+)?$/.test(v) || !(Number(v) > 0)) usage(`not a positive number: '${v}'`);
    return Number(v);
  };
  switch (argv[i]) {
    case '--minutes': o.seconds = number(value()) * 60; break;
    case '--seconds': o.seconds = number(value()); break;
    case '--seed': o.seed = String(number(value())); break;
    case '--json': o.json = value(); break;
    default: usage(`unknown option '${argv[i]}'`);
  }
}

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'offload-soak-'));
const stressJson = path.join(work, 'stress.json');

// ------------------------------------------------------------ memory sampling

// What a process is, from its command line.
function kindOf(args) {
  const exe = path.basename(args[0] || '');
  if (exe === 'interop_participant') {
    return { loop: 'library participant (interop_participant loop)', 'run-loop': 'run driver (interop_participant run-loop)', cs: 'CMD of run (interop_participant cs)' }[args[1]] || `interop_participant ${args[1]}`;
  }
  if (exe === 'offload-lock') {
    const cmd = args.find((a) => ['run', 'hold', 'acquire', 'release', 'status', 'wait-free'].includes(a));
    if (cmd === 'hold') return 'offload-lock hold (compat/node)';
    if (cmd === 'acquire') return 'offload-lock acquire (and its keeper)';
    return `offload-lock ${cmd || '?'}`;
  }
  if (exe === 'node' || exe.startsWith('node')) return 'node participant (participant.mjs)';
  return exe;
}

const peak = new Map(); // kind -> { kb, pid }
const seen = new Set();
function sample() {
  let entries;
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return;
  }
  for (const e of entries) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    let cmd;
    let status;
    try {
      cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8');
      if (!cmd.includes(work)) continue;
      status = fs.readFileSync(`/proc/${e}/status`, 'utf8');
    } catch {
      continue;
    }
    const m = /VmHWM:\s+(\d+) kB/.exec(status);
    if (!m) continue;
    const args = cmd.split('\0').filter(Boolean);
    if (args[0] && path.basename(args[0]) === 'node' && args.some((a) => a.endsWith('stress.mjs'))) continue;
    const kind = kindOf(args);
    seen.add(`${e}`);
    const kb = Number(m[1]);
    const p = peak.get(kind);
    if (!p || kb > p.kb) peak.set(kind, { kb, pid: Number(e) });
  }
}

// ------------------------------------------------------------ leftovers

function leftovers(dir) {
  const out = [];
  let names = [];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return out;
  }
  for (const n of names) {
    if (/^\.gpu\.lock\.(stage|aside|next)-/.test(n) || n === 'in-cs' || n === 'gpu.lock' || n === '.gpu.lock.queue') out.push(n);
  }
  return out;
}

// ------------------------------------------------------------ run

const stressArgs = [path.join(HERE, 'stress.mjs'), '--mode', 'offload', '--duration', String(o.seconds), '--keep', '--json', stressJson];
if (o.seed) stressArgs.push('--seed', o.seed);
process.stderr.write(`soak: ${o.seconds} s of stress.mjs --mode offload in ${work}\n`);
const started = Date.now();
const stress = spawn(process.execPath, stressArgs, { env: { ...process.env, TMPDIR: work }, stdio: ['ignore', 'inherit', 'inherit'] });
const timer = setInterval(sample, 200);
const stressCode = await new Promise((resolve) => stress.on('close', (code, signal) => resolve(code ?? 128)));
clearInterval(timer);
const wallS = (Date.now() - started) / 1000;

let fig = null;
try {
  fig = JSON.parse(fs.readFileSync(stressJson, 'utf8'))[0];
} catch (e) {
  process.stderr.write(`soak: no figures from stress.mjs (${e.message})\n`);
}
const dirs = fs.readdirSync(work).filter((n) => n.startsWith('offload-stress-offload-')).map((n) => path.join(work, n));
const dir = dirs[0];
const failures = [];
if (stressCode !== 0) failures.push(`stress.mjs exited ${stressCode}`);
if (!fig || !dir) failures.push('the stress run left no figures or no work directory');

let atEnd = [];
let leaked = [];
let finalCode = null;
if (dir) {
  atEnd = leftovers(dir);
  // One more acquisition: it reclaims a lock left by a killed holder and cleans up the
  // staging and moved-aside directories of dead processes.
  const r = spawnSync(BIN, ['--lock', path.join(dir, 'gpu.lock'), '--quiet', 'run', '--wait', '30s', '--', 'true'], { encoding: 'utf8' });
  finalCode = r.status;
  if (r.status !== 0) failures.push(`one more acquisition after the run failed: exit ${r.status} ${r.stderr.trim()}`);
  leaked = leftovers(dir);
}
const overlaps = fig ? fig.overlaps : NaN;
if (fig && overlaps !== 0) failures.push(`${overlaps} overlap(s)`);
if (leaked.length) failures.push(`${leaked.length} leaked file(s): ${leaked.join(' ')}`);

const mib = (kb) => `${(kb / 1024).toFixed(1)} MiB`;
const lines = [`== soak: ${o.seconds} s requested, ${fig ? fig.durationS : '?'} s run, ${wallS.toFixed(1)} s wall time${fig ? `, seed ${fig.seed}` : ''}`];
if (fig) {
  const k = fig.acquisitions;
  lines.push(`  acquisitions: ${k.total} (lib ${k.lib}, run ${k.run}, compat ${k.compat}, acquire ${k.acquire}); timed-out attempts ${fig.timeouts}`);
  lines.push(`  kills (SIGKILL): ${fig.kills.total} (run CMD alone ${fig.kills.cmdOnly}); sentinels of killed holders cleared ${fig.killCleanups}`);
  lines.push(`  overlaps: ${overlaps}; lost locks: ${fig.lost.total}; participant errors: ${fig.errorEvents.total}`);
}
lines.push(`  leaked files: ${leaked.length}${leaked.length ? ` (${leaked.join(' ')})` : ''}; left at the end of the run, before one more acquisition: ${atEnd.length}${atEnd.length ? ` (${atEnd.join(' ')})` : ''}`);
lines.push(`  peak memory (VmHWM, largest single process of each kind; ${seen.size} processes sampled):`);
for (const [kind, p] of [...peak.entries()].sort((a, b) => b[1].kb - a[1].kb)) lines.push(`    ${mib(p.kb).padStart(10)}  ${kind}`);
for (const f of failures) lines.push(`  FAIL: ${f}`);
if (!failures.length) lines.push('  OK');
process.stdout.write(`${lines.join('\n')}\n`);

if (o.json) {
  fs.writeFileSync(o.json, `${JSON.stringify({
    seconds: o.seconds, wallS, stress: fig, leftAtEnd: atEnd, leaked, finalAcquisitionExit: finalCode,
    peakKiB: Object.fromEntries([...peak.entries()].map(([k, p]) => [k, p.kb])), processesSampled: seen.size, failures,
  }, null, 2)}\n`);
}
if (!failures.length) fs.rmSync(work, { recursive: true, force: true });
else process.stdout.write(`  kept ${work}\n`);
process.exit(failures.length ? 1 : 0);
