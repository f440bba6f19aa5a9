// Shared helpers for the reference-runner tests (not a test file itself).
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const RUNNER = path.join(HERE, 'runner.mjs');

// A fresh temp dir per test, removed afterwards.
export function tempDir(t, prefix = 'v1-ref-') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// The pid of a process that has already exited and been reaped.
export function deadPid() {
  const r = spawnSync('true');
  if (r.error) throw r.error;
  return r.pid;
}

// Create a lock directory by hand with the given raw meta.json text
// (undefined = no meta.json at all).
export function makeLock(lockPath, metaText) {
  fs.mkdirSync(lockPath);
  if (metaText !== undefined) fs.writeFileSync(path.join(lockPath, 'meta.json'), metaText);
}

// Move meta.json's mtime (and atime) ageMs into the past.
export function backdate(lockPath, ageMs) {
  const when = new Date(Date.now() - ageMs);
  fs.utimesSync(path.join(lockPath, 'meta.json'), when, when);
}

// Poll cond() until it returns a truthy value or timeoutMs passes.
export async function waitFor(cond, { timeoutMs = 10000, intervalMs = 10, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// Spawn a process and collect its output; offers line and exit waiting.
export function spawnTracked(cmd, args, { env, t, stdin = 'pipe', detached = false } = {}) {
  const child = spawn(cmd, args, { env: env || process.env, stdio: [stdin, 'pipe', 'pipe'], detached });
  const tracked = { child, stdout: '', stderr: '', lines: [], exit: null };
  const waiters = new Set();
  const notify = () => { for (const w of waiters) w(); };
  let partial = '';
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    tracked.stdout += chunk;
    partial += chunk;
    let nl;
    while ((nl = partial.indexOf('\n')) >= 0) {
      tracked.lines.push(partial.slice(0, nl));
      partial = partial.slice(nl + 1);
    }
    notify();
  });
  child.stderr.on('data', (chunk) => { tracked.stderr += chunk; notify(); });
  if (child.stdin) child.stdin.on('error', () => {});
  tracked.exited = new Promise((resolve) => {
    child.on('close', (code, signal) => {
      tracked.exit = { code, signal };
      notify();
      resolve(tracked.exit);
    });
  });

  // Resolve with the first stdout line matching re (a RegExp).
  tracked.waitLine = (re, timeoutMs = 15000) => new Promise((resolve, reject) => {
    const check = () => {
      const line = tracked.lines.find((l) => re.test(l));
      if (line !== undefined) { done(); resolve(line); return true; }
      if (tracked.exit) {
        done();
        reject(new Error(`process exited (${JSON.stringify(tracked.exit)}) before printing ${re}; stdout=${JSON.stringify(tracked.stdout)} stderr=${JSON.stringify(tracked.stderr)}`));
        return true;
      }
      return false;
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`timed out waiting for ${re}; stdout=${JSON.stringify(tracked.stdout)} stderr=${JSON.stringify(tracked.stderr)}`));
    }, timeoutMs);
    const done = () => { clearTimeout(timer); waiters.delete(check); };
    if (!check()) waiters.add(check);
  });

  tracked.waitExit = (timeoutMs = 15000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`process did not exit within ${timeoutMs} ms; stdout=${JSON.stringify(tracked.stdout)} stderr=${JSON.stringify(tracked.stderr)}`)), timeoutMs);
    tracked.exited.then((e) => { clearTimeout(timer); resolve(e); });
  });

  if (t) {
    t.after(() => {
      if (!tracked.exit) {
        try { child.kill('SIGKILL'); } catch { /* already gone */ }
      }
    });
  }
  return tracked;
}

export function runRunner(args, { env, t, stdin } = {}) {
  return spawnTracked(process.execPath, [RUNNER, ...args], { env, t, stdin });
}

// Would Node consider this pid alive? (the same test v1 uses)
export function nodeThinksAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return err.code === 'EPERM';
  }
}

// Per-test options: a hang (e.g. an acquire loop that never ends) fails the
// test instead of stalling the whole run.
export const T = { timeout: 60000 };
