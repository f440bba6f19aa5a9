// Acquire / release rules of the v1 stand-in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';

import { acquireGpuLock, isStale } from './gpu-lock-v1.mjs';
import { HERE, T, backdate, tempDir } from './helpers.mjs';

const META_RE = /^\{"pid":(\d+),"startedAt":(\d+)\}$/;

test('mkdir on a free path wins; a second acquire sees EEXIST and is busy', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(h, 'first acquire should take the lock');
  assert.equal(typeof h.release, 'function');
  assert.ok(fs.statSync(lock).isDirectory(), 'lock is a directory');
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')));

  const second = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.equal(second, null, 'held by a live pid with a fresh mtime: busy');
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')), 'busy attempt leaves the lock alone');
  h.release();
  assert.equal(fs.existsSync(lock), false);
});

// Run one acquire in a child node with a time limit and report its outcome:
// a wrong "treat the error as stale and retry" would spin synchronously
// forever, and no in-process test timeout could fire.
function acquireInChild(lock) {
  const script = `
    import { acquireGpuLock } from ${JSON.stringify(pathToFileURL(path.join(HERE, 'gpu-lock-v1.mjs')).href)};
    try {
      const h = await acquireGpuLock({ lockPath: ${JSON.stringify(lock)}, waitMs: 0 });
      console.log(h === null ? 'null' : 'handle');
      if (h) h.release();
    } catch (err) {
      console.log('threw ' + err.code);
    }`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20000 });
  assert.equal(r.status, 0, `child did not finish: ${r.error || r.stderr}`);
  return r.stdout.trim();
}

test('a missing parent directory is an error (ENOENT), not busy', T, (t) => {
  const lock = path.join(tempDir(t), 'no', 'such', 'parent', 'gpu.lock');
  assert.equal(acquireInChild(lock), 'threw ENOENT');
  assert.equal(fs.existsSync(lock), false);
});

test('a lock path whose parent is a file is an error (ENOTDIR), not busy', T, (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, 'file'), 'x');
  assert.equal(acquireInChild(path.join(dir, 'file', 'gpu.lock')), 'threw ENOTDIR');
});

test('meta.json holds exactly {"pid":<pid>,"startedAt":<ms>} with no newline', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const before = Date.now();
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  const after = Date.now();
  t.after(() => h.release());
  assert.deepEqual(fs.readdirSync(lock), ['meta.json'], 'meta.json is the only entry');
  const raw = fs.readFileSync(path.join(lock, 'meta.json'), 'utf8');
  const m = META_RE.exec(raw);
  assert.ok(m, `unexpected meta bytes: ${JSON.stringify(raw)}`);
  assert.equal(Number(m[1]), process.pid);
  const startedAt = Number(m[2]);
  assert.ok(startedAt >= before && startedAt <= after, `startedAt ${startedAt} not in [${before}, ${after}]`);
  assert.equal(raw, JSON.stringify({ pid: process.pid, startedAt }));
});

test('busy: acquire returns null once waitMs has passed, polling meanwhile', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  const start = Date.now();
  const r = await acquireGpuLock({ lockPath: lock, waitMs: 1500 });
  const elapsed = Date.now() - start;
  assert.equal(r, null);
  assert.ok(elapsed >= 1400, `returned after ${elapsed} ms, before waitMs`);
  assert.ok(elapsed < 15000, `returned after ${elapsed} ms, far too late`);
});

test('busy with waitMs 0 returns null without sleeping a poll interval', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  // A poll's sleep would make every try last at least 1000 ms; a busy machine
  // may stall one try as long, but not the fastest of three.
  let fastest = Infinity;
  for (let k = 0; k < 3; k++) {
    const start = Date.now();
    assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 0 }), null);
    fastest = Math.min(fastest, Date.now() - start);
  }
  assert.ok(fastest < 900, `waitMs 0 took at least ${fastest} ms: it slept a poll interval`);
});

test('a waiter takes the lock after the holder releases', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  let settled = false;
  const pending = acquireGpuLock({ lockPath: lock, waitMs: 20000 }).then((r) => { settled = true; return r; });
  assert.equal(settled, false);
  h.release();
  const h2 = await pending;
  assert.ok(h2, 'waiter should get the lock');
  h2.release();
});

test('release is idempotent: a second call does nothing, even to a later holder', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h1 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  h1.release();
  assert.equal(fs.existsSync(lock), false);
  assert.doesNotThrow(() => h1.release());

  const h2 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(h2);
  h1.release(); // already released once: must not touch h2's lock
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')), 'second release of h1 removed h2 lock');
  h2.release();
  assert.equal(fs.existsSync(lock), false);
});

test('release never throws, even when the lock is already gone', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  fs.rmSync(lock, { recursive: true });
  assert.doesNotThrow(() => h.release());
});

test('DEFECT D3: release deletes a lock that now belongs to someone else', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const ttlMs = 60 * 60 * 1000;
  const a = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs });
  // A's lock looks older than the TTL, so B reclaims it while A still runs.
  backdate(lock, 2 * ttlMs);
  assert.equal(isStale(lock, ttlMs), true);
  const b = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs });
  assert.ok(b, 'B reclaims the TTL-expired lock');
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')));

  a.release(); // A has no idea; v1 removes the directory regardless of owner
  assert.equal(fs.existsSync(lock), false, 'v1 release removed B\'s lock (the documented defect D3)');
  b.release();
});

test('DEFECT D3: release deletes a lock recreated by another process by hand', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const a = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  fs.rmSync(lock, { recursive: true });
  fs.mkdirSync(lock);
  fs.writeFileSync(path.join(lock, 'meta.json'), JSON.stringify({ pid: 1, startedAt: Date.now() }));
  a.release();
  assert.equal(fs.existsSync(lock), false);
});
