// TEST STAND-IN ONLY. NEVER USE THIS FOR REAL WORK.
//
// This module reproduces the v1 GPU lock used by the existing Node render
// runners (gpu-lock.mjs), INCLUDING ITS KNOWN DEFECTS, so that the interop
// tests can check how offload-lock behaves next to an unmodified v1 runner:
//
//   D1  the lock directory is created first and meta.json is written in a
//       separate, later step; in between, any other acquirer sees a lock
//       without metadata, judges it stale and removes it.
//   D2  reclaiming a stale lock is a plain `rm -rf` followed by a retry, so
//       two waiters that both judge the lock stale can both remove it (the
//       second removal deletes the first reclaimer's fresh lock).
//   D3  release() removes the directory without checking who owns it.
//
// Other v1 traits kept on purpose: polling once per second, TTL judged on
// meta.json's mtime, liveness judged with process.kill(pid, 0).
//
// The only addition is a testing knob: env GPU_LOCK_V1_WRITE_DELAY_MS
// (default 0) sleeps that many milliseconds between the mkdir and the
// meta.json write, so tests can hold the D1 window open.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const DEFAULT_WAIT_MS = 30 * 60 * 1000;
const DEFAULT_TTL_MS = 60 * 60 * 1000;
const POLL_MS = 1000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function envWaitMs() {
  const raw = process.env.GPU_LOCK_WAIT_MS;
  if (raw === undefined || raw === '') return DEFAULT_WAIT_MS;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? n : DEFAULT_WAIT_MS;
}

function writeDelayMs() {
  const n = Number(process.env.GPU_LOCK_V1_WRITE_DELAY_MS || 0);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

export function defaultLockPath() {
  const fromEnv = process.env.GPU_LOCK;
  if (fromEnv) return fromEnv;
  return path.join(os.tmpdir(), 'local-offload-gpu.lock');
}

// Returns { meta, mtimeMs } or null when meta.json cannot be read or parsed.
export function readMeta(lockPath) {
  const metaPath = path.join(lockPath, 'meta.json');
  try {
    const meta = JSON.parse(fs.readFileSync(metaPath, 'utf8'));
    const { mtimeMs } = fs.statSync(metaPath);
    return { meta, mtimeMs };
  } catch {
    return null;
  }
}

function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the process exists but belongs to someone else.
    // Anything else (ESRCH, ERR_INVALID_ARG_TYPE for 1.5 / 2**31 / NaN) = dead.
    return err && err.code === 'EPERM';
  }
}

export function isStale(lockPath, ttlMs = DEFAULT_TTL_MS) {
  const read = readMeta(lockPath);
  if (!read || !read.meta) return true;
  const { meta, mtimeMs } = read;
  if (typeof meta.pid === 'number' && !isAlive(meta.pid)) return true;
  return Date.now() - mtimeMs > ttlMs;
}

function removeLock(lockPath) {
  try {
    fs.rmSync(lockPath, { recursive: true, force: true });
  } catch {
    // v1 ignores every error here.
  }
}

export async function acquireGpuLock({ lockPath, waitMs, ttlMs } = {}) {
  const lock = lockPath || defaultLockPath();
  const wait = waitMs ?? envWaitMs();
  const ttl = ttlMs ?? DEFAULT_TTL_MS;
  const deadline = Date.now() + wait;

  for (;;) {
    let taken = false;
    try {
      fs.mkdirSync(lock);
      taken = true;
    } catch (err) {
      if (!err || err.code !== 'EEXIST') throw err;
    }

    if (taken) {
      const delay = writeDelayMs();
      if (delay > 0) await sleep(delay); // the D1 window, held open on purpose
      fs.writeFileSync(
        path.join(lock, 'meta.json'),
        JSON.stringify({ pid: process.pid, startedAt: Date.now() }),
      );
      let released = false;
      return {
        release() {
          if (released) return;
          released = true;
          removeLock(lock); // D3: no ownership check
        },
      };
    }

    if (isStale(lock, ttl)) {
      removeLock(lock); // D2: plain rm -rf, then retry at once
      continue;
    }

    if (Date.now() >= deadline) return null;
    await sleep(POLL_MS);
  }
}
