// The command-line driver, the default path rule and the D1 write window.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import { acquireGpuLock } from './gpu-lock-v1.mjs';
import { T, RUNNER, deadPid, makeLock, nodeThinksAlive, runRunner, tempDir, waitFor } from './helpers.mjs';

const cleanEnv = (extra) => {
  const env = { ...process.env };
  for (const k of ['GPU_LOCK', 'TMPDIR', 'TMP', 'TEMP', 'GPU_LOCK_WAIT_MS', 'GPU_LOCK_V1_WRITE_DELAY_MS']) delete env[k];
  return { ...env, ...extra };
};
const runSync = (args, env) => spawnSync(process.execPath, [RUNNER, ...args], { env: env || cleanEnv(), encoding: 'utf8', timeout: 20000 });

test('hold: prints `acquired <pid>`, holds until stdin EOF, releases, prints `released`', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const r = runRunner(['hold', '--lock', lock, '--wait-ms', '0'], { env: cleanEnv(), t });
  const line = await r.waitLine(/^acquired /);
  assert.equal(line, `acquired ${r.child.pid}`);
  const m = JSON.parse(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8'));
  assert.equal(m.pid, r.child.pid);

  const busy = runSync(['hold', '--lock', lock, '--wait-ms', '0']);
  assert.equal(busy.status, 1);
  assert.equal(busy.stdout, 'busy\n');

  r.child.stdin.end();
  const exit = await r.waitExit();
  assert.deepEqual(exit, { code: 0, signal: null });
  assert.deepEqual(r.lines, [`acquired ${r.child.pid}`, 'released']);
  assert.equal(fs.existsSync(lock), false);
});

test('hold: SIGTERM releases and exits 0', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const r = runRunner(['hold', '--lock', lock, '--wait-ms', '0'], { env: cleanEnv(), t });
  await r.waitLine(/^acquired /);
  r.child.kill('SIGTERM');
  const exit = await r.waitExit();
  assert.deepEqual(exit, { code: 0, signal: null });
  assert.equal(r.lines.at(-1), 'released');
  assert.equal(fs.existsSync(lock), false);
});

test('hold: GPU_LOCK_WAIT_MS is the wait when --wait-ms is absent', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  const r = runSync(['hold', '--lock', lock], cleanEnv({ GPU_LOCK_WAIT_MS: '0' }));
  assert.equal(r.status, 1);
  assert.equal(r.stdout, 'busy\n');
});

test('hold: a thrown error prints one stderr line and exits 4', T, (t) => {
  const lock = path.join(tempDir(t), 'missing', 'gpu.lock');
  const r = runSync(['hold', '--lock', lock, '--wait-ms', '0']);
  assert.equal(r.status, 4);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^[^\n]*ENOENT[^\n]*\n$/);
});

test('hold: bad usage exits 2', T, () => {
  assert.equal(runSync(['hold', '--wait-ms', 'soon']).status, 2);
  assert.equal(runSync(['frobnicate']).status, 2);
  assert.equal(runSync([]).status, 2);
});

test('inspect: prints isStale and the parsed meta', T, async (t) => {
  const dir = tempDir(t);
  const lock = path.join(dir, 'gpu.lock');
  const inspect = (extra = []) => {
    const r = runSync(['inspect', '--lock', lock, ...extra]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^[^\n]*\n$/, 'one line');
    return JSON.parse(r.stdout);
  };
  assert.deepEqual(inspect(), { stale: true, meta: null }, 'no lock at all');

  makeLock(lock, JSON.stringify({ pid: process.pid, startedAt: 5 }));
  assert.deepEqual(inspect(), { stale: false, meta: { pid: process.pid, startedAt: 5 } });
  const old = new Date(Date.now() - 10 * 60 * 1000);
  fs.utimesSync(path.join(lock, 'meta.json'), old, old);
  assert.deepEqual(inspect(['--ttl-ms', '60000']), { stale: true, meta: { pid: process.pid, startedAt: 5 } });
  assert.equal(inspect().stale, false, 'default TTL is one hour');

  fs.writeFileSync(path.join(lock, 'meta.json'), JSON.stringify({ pid: deadPid(), startedAt: 5 }));
  assert.equal(inspect().stale, true);
  fs.writeFileSync(path.join(lock, 'meta.json'), 'null');
  assert.deepEqual(inspect(), { stale: true, meta: null });
  fs.writeFileSync(path.join(lock, 'meta.json'), '[]');
  assert.deepEqual(inspect(), { stale: false, meta: [] });
});

test('path: GPU_LOCK first, then os.tmpdir() (TMPDIR, TMP, TEMP, /tmp)', T, async (t) => {
  const cases = [
    { env: {}, want: '/tmp/local-offload-gpu.lock' },
    { env: { TMPDIR: '/a' }, want: '/a/local-offload-gpu.lock' },
    { env: { TMPDIR: '/a/' }, want: '/a/local-offload-gpu.lock' },
    { env: { TMPDIR: '', TMP: '/b' }, want: '/b/local-offload-gpu.lock' },
    { env: { TMP: '/b', TEMP: '/c' }, want: '/b/local-offload-gpu.lock' },
    { env: { TEMP: '/c' }, want: '/c/local-offload-gpu.lock' },
    { env: { TMPDIR: '/a', TMP: '/b', TEMP: '/c' }, want: '/a/local-offload-gpu.lock' },
    { env: { GPU_LOCK: '/x/my.lock', TMPDIR: '/a' }, want: '/x/my.lock' },
    { env: { GPU_LOCK: '', TMPDIR: '/a' }, want: '/a/local-offload-gpu.lock' },
    { env: { GPU_LOCK: 'relative.lock' }, want: 'relative.lock' },
  ];
  for (const c of cases) {
    await t.test(JSON.stringify(c.env), () => {
      const r = runSync(['path'], cleanEnv(c.env));
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, `${c.want}\n`);
    });
  }
});

test('write-delay knob: during the delay the directory exists without meta.json', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const r = runRunner(['hold', '--lock', lock, '--wait-ms', '0'], {
    env: cleanEnv({ GPU_LOCK_V1_WRITE_DELAY_MS: '2000' }), t,
  });
  await waitFor(() => fs.existsSync(lock), { what: 'lock directory' });
  // The first sighting of the directory is inside the 2 s window.
  assert.equal(fs.existsSync(path.join(lock, 'meta.json')), false, 'meta.json written before the delay');
  assert.deepEqual(r.lines, [], 'acquired printed before meta.json was written');
  await r.waitLine(/^acquired /);
  assert.equal(JSON.parse(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8')).pid, r.child.pid);
  r.child.stdin.end();
  await r.waitExit();
});

test('DEFECT D1: a second acquirer inside the write window reclaims, and both believe they hold', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const a = runRunner(['hold', '--lock', lock, '--wait-ms', '0'], {
    env: cleanEnv({ GPU_LOCK_V1_WRITE_DELAY_MS: '2000' }), t,
  });
  await waitFor(() => fs.existsSync(lock), { what: 'lock directory' });
  // No meta.json yet: v1 judges the lock stale, removes it and takes it.
  const b = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  assert.ok(b, 'B reclaimed the meta-less lock of A');
  await a.waitLine(/^acquired /);
  assert.ok(b && a.lines.length === 1, 'both A and B now hold the lock');
  // A's late write overwrote B's meta.json.
  assert.equal(JSON.parse(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8')).pid, a.child.pid);
  assert.ok(nodeThinksAlive(a.child.pid));
  a.child.stdin.end();
  await a.waitExit();
  b.release();
});
