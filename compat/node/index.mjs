// offload-lock for Node: the GPU lock of the render runners, driven through
// the `offload-lock` command-line tool.
//
// acquireGpuLock() has the call shape and results of the old gpu-lock.mjs, so
// a runner switches by changing its import line. The lock is held by an
// `offload-lock hold` child process; when this Node process ends, however it
// ends, that child sees EOF on its stdin and releases the lock.
//
// Built-in modules only.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { cliError, codes, exitCodes, lastLine, lostError, withCode } from './errors.mjs';
import { makeHandle } from './handle.mjs';

export { exitCodes };

export const DEFAULT_WAIT_MS = 30 * 60 * 1000;
export const DEFAULT_TTL_MS = 60 * 60 * 1000;

const BIN_NAME = 'offload-lock';
const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO_BINARY = path.resolve(HERE, '..', '..', 'build', BIN_NAME);

// ---------------------------------------------------------------------------
// small helpers

function isExecutableFile(p) {
  try {
    if (!fs.statSync(p).isFile()) return false;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function envWaitMs() {
  const raw = process.env.GPU_LOCK_WAIT_MS;
  if (raw === undefined || raw.trim() === '') return DEFAULT_WAIT_MS;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : DEFAULT_WAIT_MS;
}

function defaultLabel() {
  return process.argv[1] ? path.basename(process.argv[1]) : 'node';
}

// Milliseconds -> a DUR argument of the CLI.
function durArg(ms, name) {
  if (ms === Infinity) return 'forever';
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw withCode(new TypeError(`${name} must be a non-negative number of milliseconds or Infinity, got ${String(ms)}`),
      codes.badArgument);
  }
  return `${Math.ceil(ms)}ms`;
}

// The named priorities of the CLI's --priority.
const PRIORITY_NAMES = Object.freeze({ batch: -10, normal: 0, interactive: 10 });

// A priority option -> the CLI's --priority argument (undefined: none).
function priorityArg(p) {
  if (p === undefined) return undefined;
  if (typeof p === 'string' && Object.hasOwn(PRIORITY_NAMES, p)) return p;
  if (typeof p === 'number' && Number.isInteger(p) && p >= -100 && p <= 100) return String(p);
  throw withCode(new TypeError(`priority must be an integer from -100 to 100 or 'batch', 'normal' or 'interactive', got ${String(p)}`),
    codes.badArgument);
}

// An expectMs option -> the CLI's --expect argument (undefined: undeclared).
function expectArg(ms) {
  if (ms === undefined || ms === 0) return undefined;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw withCode(new TypeError(`expectMs must be a positive finite number of milliseconds, got ${String(ms)}`),
      codes.badArgument);
  }
  return `${Math.ceil(ms)}ms`;
}

// The GPU slot options -> --gpus N|auto and --gpu K (undefined: none).
function gpuArgs({ gpus, gpu }) {
  const args = [];
  if (gpus !== undefined) {
    if (gpus !== 'auto' && !(Number.isInteger(gpus) && gpus >= 1 && gpus <= 1024)) {
      throw withCode(new TypeError(`gpus must be an integer from 1 to 1024 or 'auto', got ${String(gpus)}`),
        codes.badArgument);
    }
    args.push('--gpus', String(gpus));
  }
  if (gpu !== undefined) {
    if (!(Number.isInteger(gpu) && gpu >= 0 && gpu <= 1023)) {
      throw withCode(new TypeError(`gpu must be an integer from 0 to 1023, got ${String(gpu)}`), codes.badArgument);
    }
    args.push('--gpu', String(gpu));
  }
  return args;
}

// The queue options shared by hold and acquire.
function queueArgs({ priority, expectMs }) {
  const args = [];
  const p = priorityArg(priority);
  if (p !== undefined) args.push('--priority', p);
  const e = expectArg(expectMs);
  if (e !== undefined) args.push('--expect', e);
  return args;
}

// What an aborted acquisition rejects with, as Node's own APIs do: name
// 'AbortError', code 'ABORT_ERR', the signal's reason as the cause.
function abortError(signal) {
  const err = withCode(new Error('the GPU lock wait was aborted', { cause: signal.reason }), codes.aborted);
  err.name = 'AbortError';
  return err;
}

