// Shared helpers of the interop node tests (matrix, meta, paths): where the
// programs are, child processes with line-based output and bounded waits,
// the readers' views of a lock, and one holder/waiter per participant kind.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { procStat } from './cs.mjs';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(HERE, '..', '..');
export const BIN = process.env.OFFLOAD_LOCK_BIN || path.join(REPO, 'build', 'offload-lock');
export const GO_INSPECT = process.env.GPULOCK_INSPECT || path.join(REPO, 'build', 'gpulock-inspect');
export const PARTICIPANT = process.env.INTEROP_PARTICIPANT || path.join(REPO, 'build', 'tests', 'interop', 'interop_participant');
export const NODE_PARTICIPANT = path.join(HERE, 'participant.mjs');
export const RUNNER = path.join(HERE, 'reference', 'runner.mjs');
export const COMPAT = path.join(REPO, 'compat', 'node', 'index.mjs');
// The bound on anything that must happen, and the wait every participant
// is given. Generous on purpose: with the matrix's pairs running side by
// side and a build beside the suite on a 2-core machine, starting a Node
// process alone has taken seconds; 20 s was missed. How fast a takeover is
// belongs to the benchmark (tests/bench), not to a pass/fail bound here.
export const BOUND_MS = 60000;

export const KINDS = ['lib', 'run', 'acquire', 'compat', 'ref'];
export const KIND_NAMES = {
  lib: 'C++ library',
  run: 'CLI run',
  acquire: 'CLI acquire/release from Node',
  compat: 'compat/node',
  ref: 'v1 reference runner',
};

// The environment without anything that steers lock paths, waits or the
// B11 pass-through of an enclosing `offload-lock run`.
export function cleanEnv(extra = {}) {
  const env = { ...process.env, OFFLOAD_LOCK_BIN: BIN };
  for (const k of ['GPU_LOCK', 'TMPDIR', 'TMP', 'TEMP', 'GPU_LOCK_WAIT_MS', 'GPU_LOCK_V1_WRITE_DELAY_MS',
    'OFFLOAD_LOCK_PATH', 'OFFLOAD_LOCK_TOKEN']) delete env[k];
  return { ...env, ...extra };
}

