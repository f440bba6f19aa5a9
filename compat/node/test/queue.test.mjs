// The queue from Node: priorities across Node and CLI waiters, aborting a
// wait, and onProgress, against the real offload-lock binary.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock, acquireSync, findBinary, inspect, releaseSync, withGpuLock } from '../index.mjs';
import { T, childPids, gone, spawnTracked, tempDir, waitFor } from './helpers.mjs';

// `offload-lock --json status` run here, independently of inspect().
function cliStatus(lock) {
  const r = spawnSync(findBinary(), ['--lock', lock, '--json', 'status'], { encoding: 'utf8' });
  assert.ok(r.status === 0 || r.status === 1, `status exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

// What is left of the lock's queue registry: the names in its user
// directories, and anything else in it (none when the registry is gone).
function entries(lock) {
  const dir = path.join(path.dirname(lock), `.${path.basename(lock)}.queue`);
  let users;
  try {
    users = fs.readdirSync(dir, { withFileTypes: true });
  } catch (err) {
    if (err.code === 'ENOENT') return [];
    throw err;
  }
  return users.flatMap((u) => (u.isDirectory() ? fs.readdirSync(path.join(dir, u.name)).map((n) => `${u.name}/${n}`) : [u.name]));
}

async function waitForWaiters(lock, n) {
  return waitFor(() => {
    const ws = inspect(lock).waiters;
    return ws.length >= n ? ws : null;
  }, { timeoutMs: 15000, what: `${n} waiter(s) on ${lock}` });
}

test('priority orders Node and CLI waiters alike; inspect shows the queue', T, async (t) => {
  const dir = tempDir(t, 'ol-queue-');
  const lock = path.join(dir, 'gpu.lock');
  const served = path.join(dir, 'served');
  const holder = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'holder', priority: 3, expectMs: 120000 });
  t.after(() => holder.release());

  const status = inspect(lock);
  assert.equal(status.priority, 3);
  assert.equal(status.expectMs, 120000);
  assert.ok(status.freeInMs > 100000 && status.freeInMs <= 120000, `freeInMs ${status.freeInMs}`);
  assert.equal(status.yieldRequested, null);

  // Each waiter is in the queue before the next one arrives.
  const serve = (h, label) => {
    fs.appendFileSync(served, `${label}\n`);
    h.release();
  };
  const batch = acquireGpuLock({ lockPath: lock, waitMs: 60000, label: 'node-batch', priority: 'batch' })
    .then((h) => serve(h, 'node-batch'));
  await waitForWaiters(lock, 1);
  const cli = spawnTracked(findBinary(), ['--lock', lock, 'run', '--wait', '60s', '--label', 'cli-5', '--priority', '5',
    '--expect', '30s', '--', 'sh', '-c', 'echo "$0" >> "$1"', 'cli-5', served], { t });
  await waitForWaiters(lock, 2);
  const interactive = acquireGpuLock({ lockPath: lock, waitMs: 60000, label: 'node-int', priority: 'interactive', expectMs: 60000 })
    .then((h) => serve(h, 'node-int'));
  const ws = await waitForWaiters(lock, 3);

  assert.deepEqual(ws.map((w) => [w.label, w.position, w.priority, w.expectMs]),
    [['node-int', 1, 10, 60000], ['cli-5', 2, 5, 30000], ['node-batch', 3, -10, null]]);
  assert.equal(ws[1].pid, cli.child.pid);
  // ETAs: the holder's expected free time plus the durations declared ahead.
  assert.ok(ws[0].etaMs > 100000 && ws[0].etaMs <= 120000, `etaMs ${ws[0].etaMs}`);
  assert.ok(ws[1].etaMs - ws[0].etaMs >= 59000 && ws[1].etaMs - ws[0].etaMs <= 61000, `etaMs ${ws[1].etaMs}`);
  assert.ok(ws[2].etaMs - ws[1].etaMs >= 29000 && ws[2].etaMs - ws[1].etaMs <= 31000, `etaMs ${ws[2].etaMs}`);
  assert.deepEqual(cliStatus(lock).waiters.map((w) => w.label), ['node-int', 'cli-5', 'node-batch']);

  holder.release();
  await Promise.all([batch, interactive, cli.waitExit(30000)]);
  assert.equal(cli.exit.code, 0, cli.stderr);
  assert.deepEqual(fs.readFileSync(served, 'utf8').trim().split('\n'), ['node-int', 'cli-5', 'node-batch']);
  assert.equal(inspect(lock).held, false);
  assert.deepEqual(inspect(lock).waiters, []);
});

test('acquireSync takes priority and expectMs into meta.json', T, (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const token = acquireSync({ lockPath: lock, waitMs: 0, priority: 'interactive', expectMs: 90000 });
  try {
    const s = inspect(lock);
    assert.equal(s.priority, 10);
    assert.equal(s.expectMs, 90000);
  } finally {
    assert.equal(releaseSync({ lockPath: lock, token }), 'released');
  }
});

test('bad priority and expectMs are refused before anything runs', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  for (const bad of [{ priority: 101 }, { priority: -101 }, { priority: 1.5 }, { priority: 'urgent' }, { priority: '5' },
    { expectMs: -1 }, { expectMs: Infinity }, { expectMs: '1m' }]) {
    const refused = (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE';
    await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0, ...bad }), refused, JSON.stringify(bad));
    assert.throws(() => acquireSync({ lockPath: lock, waitMs: 0, ...bad }), refused, JSON.stringify(bad));
  }
  await assert.rejects(acquireGpuLock({ lockPath: lock, signal: {} }), (err) => err.code === 'ERR_INVALID_ARG_VALUE');
  await assert.rejects(acquireGpuLock({ lockPath: lock, onProgress: 1 }), (err) => err.code === 'ERR_INVALID_ARG_VALUE');
  assert.equal(fs.existsSync(lock), false);
});

test('aborting a wait rejects with AbortError and leaves no lock and no queue entry', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const holder = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'holder' });
  t.after(() => holder.release());

  const ac = new AbortController();
  const waiting = acquireGpuLock({ lockPath: lock, waitMs: Infinity, label: 'abort-me', signal: ac.signal });
  const [w] = await waitForWaiters(lock, 1);
  assert.equal(w.label, 'abort-me');
  const reason = new Error('the user went home');
  ac.abort(reason);
  await assert.rejects(waiting, (err) => err.name === 'AbortError' && err.code === 'ABORT_ERR' && err.cause === reason);

  // By the time it rejects the child is gone, and with it its entry.
  assert.ok(gone(w.pid), `hold child ${w.pid} still running`);
  const s = cliStatus(lock);
  assert.deepEqual(s.waiters, []);
  assert.equal(s.pid, holder.pid, 'the holder is unchanged');
  assert.deepEqual(entries(lock), []);
  holder.release();
  assert.equal(cliStatus(lock).held, false, 'the aborted waiter took the lock');
  assert.equal(fs.existsSync(lock), false);
});

test('an already aborted signal rejects at once without starting offload-lock', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const ac = new AbortController();
  ac.abort();
  const start = Date.now();
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'never-started', signal: ac.signal }),
    (err) => err.name === 'AbortError' && err.code === 'ABORT_ERR');
  assert.ok(Date.now() - start < 1000);
  assert.deepEqual(childPids(['never-started']), []);
  assert.equal(fs.existsSync(lock), false);
  // withGpuLock rejects the same way, without calling fn.
  let called = false;
  await assert.rejects(withGpuLock({ lockPath: lock, signal: ac.signal }, () => { called = true; }), (err) => err.name === 'AbortError');
  assert.equal(called, false);
});

test('aborting after the lock is held changes nothing', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const ac = new AbortController();
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0, signal: ac.signal });
  t.after(() => h.release());
  ac.abort();
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(inspect(lock).held, true);
  assert.equal(inspect(lock).pid, h.pid);
});

test('onProgress reports the holder, the time waited and the queue position', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const holder = await acquireGpuLock({ lockPath: lock, waitMs: 0, label: 'holder', expectMs: 600000 });
  t.after(() => holder.release());

  // A waiter of a higher priority is ahead of the watcher.
  const ahead = acquireGpuLock({ lockPath: lock, waitMs: 60000, label: 'ahead', priority: 50 });
  await waitForWaiters(lock, 1);
  const events = [];
  const watching = acquireGpuLock({ lockPath: lock, waitMs: 60000, label: 'watcher', onProgress: (p) => events.push(p) });
  const first = await waitFor(() => events[0], { timeoutMs: 15000, what: 'a progress event' });
  assert.equal(first.event, 'waiting');
  assert.equal(first.changed, true);
  assert.equal(first.position, 2);
  assert.equal(typeof first.waitedMs, 'number');
  assert.equal(first.holders.length, 1);
  assert.equal(first.holders[0].label, 'holder');
  assert.equal(first.holders[0].pid, holder.pid);
  assert.equal(first.holders[0].expectMs, 600000);
  assert.ok(first.holders[0].freeInMs > 500000 && first.holders[0].freeInMs <= 600000, `freeInMs ${first.holders[0].freeInMs}`);

  // Reminders keep coming while nothing changes.
  const n = events.length;
  await waitFor(() => events.length > n, { timeoutMs: 5000, what: 'a periodic progress event' });
  assert.equal(events.at(-1).changed, false);
  assert.ok(events.at(-1).waitedMs >= first.waitedMs);

  // The holder leaves and the one ahead takes the lock: the watcher is next.
  holder.release();
  const aheadHandle = await ahead;
  t.after(() => aheadHandle.release());
  const next = await waitFor(() => events.find((e) => e.position === 1), { timeoutMs: 15000, what: 'a progress event at position 1' });
  assert.equal(next.changed, true);
  assert.equal(next.holders[0].label, 'ahead');
  aheadHandle.release();
  const mine = await watching;
  assert.ok(mine);
  const count = events.length;
  mine.release();
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal(events.length, count, 'onProgress called after the lock was held');
});

test('the --json progress stream is one JSON object per line, with no raw control characters', T, async (t) => {
  const lock = path.join(tempDir(t, 'ol-queue-'), 'gpu.lock');
  const label = 'evil\x1b[2J\r\x7f\u202e\u0085label';
  const holder = await acquireGpuLock({ lockPath: lock, waitMs: 0, label });
  t.after(() => holder.release());
  const waiter = spawnTracked(findBinary(), ['--lock', lock, '--json', 'hold', '--wait', '5s', '--remind', '100ms'], { t });
  await waitFor(() => waiter.stderr.split('\n').length > 3, { timeoutMs: 15000, what: 'three progress lines' });
  waiter.child.kill('SIGTERM');
  await waiter.waitExit();
  const lines = waiter.stderr.split('\n').filter((l) => l.startsWith('{'));
  assert.ok(lines.length >= 3, waiter.stderr);
  for (const line of lines) {
    assert.doesNotMatch(line, /[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]/, 'raw control character in the stream');
    const e = JSON.parse(line);
    assert.equal(e.event, 'waiting');
    assert.equal(e.holders[0].label, label);
    assert.equal(e.holders[0].pid, holder.pid);
  }
  assert.equal(JSON.parse(lines[0]).changed, true);
  assert.equal(JSON.parse(lines.at(-1)).changed, false);
});