function isAbortSignal(s) {
  return s !== null && typeof s === 'object' && typeof s.aborted === 'boolean' && typeof s.addEventListener === 'function';
}

// How often a wait with onProgress is reported when nothing changes.
const PROGRESS_EVERY = '1s';
// How long an aborted wait's child has to end after SIGTERM before it is
// killed outright (its entry, no longer write-locked, then counts for nobody).
const ABORT_KILL_AFTER_MS = 10 * 1000;

function lockArgs(lockPath) {
  return lockPath ? ['--lock', lockPath] : [];
}

// ---------------------------------------------------------------------------
// public API

// Where the lock lives, by the rule of the Node runners:
// env GPU_LOCK if non-empty, else <os.tmpdir()>/local-offload-gpu.lock.
export function defaultLockPath() {
  const fromEnv = process.env.GPU_LOCK;
  if (fromEnv) return fromEnv;
  return path.join(os.tmpdir(), 'local-offload-gpu.lock');
}

// The offload-lock binary: $OFFLOAD_LOCK_BIN (must exist), else offload-lock
// on PATH, else <repo>/build/offload-lock.
export function findBinary() {
  const places = `$OFFLOAD_LOCK_BIN, ${BIN_NAME} on PATH, ${REPO_BINARY}`;
  const fromEnv = process.env.OFFLOAD_LOCK_BIN;
  if (fromEnv) {
    if (isExecutableFile(fromEnv)) return fromEnv;
    throw withCode(new Error(`offload-lock binary not found: OFFLOAD_LOCK_BIN=${fromEnv} is not an executable file (looked in ${places})`),
      codes.noBinary);
  }
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, BIN_NAME);
    if (isExecutableFile(candidate)) return candidate;
  }
  if (isExecutableFile(REPO_BINARY)) return REPO_BINARY;
  throw withCode(new Error(`offload-lock binary not found: looked in ${places}; set OFFLOAD_LOCK_BIN or build the repository`),
    codes.noBinary);
}

// Take the GPU lock. Resolves with { release(), releaseAsync(), token, path,
// pid, gpu, lost } once held (pid is the `offload-lock hold` child that holds
// it), or null when the lock is still busy after waitMs. Rejects on any
// other failure, and with an AbortError when `signal` aborts the wait.
// onLost(err) is called once if the lock stops being held before release:
// removed or replaced by someone else, or the hold child killed.
export async function acquireGpuLock(options = {}) {
  const r = await acquire(options);
  return r.handle ?? null;
}

