// inspect(), acquireSync() and releaseSync().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { acquireGpuLock, acquireSync, inspect, releaseSync } from '../index.mjs';
import { INDEX_URL, T, cleanEnv, deadPid, makeLock, nodeEvalSync, readMetaFile, tempDir, waitFor } from './helpers.mjs';

const SLOT_KEYS = ['path', 'held', 'pid', 'startedAt', 'heldForMs', 'label', 'host', 'token', 'stale', 'ownerUid',
  'v1Stale', 'otherPidNamespace', 'busy', 'busyBy', 'gpu', 'device', 'priority', 'expectMs', 'freeInMs', 'maxHoldMs', 'maxHoldInMs',
  'idleSince', 'idleForMs', 'yieldRequested'];
const KEYS = [...SLOT_KEYS, 'slots', 'waiters', 'gpulease'].sort();

test('inspect on a free lock: held false, every other value null (or false)', T, (t) => {
  const dir = tempDir(t);
  const lock = path.join(dir, 'gpu.lock');
  // No gpulease root (whatever this machine has): its member is null.
  const saved = process.env.OFFLOAD_LOCK_LEASE_ROOT;
  process.env.OFFLOAD_LOCK_LEASE_ROOT = path.join(dir, 'no-lease-root');
  t.after(() => {
    if (saved === undefined) delete process.env.OFFLOAD_LOCK_LEASE_ROOT;
    else process.env.OFFLOAD_LOCK_LEASE_ROOT = saved;
  });
  const s = inspect(lock);
  assert.deepEqual(Object.keys(s).sort(), KEYS);
  const slot = {
    path: lock, held: false, pid: null, startedAt: null, heldForMs: null,
    label: null, host: null, token: null, stale: null, ownerUid: null, v1Stale: null, otherPidNamespace: false,
    busy: false, busyBy: null, gpu: 0, device: null, priority: null, expectMs: null, freeInMs: 0, maxHoldMs: null, maxHoldInMs: null,
    idleSince: null, idleForMs: null,
    yieldRequested: null,
  };
  assert.deepEqual(s, { ...slot, slots: [slot], waiters: [], gpulease: null });
});

test('inspect lists the offload-lock processes waiting for the lock, in queue order', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'holder' });
  const first = acquireGpuLock({ lockPath: lock, label: 'first-in-line' });
  await waitFor(() => inspect(lock).waiters.length === 1, { what: 'the first waiter to register' });
  const second = acquireGpuLock({ lockPath: lock, label: 'second-in-line' });
  await waitFor(() => inspect(lock).waiters.length === 2, { what: 'the second waiter to register' });
  const s = inspect(lock);
  assert.deepEqual(s.waiters.map((w) => w.label), ['first-in-line', 'second-in-line']);
  for (const w of s.waiters) {
    assert.equal(typeof w.pid, 'number');
    assert.equal(w.host, os.hostname());
    assert.ok(w.since <= Date.now() && w.waitedMs >= 0, JSON.stringify(w));
    assert.equal(w.gpu, null);
    assert.equal(w.gpus, 1);
    assert.equal(w.priority, 0);
    assert.equal(w.expectMs, null);
    assert.equal(w.etaMs, null, 'the holder declared no duration');
  }
  assert.deepEqual(s.waiters.map((w) => w.position), [1, 2]);
  // Each releases as soon as it holds.
  const done = [first, second].map((p) => p.then((held) => held.release()));
  h.release();
  await Promise.all(done);
  assert.deepEqual(inspect(lock).waiters, []);
});

test('inspect on a held lock: who, since when, label, host, token, not stale', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const before = Date.now();
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'inspect-test' });
  t.after(() => h.release());
  const s = inspect(lock);
  assert.deepEqual(Object.keys(s).sort(), KEYS);
  assert.deepEqual(Object.keys(s.slots[0]).sort(), [...SLOT_KEYS].sort());
  assert.deepEqual(s.waiters, []);
  assert.equal(s.ownerUid, process.getuid());
  assert.equal(s.path, lock);
  assert.equal(s.held, true);
  assert.equal(s.pid, h.pid);
  assert.equal(typeof s.startedAt, 'number');
  assert.ok(s.startedAt >= before - 1000 && s.startedAt <= Date.now() + 1000, `startedAt ${s.startedAt}`);
  assert.equal(typeof s.heldForMs, 'number');
  assert.ok(s.heldForMs >= 0 && s.heldForMs < 60000, `heldForMs ${s.heldForMs}`);
  assert.equal(s.label, 'inspect-test');
  assert.equal(s.host, os.hostname());
  assert.equal(s.token, h.token);
  assert.equal(s.stale, null);
});

test('inspect on a lock whose holder is dead: stale is a reason string', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const pid = deadPid();
  makeLock(lock, JSON.stringify({ pid, startedAt: Date.now() }));
  const s = inspect(lock);
  assert.equal(s.pid, pid);
  assert.equal(typeof s.stale, 'string');
  assert.ok(s.stale.length > 0);
});

test('inspect on a v1 lock (meta.json with pid and startedAt only)', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  // As gpu-lock.mjs writes it: startedAt is taken after the holder started.
  const startedAt = Date.now();
  makeLock(lock, JSON.stringify({ pid: process.pid, startedAt }));
  const s = inspect(lock);
  assert.equal(s.held, true);
  assert.equal(s.pid, process.pid);
  assert.equal(s.startedAt, startedAt);
  assert.equal(s.stale, null);
  assert.equal(s.token, null);
});

