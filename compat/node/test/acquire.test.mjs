// acquireGpuLock / release / withGpuLock against the real offload-lock binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock, findBinary, inspect, withGpuLock } from '../index.mjs';
import {
  INDEX_URL, T, childPids, cleanEnv, gone, makeLock, nodeEvalSync, readMetaFile, spawnTracked, tempDir, waitFor, writeScript,
} from './helpers.mjs';

test('the offload-lock binary is found', T, () => {
  const bin = findBinary();
  assert.ok(fs.existsSync(bin), bin);
});

test('acquire: lock dir with meta.json naming the hold child; handle has token, path, pid', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'acq-test' });
  t.after(() => h && h.release());
  assert.ok(h, 'free lock should be taken');
  assert.equal(typeof h.release, 'function');
  assert.equal(typeof h.token, 'string');
  assert.ok(h.token.length > 0);
  assert.equal(h.path, lock);
  assert.equal(typeof h.pid, 'number');
  assert.notEqual(h.pid, process.pid, 'the holder is the hold child, not this process');
  assert.equal(gone(h.pid), false, 'the hold child is alive');

  assert.ok(fs.statSync(lock).isDirectory());
  const meta = readMetaFile(lock);
  assert.equal(meta.pid, h.pid);
  assert.equal(typeof meta.startedAt, 'number');
  assert.ok(Math.abs(Date.now() - meta.startedAt) < 60000);
  assert.equal(meta.token, h.token);
  assert.equal(meta.label, 'acq-test');
});

test('a second acquire with waitMs 300 resolves null', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  const start = Date.now();
  const second = await acquireGpuLock({ lockPath: lock, waitMs: 300 });
  assert.equal(second, null);
  assert.ok(Date.now() - start >= 250, 'returned before waitMs');
  assert.equal(readMetaFile(lock).pid, h.pid, 'the holder is unchanged');
});

test('release frees the lock before it returns, and the hold child exits', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.equal(inspect(lock).held, true);
  h.release();
  assert.equal(fs.existsSync(lock), false, 'lock directory still there right after release()');
  assert.equal(inspect(lock).held, false);
  await waitFor(() => gone(h.pid), { what: `hold child ${h.pid} to exit` });
});

test('release is idempotent and never touches a later holder', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h1 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  h1.release();
  assert.doesNotThrow(() => h1.release());
  const h2 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h2.release());
  assert.ok(h2);
  h1.release();
  assert.equal(inspect(lock).held, true);
  assert.equal(readMetaFile(lock).token, h2.token);
  h2.release();
  assert.equal(inspect(lock).held, false);
});

test('release never removes a lock that has meanwhile passed to someone else (v1 defect D3 fixed)', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h1 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  // The lock is taken away from h1 (an operator's forced release) and h2 takes it.
  const forced = spawnSync(findBinary(), ['--lock', lock, '--quiet', 'release', '--force'], { encoding: 'utf8' });
  assert.equal(forced.status, 0, forced.stderr);
  const h2 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h2.release());
  assert.ok(h2);
  h1.release(); // first release of h1: must leave h2's lock alone
  assert.equal(inspect(lock).held, true);
  assert.equal(readMetaFile(lock).token, h2.token);
  h2.release();
  assert.equal(inspect(lock).held, false);
});

test('a waiter gets the lock when the holder releases', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h1 = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  let settled = false;
  const pending = acquireGpuLock({ lockPath: lock, waitMs: 30000, label: 'waiter-test' })
    .then((h) => { settled = true; return h; });
  // Watch the waiting hold process for a while: it must not settle while h1 holds.
  await waitFor(() => childPids(['hold', 'waiter-test']).length === 1, { what: 'the waiting hold process' });
  const watchFrom = Date.now();
  await waitFor(() => settled || Date.now() - watchFrom >= 1500, { what: 'observation window' });
  assert.equal(settled, false, 'the waiter settled while h1 held the lock');
  assert.equal(readMetaFile(lock).token, h1.token);
  h1.release();
  const h2 = await pending;
  assert.ok(h2, 'waiter should take the lock');
  assert.notEqual(h2.token, h1.token);
  assert.equal(readMetaFile(lock).pid, h2.pid);
  h2.release();
});

test('withGpuLock runs fn under the lock and returns its value', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const v = await withGpuLock({ lockPath: lock, waitMs: 0 }, async (h) => {
    assert.equal(inspect(lock).held, true);
    assert.equal(readMetaFile(lock).token, h.token);
    return 42;
  });
  assert.equal(v, 42);
  assert.equal(inspect(lock).held, false);
});