// One acquisition: { handle } once held, { busy: message } when still held
// by someone else after waitMs (the message names the holder, as the
// command does: "timed out: PATH is held by LABEL (pid N, host H) for 5s").
async function acquire({ lockPath, waitMs, ttlMs, label, priority, expectMs, gpus, gpu, signal, onProgress, onLost } = {}) {
  if (onLost !== undefined && typeof onLost !== 'function') {
    throw withCode(new TypeError(`onLost must be a function, got ${String(onLost)}`), codes.badArgument);
  }
  if (signal !== undefined && !isAbortSignal(signal)) {
    throw withCode(new TypeError(`signal must be an AbortSignal, got ${String(signal)}`), codes.badArgument);
  }
  if (onProgress !== undefined && typeof onProgress !== 'function') {
    throw withCode(new TypeError(`onProgress must be a function, got ${String(onProgress)}`), codes.badArgument);
  }
  const wait = durArg(waitMs ?? envWaitMs(), 'waitMs');
  const ttl = durArg(ttlMs ?? DEFAULT_TTL_MS, 'ttlMs');
  const queue = queueArgs({ priority, expectMs });
  const slots = gpuArgs({ gpus, gpu });
  // Aborted before it began: nothing is spawned.
  if (signal && signal.aborted) throw abortError(signal);
  const bin = findBinary();
  // The child reports on stderr as JSON lines (--json): its wait (for
  // onProgress; once a second with it, else only when the holder changes)
  // and a loss of the lock once held; its last plain line says why it
  // failed (a busy line names the holder).
  const args = [...lockArgs(lockPath), '--ttl', ttl, '--json', 'hold', '--wait', wait, '--label', String(label ?? defaultLabel()),
    ...queue, ...slots, '--remind', onProgress ? PROGRESS_EVERY : 'forever'];

  return new Promise((resolve, reject) => {
    // detached: the child gets its own session, so a Ctrl-C or a signal to
    // the runner's process group does not release the lock behind the back
    // of a runner that handles the signal and is still using the GPU. The
    // lock's lifetime is tied to this process through the stdin pipe alone.
    const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    let settled = false;
    let aborted = false;
    let killTimer = null;
    let stdoutBuf = '';
    let stderrBuf = '';
    let stderrLine = '';

    // Aborting while waiting: SIGTERM makes the hold give up its wait and
    // leave the queue (its entry removed) without taking the lock; the
    // promise rejects once the child has ended, so that by then neither
    // remains.
    const onAbort = () => {
      if (settled || aborted) return;
      aborted = true;
      try { child.kill('SIGTERM'); } catch { /* already gone */ }
      killTimer = setTimeout(() => { try { child.kill('SIGKILL'); } catch { /* gone */ } }, ABORT_KILL_AFTER_MS);
      killTimer.unref();
    };
    const unlisten = () => {
      if (signal) signal.removeEventListener('abort', onAbort);
      if (killTimer) clearTimeout(killTimer);
    };
    if (signal) signal.addEventListener('abort', onAbort, { once: true });

    // Writing to or ending the stdin of a child that already exited must
    // never crash this process.
    child.stdin.on('error', () => {});
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    // Progress events (JSON lines) go to onProgress; everything else is kept
    // for the error message.
    const stderrText = (line) => {
      if (stderrBuf.length < 65536) stderrBuf += `${line}\n`;
    };
    let handle = null;
    const stderrLineDone = (line) => {
      if (line.startsWith('{')) {
        let event;
        try {
          event = JSON.parse(line);
        } catch {
          stderrText(line);
          return;
        }
        if (event && event.event === 'waiting' && onProgress && !settled && !aborted) {
          try { onProgress(event); } catch { /* the caller's own fault; the wait goes on */ }
        } else if (event && event.event === 'lost' && handle) {
          handle.lose(lostError(`the lock ${event.path} was removed or replaced by someone else`, event));
        }
        return;
      }
      stderrText(line);
    };
    child.stderr.on('data', (chunk) => {
      stderrLine += chunk;
      let nl;
      while ((nl = stderrLine.indexOf('\n')) >= 0) {
        stderrLineDone(stderrLine.slice(0, nl));
        stderrLine = stderrLine.slice(nl + 1);
      }
      if (stderrLine.length > 65536) {
        stderrText(stderrLine);
        stderrLine = '';
      }
    });

    const fail = (err) => {
      if (settled) return;
      settled = true;
      unlisten();
      try { child.stdin.end(); } catch { /* ignore */ }
      reject(err);
    };

    child.stdout.on('data', (chunk) => {
      if (settled) return;
      stdoutBuf += chunk;
      let nl;
      while (!settled && (nl = stdoutBuf.indexOf('\n')) >= 0) {
        const line = stdoutBuf.slice(0, nl);
        stdoutBuf = stdoutBuf.slice(nl + 1);
        if (!line.startsWith('acquired ')) continue;
        let info;
        try {
          info = JSON.parse(line.slice('acquired '.length));
        } catch (e) {
          fail(cliError('hold', { error: new Error(`unreadable acquired line: ${line}`, { cause: e }) }));
          return;
        }
        if (aborted) {
          // Taken just as the abort came: the SIGTERM already sent releases
          // it; the promise still rejects, once the child has ended.
          continue;
        }
        settled = true;
        unlisten();
        handle = makeHandle(bin, child, info, info.path || lockPath || defaultLockPath(), onLost);
        resolve({ handle: handle.api });
      }
    });

    child.on('error', (error) => fail(cliError('hold', { error })));
    child.on('close', (status, signalName) => {
      if (stderrLine) stderrLineDone(stderrLine);
      stderrLine = '';
      if (settled) return;
      if (aborted) {
        settled = true;
        unlisten();
        reject(abortError(signal));
        return;
      }
      settled = true;
      unlisten();
      if (status === exitCodes.busy) resolve({ busy: lastLine(stderrBuf).replace(/^offload-lock: /, '') });
      else reject(cliError('hold', { status, signal: signalName, stderr: stderrBuf }));
    });
  });
}

