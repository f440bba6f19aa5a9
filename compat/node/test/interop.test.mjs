// compat/node next to an unmodified v1 runner (the reference stand-in).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock, inspect } from '../index.mjs';
import * as v1 from '../../../tests/interop/reference/gpu-lock-v1.mjs';
import { RUNNER, T, childPids, cleanEnv, readMetaFile, spawnTracked, tempDir, waitFor } from './helpers.mjs';

function startReference(t, lock, extraArgs = [], env = cleanEnv()) {
  return spawnTracked(process.execPath, [RUNNER, 'hold', '--lock', lock, ...extraArgs], { env, t });
}

test('while compat/node holds, the v1 runner cannot take the lock', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'compat' });
  t.after(() => h.release());

  // v1's own view of the lock: a live pid, a fresh meta.json -> not stale.
  assert.equal(v1.isStale(lock, 60 * 60 * 1000), false);
  assert.equal(v1.readMeta(lock).meta.pid, h.pid);

  // In-process v1 acquire, a short wait.
  assert.equal(await v1.acquireGpuLock({ lockPath: lock, waitMs: 1200 }), null);

  // A separate v1 runner process.
  const ref = startReference(t, lock, ['--wait-ms', '1200']);
  const exit = await ref.waitExit(30000);
  assert.equal(exit.code, 1, ref.stderr);
  assert.deepEqual(ref.lines, ['busy']);

  assert.equal(readMetaFile(lock).token, h.token, 'compat/node still holds the lock');
  assert.equal(inspect(lock).pid, h.pid);
});

test('once compat/node releases, the v1 runner takes the lock at once', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  h.release();
  const v = await v1.acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(v, 'v1 should take the freed lock');
  assert.equal(readMetaFile(lock).pid, process.pid);
  v.release();
});

test('while the v1 runner holds, compat/node waits and gets the lock after its release', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const ref = startReference(t, lock, ['--wait-ms', '0']);
  const line = await ref.waitLine(/^acquired /);
  assert.equal(line, `acquired ${ref.child.pid}`);

  const s = inspect(lock);
  assert.equal(s.held, true);
  assert.equal(s.pid, ref.child.pid);
  assert.equal(s.stale, null);

  assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 300 }), null, 'busy after a short wait');

  let settled = false;
  const pending = acquireGpuLock({ lockPath: lock, waitMs: 60000, label: 'after-v1' })
    .then((h) => { settled = true; return h; });
  // Find the waiter's `offload-lock hold` process, then watch it for a while:
  // it must keep waiting (not settle) while v1 holds. The window counts from
  // the moment the process exists, so a slow spawn cannot shrink it.
  await waitFor(() => childPids(['hold', 'after-v1']).length === 1, { what: 'the waiting hold process' });
  const watchFrom = Date.now();
  await waitFor(() => settled || Date.now() - watchFrom >= 1500, { what: 'observation window' });
  assert.equal(settled, false, 'compat/node settled while v1 still held the lock');
  assert.equal(readMetaFile(lock).pid, ref.child.pid);

  const releasedAfter = Date.now();
  ref.child.stdin.end(); // v1 releases
  const exit = await ref.waitExit();
  assert.equal(exit.code, 0, ref.stderr);
  assert.deepEqual(ref.lines, [`acquired ${ref.child.pid}`, 'released']);

  const h = await pending;
  t.after(() => h && h.release());
  assert.ok(h, 'compat/node should get the lock after v1 released it');
  assert.ok(h.info.startedAt >= releasedAfter,
    `compat/node took the lock at ${h.info.startedAt}, before v1 was told to release at ${releasedAfter}`);
  assert.equal(readMetaFile(lock).pid, h.pid);
  assert.equal(inspect(lock).label, 'after-v1');

  // And v1 now sees it as held.
  assert.equal(v1.isStale(lock, 60 * 60 * 1000), false);
  assert.equal(await v1.acquireGpuLock({ lockPath: lock, waitMs: 0 }), null);
});

test('compat/node takes over a v1 lock whose holder died', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const ref = startReference(t, lock, ['--wait-ms', '0']);
  await ref.waitLine(/^acquired /);
  ref.child.kill('SIGKILL'); // v1 leaves its directory behind
  await ref.waitExit();
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')), 'v1 left the lock behind');
  assert.equal(v1.isStale(lock, 60 * 60 * 1000), true);

  const h = await acquireGpuLock({ lockPath: lock, waitMs: 5000 });
  assert.ok(h, 'stale v1 lock should be taken over');
  assert.equal(readMetaFile(lock).pid, h.pid);
  h.release();
});

test('a v1 runner judges a compat/node lock whose hold child was killed stale, and reclaims it', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  assert.equal(await v1.acquireGpuLock({ lockPath: lock, waitMs: 0 }), null, 'the live hold child counts as holder');
  process.kill(h.pid, 'SIGKILL'); // the holder dies without releasing
  // This process is the hold child's parent, so it reaps it: wait until the
  // pid is really gone (not merely a zombie, which v1 would count as alive).
  await waitFor(() => {
    try { process.kill(h.pid, 0); return false; } catch (err) { return err.code === 'ESRCH'; }
  }, { what: `hold child ${h.pid} to be reaped` });
  assert.ok(fs.existsSync(path.join(lock, 'meta.json')), 'nobody released the lock');
  assert.equal(v1.isStale(lock, 60 * 60 * 1000), true, 'v1 must see the dead pid in meta.json');
  const v = await v1.acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(v, 'v1 reclaims the stale lock');
  assert.equal(readMetaFile(lock).pid, process.pid);
  v.release();
});