test('withGpuLock releases when fn throws', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const boom = new Error('boom');
  await assert.rejects(withGpuLock({ lockPath: lock, waitMs: 0 }, async () => {
    assert.equal(inspect(lock).held, true);
    throw boom;
  }), (err) => err === boom);
  assert.equal(inspect(lock).held, false);
  assert.equal(fs.existsSync(lock), false);
});

test('withGpuLock throws EBUSY when the lock stays busy, without calling fn', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  let called = false;
  await assert.rejects(withGpuLock({ lockPath: lock, waitMs: 0 }, () => { called = true; }), (err) => err.code === 'EBUSY');
  assert.equal(called, false);
  assert.equal(readMetaFile(lock).token, h.token, 'busy attempt leaves the holder alone');
});

test('a system error rejects with the CLI stderr line and exit code (not busy)', T, async (t) => {
  const lock = path.join(tempDir(t), 'missing', 'gpu.lock');
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0 }), (err) => {
    assert.equal(err.exitCode, 4);
    assert.match(err.message, /No such file or directory|ENOENT/);
    assert.doesNotMatch(err.message, /\n/);
    return true;
  });
});

test('defaults: waitMs from GPU_LOCK_WAIT_MS, label from the script name', T, async (t) => {
  const dir = tempDir(t);
  const lock = path.join(dir, 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  const script = writeScript(dir, 'my-render-runner.mjs', `
    import { acquireGpuLock } from ${JSON.stringify(INDEX_URL)};
    const start = Date.now();
    const r = await acquireGpuLock({ lockPath: ${JSON.stringify(lock)} });
    console.log(JSON.stringify({ result: r === null ? null : 'handle', ms: Date.now() - start }));
    if (r) r.release();
  `);
  const run = spawnTracked(process.execPath, [script], { env: cleanEnv({ GPU_LOCK_WAIT_MS: '200' }), t });
  const exit = await run.waitExit(30000);
  assert.equal(exit.code, 0, run.stderr);
  const out = JSON.parse(run.lines[0]);
  assert.equal(out.result, null, 'GPU_LOCK_WAIT_MS=200 should make it give up');
  h.release();

  const labelled = writeScript(dir, 'label-runner.mjs', `
    import { acquireGpuLock, inspect } from ${JSON.stringify(INDEX_URL)};
    const h = await acquireGpuLock({ lockPath: ${JSON.stringify(lock)}, waitMs: 0 });
    console.log(JSON.stringify(inspect(${JSON.stringify(lock)})));
    h.release();
  `);
  const r2 = spawnTracked(process.execPath, [labelled], { env: cleanEnv(), t });
  assert.equal((await r2.waitExit(30000)).code, 0, r2.stderr);
  assert.equal(JSON.parse(r2.lines[0]).label, 'label-runner.mjs');

  const evalLabel = nodeEvalSync(`
    import { acquireGpuLock, inspect } from ${JSON.stringify(INDEX_URL)};
    const h = await acquireGpuLock({ lockPath: ${JSON.stringify(lock)}, waitMs: 0 });
    console.log(inspect(${JSON.stringify(lock)}).label);
    h.release();
  `, { env: cleanEnv() });
  assert.equal(evalLabel.status, 0, evalLabel.stderr);
  assert.equal(evalLabel.stdout.trim(), 'node', 'no script name: label node');
});

test('bad waitMs / ttlMs reject before anything is spawned', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: -1 }), TypeError);
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 'soon' }), TypeError);
  await assert.rejects(acquireGpuLock({ lockPath: lock, ttlMs: NaN }), TypeError);
  assert.equal(fs.existsSync(lock), false);
});

test('ttlMs reaches the CLI: a lock whose meta.json is older than ttlMs is taken over', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  // A v1-style holder that is alive (this process) but has not touched
  // meta.json for 10 minutes.
  makeLock(lock, JSON.stringify({ pid: process.pid, startedAt: Date.now() }));
  const old = new Date(Date.now() - 10 * 60 * 1000);
  fs.utimesSync(path.join(lock, 'meta.json'), old, old);
  assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 0 }), null, 'default TTL is one hour');
  assert.equal(await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: 20 * 60 * 1000 }), null);
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: 60 * 1000 });
  assert.ok(h, 'a 10-minute-old lock is stale under a 1-minute TTL');
  assert.equal(readMetaFile(lock).pid, h.pid);
  h.release();
});

test('release() after the hold child died does not throw or crash the process', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  process.kill(h.pid, 'SIGKILL');
  await waitFor(() => {
    try { process.kill(h.pid, 0); return false; } catch (err) { return err.code === 'ESRCH'; }
  }, { what: 'hold child to be reaped' });
  assert.doesNotThrow(() => h.release());
  // Give any asynchronous EPIPE a chance to surface as an uncaught error.
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(fs.existsSync(lock), false, 'release by token still removes our lock');
});