// acquire, run `await fn(handle)`, release in finally. Throws an Error with
// code 'EBUSY' naming the holder when the lock is still busy after the wait,
// and the ERR_OFFLOAD_LOCK_LOST error when the lock was lost while fn ran
// (unless onLost was given).
export async function withGpuLock(opts, fn) {
  if (typeof opts === 'function') {
    fn = opts;
    opts = {};
  }
  const r = await acquire(opts || {});
  if (!r.handle) {
    const where = (opts && opts.lockPath) || defaultLockPath();
    throw withCode(new Error(`GPU lock busy: ${r.busy || where}`), codes.busy);
  }
  const handle = r.handle;
  let value;
  try {
    value = await fn(handle);
  } finally {
    await handle.releaseAsync();
  }
  // The lock was lost while fn ran: its work was not alone on the GPU.
  // With onLost the caller has been told; without, this is how.
  if (handle.lost && !(opts && opts.onLost)) throw handle.lost;
  return value;
}

// `offload-lock --json status` as an object: path, held, pid, startedAt,
// heldForMs, label, host, token, stale, ownerUid, v1Stale, otherPidNamespace,
// busy and busyBy (the GPU is taken: by its lock, or by the gpulease lease
// that goes with it while the lock is free), gpu, device, priority,
// expectMs, freeInMs, yieldRequested, slots,
// waiters (the offload-lock processes queued for the lock, in the order they
// will be served, each with its position, priority, expectMs and etaMs), and
// gpulease (the gpulease lease and its holder; null where no gpulease root
// exists).
export function inspect(lockPath) {
  const bin = findBinary();
  const r = spawnSync(bin, [...lockArgs(lockPath), '--json', 'status'], { encoding: 'utf8' });
  // status exits ok when the GPU is taken and busy when it is free.
  if (r.error || (r.status !== exitCodes.ok && r.status !== exitCodes.busy)) throw cliError('status', r);
  try {
    return JSON.parse(r.stdout);
  } catch (e) {
    throw cliError('status', { error: new Error(`unreadable output: ${r.stdout.trim()}`, { cause: e }) });
  }
}

// For scripts: take the lock on behalf of this Node process (it is recorded
// as the holder; nothing releases it automatically when this process ends,
// but a dead holder makes the lock stale). Returns the token, or null when
// still busy after waitMs. priority and expectMs as for acquireGpuLock; a
// synchronous wait cannot be aborted or report progress.
export function acquireSync({ lockPath, waitMs, ttlMs, label, priority, expectMs } = {}) {
  const args = [...lockArgs(lockPath)];
  if (ttlMs !== undefined) args.push('--ttl', durArg(ttlMs, 'ttlMs'));
  args.push('acquire', '--wait', durArg(waitMs ?? envWaitMs(), 'waitMs'),
    '--pid', String(process.pid), '--label', String(label ?? defaultLabel()), ...queueArgs({ priority, expectMs }));
  const bin = findBinary();
  const r = spawnSync(bin, args, { encoding: 'utf8' });
  if (r.status === exitCodes.busy && !r.error) return null;
  if (r.error || r.status !== exitCodes.ok) throw cliError('acquire', r);
  const token = lastLine(r.stdout);
  if (!token) throw cliError('acquire', { error: new Error('no token printed') });
  return token;
}

// Release a lock taken with acquireSync. Returns 'released', 'free' (nothing
// to release) or 'not-owner' (held by someone else; left in place).
// Without a token, releases the lock if this process is its recorded holder.
export function releaseSync({ lockPath, token } = {}) {
  const bin = findBinary();
  const before = inspect(lockPath);
  if (!before.held) return 'free';
  const who = token ? ['--token', String(token)] : ['--pid', String(process.pid)];
  const r = spawnSync(bin, [...lockArgs(lockPath), 'release', ...who], { encoding: 'utf8' });
  if (r.error) throw cliError('release', r);
  if (r.status === exitCodes.notOwner) return 'not-owner';
  if (r.status !== exitCodes.ok) throw cliError('release', r);
  // Exit 0 also means "already free": tell the two apart by who held it.
  const ours = token ? before.token === String(token) : before.pid === process.pid;
  return ours ? 'released' : 'free';
}