export function tempDir(t, prefix = 'interop-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// Gone: no such process, or a zombie.
export function gone(pid) {
  const s = procStat(pid);
  return !s || s.state === 'Z' || s.state === 'X';
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(cond, what, timeoutMs = BOUND_MS) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

// A child with its stdout split into lines; every wait is bounded.
export function track(cmd, args, { env = cleanEnv(), t } = {}) {
  const child = spawn(cmd, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const p = { child, pid: child.pid, lines: [], stdout: '', stderr: '', exit: null };
  const waiters = new Set();
  const notify = () => { for (const w of [...waiters]) w(); };
  let partial = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (c) => {
    p.stdout += c;
    partial += c;
    let nl;
    while ((nl = partial.indexOf('\n')) >= 0) {
      p.lines.push(partial.slice(0, nl));
      partial = partial.slice(nl + 1);
    }
    notify();
  });
  child.stderr.on('data', (c) => { p.stderr += c; });
  child.stdin.on('error', () => {});
  p.exited = new Promise((resolve) => {
    child.on('close', (code, signal) => {
      p.exit = { code, signal };
      notify();
      resolve(p.exit);
    });
  });
  child.on('error', (e) => { p.stderr += `spawn error: ${e.message}`; });
  const describe = () => `${path.basename(cmd)} ${args.join(' ')}: stdout ${JSON.stringify(p.stdout)} stderr ${JSON.stringify(p.stderr)} exit ${JSON.stringify(p.exit)}`;
  p.describe = describe;

  // The first stdout line matching re; rejects on exit or timeout.
  p.waitLine = (re, timeoutMs = BOUND_MS) => new Promise((resolve, reject) => {
    let timer;
    const check = () => {
      const line = p.lines.find((l) => re.test(l));
      if (line !== undefined) { done(); resolve(line); return; }
      if (p.exit) { done(); reject(new Error(`exited before printing ${re}: ${describe()}`)); }
    };
    const done = () => { clearTimeout(timer); waiters.delete(check); };
    timer = setTimeout(() => { done(); reject(new Error(`no line ${re} within ${timeoutMs} ms: ${describe()}`)); }, timeoutMs);
    waiters.add(check);
    check();
  });
  p.waitExit = async (timeoutMs = BOUND_MS) => {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`did not exit within ${timeoutMs} ms: ${describe()}`)), timeoutMs);
    });
    try {
      return await Promise.race([p.exited, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  p.closeStdin = () => { try { child.stdin.end(); } catch { /* gone */ } };
  if (t) t.after(() => { if (!p.exit) try { child.kill('SIGKILL'); } catch { /* gone */ } });
  return p;
}

function runJson(cmd, args, okCodes = [0, 1]) {
  const r = spawnSync(cmd, args, { env: cleanEnv(), encoding: 'utf8', timeout: BOUND_MS });
  if (r.error || !okCodes.includes(r.status)) {
    throw new Error(`${path.basename(cmd)} ${args.join(' ')}: exit ${r.status} ${r.error || ''} ${r.stderr}`);
  }
  return { json: JSON.parse(r.stdout.trim().split('\n').pop()), status: r.status };
}

// The Go reader: {path, held, pid, ageMs, label, startedAt, host}; exit 0 held, 1 free.
export function goInspect(lock) {
  const { json, status } = runJson(GO_INSPECT, [lock]);
  if ((status === 0) !== json.held) throw new Error(`gpulock-inspect: exit ${status} but held=${json.held}`);
  return json;
}
// The v1 rules (reference runner): {stale, meta}.
export function refInspect(lock) {
  return runJson(process.execPath, [RUNNER, 'inspect', '--lock', lock], [0]).json;
}
// offload-lock --json status (the library's inspect through the command).
export function cliStatus(lock) {
  const { json, status } = runJson(BIN, ['--lock', lock, '--json', 'status']);
  if ((status === 0) !== json.held) throw new Error(`offload-lock status: exit ${status} but held=${json.held}`);
  return json;
}
// offload_lock::inspect in-process (plus its predictions of the Node and Go rules).
export function libInspect(lock) {
  return runJson(PARTICIPANT, ['inspect', '--lock', lock], [0]).json;
}

// Every reader sees the lock held by `pid`.
export function readersSeeHeld(assert, lock, pid, what) {
  const g = goInspect(lock);
  assert.equal(g.held, true, `${what}: Go reader says free: ${JSON.stringify(g)}`);
  assert.equal(g.pid, pid, `${what}: Go reader pid: ${JSON.stringify(g)}`);
  const r = refInspect(lock);
  assert.equal(r.stale, false, `${what}: v1 rules say stale: ${JSON.stringify(r)}`);
  assert.equal(r.meta && r.meta.pid, pid, `${what}: v1 rules pid: ${JSON.stringify(r)}`);
  const c = cliStatus(lock);
  assert.equal(c.held, true, `${what}: offload-lock status says free: ${JSON.stringify(c)}`);
  assert.equal(c.pid, pid, `${what}: offload-lock status pid: ${JSON.stringify(c)}`);
  return { go: g, ref: r, cli: c };
}

// Every reader sees the lock free (and it is gone from disk).
export function readersSeeFree(assert, lock, what) {
  const g = goInspect(lock);
  assert.equal(g.held, false, `${what}: Go reader says held: ${JSON.stringify(g)}`);
  const r = refInspect(lock);
  assert.equal(r.stale, true, `${what}: v1 rules say held: ${JSON.stringify(r)}`);
  assert.equal(r.meta, null, `${what}: v1 rules still read a meta: ${JSON.stringify(r)}`);
  const c = cliStatus(lock);
  assert.equal(c.held, false, `${what}: offload-lock status says held: ${JSON.stringify(c)}`);
  assert.equal(fs.existsSync(lock), false, `${what}: ${lock} still exists`);
}

// Processes (not zombies) whose command line mentions `needle` (a test's
// temp dir): a `hold` child or a keeper that outlived its holder.
export function processesMentioning(needle) {
  const found = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    let cmd;
    try {
      cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    if (cmd.includes(needle) && !gone(Number(e))) found.push(`${e}: ${cmd.split('\0').join(' ').trim()}`);
  }
  return found;
}

// One participant of a kind, holding (or waiting for) the lock until stdin
// reaches EOF. After `acquired`: recordedPid is what meta.json must name,
// killPid the process a SIGKILL goes to (the holder's own process).
export function startParticipant(kind, lock, { waitMs = BOUND_MS, label = `matrix-${kind}`, t, env } = {}) {
  let p;
  switch (kind) {
    case 'lib':
      p = track(PARTICIPANT, ['hold', '--lock', lock, '--wait-ms', String(waitMs), '--label', label], { t, env });
      break;
    case 'run':
      p = track(BIN, ['--lock', lock, '--quiet', 'run', '--wait', `${waitMs}ms`, '--label', label, '--', PARTICIPANT, 'cmd-hold'], { t, env });
      break;
    case 'acquire':
    case 'compat':
      p = track(process.execPath, [NODE_PARTICIPANT, 'hold', '--kind', kind, '--lock', lock, '--wait-ms', String(waitMs), '--label', label], { t, env });
      break;
    case 'ref':
      p = track(process.execPath, [RUNNER, 'hold', '--lock', lock, '--wait-ms', String(waitMs)], { t, env });
      break;
    default:
      throw new Error(`unknown kind ${kind}`);
  }
  const h = { kind, proc: p, recordedPid: null, killPid: null };
  h.acquired = async (timeoutMs = BOUND_MS) => {
    const line = await p.waitLine(/^acquired /, timeoutMs);
    const [, recorded, self] = line.split(' ');
    h.recordedPid = Number(recorded);
    // lib, run (the CMD), ref: the holder process is the recorded one; the
    // Node participants name themselves second.
    h.killPid = self ? Number(self) : Number(recorded);
    return h;
  };
  h.hasAcquired = () => p.lines.some((l) => l.startsWith('acquired '));
  // Release: stdin EOF; the process releases and exits 0.
  h.release = async () => {
    p.closeStdin();
    const e = await p.waitExit();
    if (e.code !== 0) throw new Error(`${KIND_NAMES[kind]} did not release cleanly: ${p.describe()}`);
  };
  h.kill = () => process.kill(h.killPid, 'SIGKILL');
  return h;
}