test('inspect reports a system error as a thrown Error with the exit code', T, (t) => {
  const dir = tempDir(t);
  fs.writeFileSync(path.join(dir, 'file'), 'x');
  // A lock path below a regular file cannot be inspected; whatever the CLI
  // decides, inspect must either return an object or throw an Error.
  try {
    const s = inspect(path.join(dir, 'file', 'gpu.lock'));
    assert.equal(typeof s.held, 'boolean');
  } catch (err) {
    assert.ok(err instanceof Error);
    assert.equal(typeof err.exitCode, 'number');
  }
});

test('acquireSync records this process as holder and returns the token', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const token = acquireSync({ lockPath: lock, waitMs: 0, label: 'sync-test' });
  // (Before the temporary directory goes: a missing parent is an error.)
  t.after(() => fs.existsSync(path.dirname(lock)) && releaseSync({ lockPath: lock, token }));
  assert.equal(typeof token, 'string');
  assert.match(token, /^\S+$/);
  const meta = readMetaFile(lock);
  assert.equal(meta.pid, process.pid);
  assert.equal(meta.token, token);
  const s = inspect(lock);
  assert.equal(s.held, true);
  assert.equal(s.pid, process.pid);
  assert.equal(s.label, 'sync-test');
  assert.equal(s.stale, null);
});

test('acquireSync returns null when busy after the wait', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  assert.equal(acquireSync({ lockPath: lock, waitMs: 0 }), null);
  const start = Date.now();
  assert.equal(acquireSync({ lockPath: lock, waitMs: 300 }), null);
  assert.ok(Date.now() - start >= 250);
  assert.equal(readMetaFile(lock).token, h.token);
});

test('acquireSync throws on a system error', T, (t) => {
  const lock = path.join(tempDir(t), 'missing', 'gpu.lock');
  assert.throws(() => acquireSync({ lockPath: lock, waitMs: 0 }), (err) => err.exitCode === 4);
});

test('releaseSync: not-owner leaves the lock, released frees it, then free', T, (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const token = acquireSync({ lockPath: lock, waitMs: 0 });
  t.after(() => fs.existsSync(path.dirname(lock)) && releaseSync({ lockPath: lock, token }));
  assert.equal(releaseSync({ lockPath: lock, token: 'not-the-token' }), 'not-owner');
  assert.equal(inspect(lock).held, true);
  assert.equal(readMetaFile(lock).token, token);
  assert.equal(releaseSync({ lockPath: lock, token }), 'released');
  assert.equal(fs.existsSync(lock), false);
  assert.equal(inspect(lock).held, false);
  assert.equal(releaseSync({ lockPath: lock, token }), 'free');
});

test('releaseSync with a token does not remove a later holder', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const token = acquireSync({ lockPath: lock, waitMs: 0 });
  assert.equal(releaseSync({ lockPath: lock, token }), 'released');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  assert.equal(releaseSync({ lockPath: lock, token }), 'not-owner');
  assert.equal(readMetaFile(lock).token, h.token);
});

test('releaseSync without a token releases only a lock this process holds', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  acquireSync({ lockPath: lock, waitMs: 0 });
  assert.equal(releaseSync({ lockPath: lock }), 'released');
  assert.equal(inspect(lock).held, false);
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  assert.equal(releaseSync({ lockPath: lock }), 'not-owner');
  assert.equal(inspect(lock).held, true);
});

test('a lock taken with acquireSync by a process that died is released or stale, and can be taken', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const r = nodeEvalSync(`
    import { acquireSync } from ${JSON.stringify(INDEX_URL)};
    console.log(acquireSync({ lockPath: ${JSON.stringify(lock)}, waitMs: 0 }));
  `, { env: cleanEnv() });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^\S+\n$/, 'a token was printed');
  // Nobody called releaseSync: the holder's death must free the lock, either
  // by removal or by the lock being judged stale.
  await waitFor(() => !fs.existsSync(lock) || typeof inspect(lock).stale === 'string',
    { timeoutMs: 15000, what: 'dead holder\'s lock to be removed or stale' });
  assert.equal(inspect(lock).held, false);
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(h, 'a dead holder\'s lock should be taken');
  h.release();
});

test('releaseSync: a lock freed between the status check and the release counts as free', T, (t) => {
  // A stand-in CLI that reports the lock held by token "other" and then, as
  // if the holder released in between, answers the release with exit 0.
  const dir = tempDir(t);
  const fake = path.join(dir, 'offload-lock');
  fs.writeFileSync(fake, `#!/bin/sh
case " $* " in
  *" status "*) echo '{"path":"/x","held":true,"pid":1,"startedAt":1,"heldForMs":1,"label":null,"host":null,"token":"other","stale":null}'; exit 0;;
  *" release "*) exit 0;;
esac
exit 2
`, { mode: 0o755 });
  const r = nodeEvalSync(`
    import { releaseSync } from ${JSON.stringify(INDEX_URL)};
    console.log(releaseSync({ lockPath: '/x', token: 'mine' }));
    console.log(releaseSync({ lockPath: '/x', token: 'other' }));
  `, { env: cleanEnv({ OFFLOAD_LOCK_BIN: fake }) });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(r.stdout.trim().split('\n'), ['free', 'released']);
});
