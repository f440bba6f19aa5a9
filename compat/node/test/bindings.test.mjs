// GPU slots, the holder named in EBUSY, an async release and
// Symbol.asyncDispose, onLost when the hold child dies or the lock is taken
// away, and a Node process that dies while waiting: all against the real
// offload-lock binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock, findBinary, inspect, withGpuLock } from '../index.mjs';
import { INDEX_URL, T, cleanEnv, gone, nodeEval, readMetaFile, tempDir, waitFor } from './helpers.mjs';

test('gpus and gpu: the first free of N slots, or slot K; the handle says which', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const a = await acquireGpuLock({ lockPath: lock, waitMs: 0, gpus: 2, label: 'slot-a' });
  t.after(() => a && a.release());
  const b = await acquireGpuLock({ lockPath: lock, waitMs: 0, gpus: 2, label: 'slot-b' });
  t.after(() => b && b.release());
  assert.deepEqual([a.gpu, b.gpu].sort(), [0, 1]);
  assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 0, gpus: 2 }), null, 'both slots held');
  const slot1 = a.gpu === 1 ? a : b;
  assert.equal(slot1.path, `${lock}.gpu1`);
  assert.equal(readMetaFile(`${lock}.gpu1`).pid, slot1.pid);
  slot1.release();
  const k = await acquireGpuLock({ lockPath: lock, waitMs: 0, gpu: 1, label: 'slot-k' });
  t.after(() => k && k.release());
  assert.equal(k.gpu, 1);
  assert.equal(k.path, `${lock}.gpu1`);
  for (const bad of [{ gpus: 0 }, { gpus: 'all' }, { gpu: -1 }, { gpu: 1.5 }]) {
    await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0, ...bad }), { code: 'ERR_INVALID_ARG_VALUE' });
  }
});

test('EBUSY names the holder as the command does', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'render-video' });
  t.after(() => h.release());
  await assert.rejects(withGpuLock({ lockPath: lock, waitMs: 100 }, () => assert.fail('fn ran')), (err) => {
    assert.equal(err.code, 'EBUSY');
    assert.match(err.message, new RegExp(`^GPU lock busy: timed out: ${lock.replace(/[.]/g, '\\.')} is held by ` +
      `render-video \\(pid ${h.pid}, host [^)]+\\) for \\d+`));
    return true;
  });
});

test('releaseAsync and Symbol.asyncDispose release without blocking; the hold child is gone after', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.equal(await h.releaseAsync(), true);
  assert.equal(fs.existsSync(lock), false);
  assert.ok(gone(h.pid));
  assert.equal(await h.releaseAsync(), true, 'idempotent');
  h.release(); // and the synchronous one after it does nothing

  // What `await using lock = await acquireGpuLock(...)` calls at the end of its block.
  const d = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.equal(typeof d[Symbol.asyncDispose], 'function');
  assert.equal(typeof d[Symbol.dispose], 'function');
  await d[Symbol.asyncDispose]();
  assert.equal(inspect(lock).held, false);
  assert.ok(gone(d.pid));
});

test('onLost: the hold child is killed while holding', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const lost = [];
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, onLost: (err) => lost.push(err) });
  assert.equal(h.lost, null);
  process.kill(h.pid, 'SIGKILL');
  await waitFor(() => lost.length === 1, { what: 'onLost' });
  assert.equal(lost[0].code, 'ERR_OFFLOAD_LOCK_LOST');
  assert.equal(lost[0].signal, 'SIGKILL');
  assert.match(lost[0].message, /hold child \(pid \d+\) holding .* was killed by SIGKILL; the lock is no longer held/);
  assert.equal(h.lost, lost[0]);
  h.release();
  assert.equal(lost.length, 1, 'told once');
});

test('onLost: the lock is removed by someone else while held', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const lost = [];
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, onLost: (err) => lost.push(err) });
  t.after(() => h.release());
  const r = spawnSync(findBinary(), ['--lock', lock, 'release', '--force'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  await waitFor(() => lost.length === 1, { timeoutMs: 30000, what: 'onLost after release --force' });
  assert.equal(lost[0].code, 'ERR_OFFLOAD_LOCK_LOST');
  assert.match(lost[0].message, /was removed or replaced by someone else/);
});

test('withGpuLock rejects with the loss when the lock was lost while fn ran', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  await assert.rejects(withGpuLock({ lockPath: lock, waitMs: 0 }, async (h) => {
    process.kill(h.pid, 'SIGKILL');
    await waitFor(() => h.lost !== null, { what: 'the loss' });
    return 'done';
  }), { code: 'ERR_OFFLOAD_LOCK_LOST' });
});

test('a Node process that dies while waiting: its hold child gives up the wait at once and takes nothing', T,
  async (t) => {
    const lock = path.join(tempDir(t), 'gpu.lock');
    const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'holder' });
    t.after(() => h.release());
    const waiter = nodeEval(`
      import { acquireGpuLock } from ${JSON.stringify(INDEX_URL)};
      console.log('waiting');
      await acquireGpuLock({ lockPath: ${JSON.stringify(lock)}, waitMs: Infinity, label: 'doomed' });
    `, { env: cleanEnv(), t });
    await waiter.waitLine(/^waiting/, 30000);
    await waitFor(() => inspect(lock).waiters.some((w) => w.label === 'doomed'), { what: 'the waiting hold child' });
    const holdPid = inspect(lock).waiters.find((w) => w.label === 'doomed').pid;
    waiter.child.kill('SIGKILL');
    await waiter.waitExit();
    // Its stdin closed: the hold child leaves the queue and exits, long
    // before any wait would end, and never takes the lock.
    await waitFor(() => gone(holdPid), { timeoutMs: 15000, what: 'the hold child to give up' });
    assert.deepEqual(inspect(lock).waiters, []);
    assert.equal(readMetaFile(lock).pid, h.pid, 'the holder is unchanged');
  });
