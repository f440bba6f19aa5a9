// Staleness rules of the v1 stand-in and reclaiming a stale lock.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock, isStale, readMeta } from './gpu-lock-v1.mjs';
import { T, backdate, deadPid, makeLock, nodeThinksAlive, tempDir } from './helpers.mjs';

const HOUR = 60 * 60 * 1000;
const meta = (pid) => JSON.stringify({ pid, startedAt: Date.now() });
const ownPidInMeta = (lock) => JSON.parse(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8')).pid;

test('readMeta returns the parsed meta and the mtime, or null', T, (t) => {
  const dir = tempDir(t);
  const lock = path.join(dir, 'gpu.lock');
  assert.equal(readMeta(lock), null, 'no directory');
  makeLock(lock, meta(process.pid));
  const r = readMeta(lock);
  assert.equal(r.meta.pid, process.pid);
  assert.equal(typeof r.mtimeMs, 'number');
  assert.equal(r.mtimeMs, fs.statSync(path.join(lock, 'meta.json')).mtimeMs);
});

test('a held lock of a live pid with a fresh mtime is not stale', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, meta(process.pid));
  assert.equal(isStale(lock, HOUR), false);
});

test('stale by dead pid: judged stale and reclaimed', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const pid = deadPid();
  assert.equal(nodeThinksAlive(pid), false, 'the reaped `true` process should be gone');
  makeLock(lock, meta(pid));
  assert.equal(isStale(lock, HOUR), true);
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR });
  assert.ok(h, 'stale lock should be reclaimed');
  assert.equal(ownPidInMeta(lock), process.pid);
  h.release();
});

test('stale by TTL: an old mtime is stale even while the pid lives', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, meta(process.pid));
  assert.equal(isStale(lock, HOUR), false);
  backdate(lock, 2 * HOUR);
  assert.equal(isStale(lock, HOUR), true);
  assert.equal(isStale(lock, 3 * HOUR), false, 'TTL is compared with the mtime age');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR });
  assert.ok(h, 'TTL-expired lock should be reclaimed');
  const st = fs.statSync(path.join(lock, 'meta.json'));
  assert.ok(Date.now() - st.mtimeMs < HOUR, 'fresh meta.json after reclaim');
  h.release();
});

test('TTL is judged on the mtime, not on startedAt', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, JSON.stringify({ pid: process.pid, startedAt: 0 }));
  assert.equal(isStale(lock, HOUR), false);
});

test('string pid: no liveness check, TTL only', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, JSON.stringify({ pid: String(deadPid()), startedAt: Date.now() }));
  assert.equal(isStale(lock, HOUR), false, 'a dead pid given as a string is not checked');
  assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR }), null);
  backdate(lock, 2 * HOUR);
  assert.equal(isStale(lock, HOUR), true);
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR });
  assert.ok(h);
  h.release();
});

test('missing pid: no liveness check, TTL only', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, JSON.stringify({ startedAt: Date.now() }));
  assert.equal(isStale(lock, HOUR), false);
  backdate(lock, 2 * HOUR);
  assert.equal(isStale(lock, HOUR), true);
});

test('non-integer or out-of-int32 pid: Node throws ERR_INVALID_ARG_TYPE, so stale', T, async (t) => {
  for (const bad of ['1.5', String(2 ** 31), '1e300', '-2147483649']) {
    await t.test(`pid ${bad}`, async (t2) => {
      const lock = path.join(tempDir(t2), 'gpu.lock');
      makeLock(lock, `{"pid":${bad},"startedAt":${Date.now()}}`);
      assert.throws(() => process.kill(Number(bad), 0), { code: 'ERR_INVALID_ARG_TYPE' });
      assert.equal(isStale(lock, HOUR), true);
      const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR });
      assert.ok(h);
      h.release();
    });
  }
});

test('pid 0 and negative pids are judged as process.kill(pid, 0) judges them', T, async (t) => {
  // kill(0, 0) targets our own process group: always alive -> TTL only.
  // kill(-1, 0) targets every process we may signal: alive as root.
  // A negative pid naming no process group fails with ESRCH: stale.
  for (const pid of [0, -1, -2147483647]) {
    await t.test(`pid ${pid}`, (t2) => {
      const lock = path.join(tempDir(t2), 'gpu.lock');
      makeLock(lock, meta(pid));
      assert.equal(isStale(lock, HOUR), !nodeThinksAlive(pid));
    });
  }
  assert.equal(nodeThinksAlive(0), true, 'pid 0 is our own process group');
  const lock = path.join(tempDir(t), 'gpu.lock');
  makeLock(lock, meta(0));
  assert.equal(isStale(lock, HOUR), false, 'pid 0 is never judged dead');
  backdate(lock, 2 * HOUR);
  assert.equal(isStale(lock, HOUR), true, 'pid 0 still goes stale by TTL');
});

test('falsy or unreadable meta is stale; truthy meta without a pid falls back to TTL', T, async (t) => {
  const cases = [
    { name: 'no meta.json', text: undefined, stale: true },
    { name: 'empty file', text: '', stale: true },
    { name: 'garbage', text: '{"pid":12', stale: true },
    { name: 'not json', text: 'hello', stale: true },
    { name: 'null', text: 'null', stale: true },
    { name: 'false', text: 'false', stale: true },
    { name: '0', text: '0', stale: true },
    { name: 'empty string', text: '""', stale: true },
    { name: '[]', text: '[]', stale: false },
    { name: '{}', text: '{}', stale: false },
    { name: 'true', text: 'true', stale: false },
    { name: '"x"', text: '"x"', stale: false },
    { name: 'pid null', text: '{"pid":null}', stale: false },
  ];
  for (const c of cases) {
    await t.test(c.name, async (t2) => {
      const lock = path.join(tempDir(t2), 'gpu.lock');
      makeLock(lock, c.text);
      assert.equal(isStale(lock, HOUR), c.stale);
      const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: HOUR });
      if (c.stale) {
        assert.ok(h, 'stale lock should be reclaimed');
        assert.equal(ownPidInMeta(lock), process.pid);
        h.release();
      } else {
        assert.equal(h, null, 'fresh lock without a pid is busy until the TTL');
        backdate(lock, 2 * HOUR);
        assert.equal(isStale(lock, HOUR), true);
      }
    });
  }
});

test('a lock directory that vanished is stale (readMeta null)', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  assert.equal(isStale(lock, HOUR), true);
});
