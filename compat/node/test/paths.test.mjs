// defaultLockPath() against `offload-lock path`, and findBinary().
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { findBinary } from '../index.mjs';
import { INDEX, INDEX_URL, PKG_DIR, T, cleanEnv, nodeEvalSync, tempDir } from './helpers.mjs';

const BIN = findBinary();

const cases = [
  { env: {}, want: '/tmp/local-offload-gpu.lock' },
  { env: { TMPDIR: '/a' }, want: '/a/local-offload-gpu.lock' },
  { env: { TMPDIR: '/a/' }, want: '/a/local-offload-gpu.lock' },
  { env: { TMPDIR: '/a/b/' }, want: '/a/b/local-offload-gpu.lock' },
  { env: { TMPDIR: '', TMP: '/b' }, want: '/b/local-offload-gpu.lock' },
  { env: { TMP: '/b', TEMP: '/c' }, want: '/b/local-offload-gpu.lock' },
  { env: { TMPDIR: '', TMP: '', TEMP: '/c' }, want: '/c/local-offload-gpu.lock' },
  { env: { TEMP: '/c' }, want: '/c/local-offload-gpu.lock' },
  { env: { TMPDIR: '', TMP: '', TEMP: '' }, want: '/tmp/local-offload-gpu.lock' },
  { env: { TMPDIR: '/a', TMP: '/b', TEMP: '/c' }, want: '/a/local-offload-gpu.lock' },
  { env: { GPU_LOCK: '/x/my.lock', TMPDIR: '/a' }, want: '/x/my.lock' },
  { env: { GPU_LOCK: '/x/my.lock/', TMPDIR: '/a' }, want: '/x/my.lock/' },
  { env: { GPU_LOCK: '', TMPDIR: '/a' }, want: '/a/local-offload-gpu.lock' },
  { env: { GPU_LOCK: '', TMP: '/b' }, want: '/b/local-offload-gpu.lock' },
  { env: { GPU_LOCK: 'relative.lock' }, want: 'relative.lock' },
  { env: { TMPDIR: 'rel/dir' }, want: 'rel/dir/local-offload-gpu.lock' },
  { env: { TMPDIR: '//a//' }, want: '/a/local-offload-gpu.lock' },
  { env: { TMPDIR: '/' }, want: '/local-offload-gpu.lock' },
];

test('defaultLockPath() and `offload-lock path` agree under GPU_LOCK/TMPDIR/TMP/TEMP', T, async (t) => {
  for (const c of cases) {
    await t.test(JSON.stringify(c.env), () => {
      const env = cleanEnv(c.env);
      const fromNode = nodeEvalSync(
        `import { defaultLockPath } from ${JSON.stringify(INDEX_URL)}; process.stdout.write(defaultLockPath());`,
        { env },
      );
      assert.equal(fromNode.status, 0, fromNode.stderr);
      assert.equal(fromNode.stdout, c.want, 'Node rule');
      const fromCli = spawnSync(BIN, ['path'], { env, encoding: 'utf8', timeout: 30000 });
      assert.equal(fromCli.status, 0, fromCli.stderr);
      assert.equal(fromCli.stdout, `${c.want}\n`, '`offload-lock path`');
    });
  }
});

test('without lockPath, acquireGpuLock uses the same lock as defaultLockPath()', T, async (t) => {
  const dir = tempDir(t);
  const r = nodeEvalSync(`
    import fs from 'node:fs';
    import { acquireGpuLock, defaultLockPath } from ${JSON.stringify(INDEX_URL)};
    const h = await acquireGpuLock({ waitMs: 0 });
    console.log(JSON.stringify({ def: defaultLockPath(), path: h.path, exists: fs.existsSync(defaultLockPath() + '/meta.json') }));
    h.release();
    console.log(JSON.stringify({ after: fs.existsSync(defaultLockPath()) }));
  `, { env: cleanEnv({ TMPDIR: dir }) });
  assert.equal(r.status, 0, r.stderr);
  const [first, second] = r.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(first.def, path.join(dir, 'local-offload-gpu.lock'));
  assert.equal(first.path, first.def);
  assert.equal(first.exists, true);
  assert.equal(second.after, false);
});

// --- findBinary ------------------------------------------------------------

function fakeBinary(dir) {
  fs.mkdirSync(dir, { recursive: true });
  const p = path.join(dir, 'offload-lock');
  fs.writeFileSync(p, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  return p;
}

// A copy of index.mjs at <root>/compat/node/index.mjs, so that "the repo"
// is <root> and its build/ can be controlled.
function packageCopy(root) {
  const dir = path.join(root, 'compat', 'node');
  fs.mkdirSync(dir, { recursive: true });
  for (const f of ['index.mjs', 'errors.mjs', 'handle.mjs', 'package.json']) {
    fs.copyFileSync(path.join(PKG_DIR, f), path.join(dir, f));
  }
  return pathToFileURL(path.join(dir, 'index.mjs')).href;
}

function findIn(indexUrl, env) {
  const r = nodeEvalSync(`
    import { findBinary } from ${JSON.stringify(indexUrl)};
    try { console.log('found ' + findBinary()); } catch (err) { console.log('error ' + err.message); }
  `, { env });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.replace(/\n$/, '');
}

test('findBinary: OFFLOAD_LOCK_BIN pointing nowhere is an error naming all three places', T, (t) => {
  const dir = tempDir(t);
  const emptyPath = path.join(dir, 'empty-bin');
  fs.mkdirSync(emptyPath);
  const nowhere = path.join(dir, 'no', 'offload-lock');
  const out = findIn(INDEX_URL, cleanEnv({ OFFLOAD_LOCK_BIN: nowhere, PATH: emptyPath }));
  assert.match(out, /^error /);
  assert.doesNotMatch(out, /\n/, 'one-line message');
  assert.ok(out.includes('OFFLOAD_LOCK_BIN'), out);
  assert.ok(out.includes(nowhere), out);
  assert.ok(out.includes('PATH'), out);
  assert.ok(out.includes(path.resolve(PKG_DIR, '..', '..', 'build', 'offload-lock')), out);
});

test('findBinary: OFFLOAD_LOCK_BIN wins over PATH and the repo build', T, (t) => {
  const dir = tempDir(t);
  const chosen = fakeBinary(path.join(dir, 'chosen'));
  const onPath = fakeBinary(path.join(dir, 'onpath'));
  assert.equal(findIn(INDEX_URL, cleanEnv({ OFFLOAD_LOCK_BIN: chosen, PATH: path.dirname(onPath) })), `found ${chosen}`);
});

test('findBinary: OFFLOAD_LOCK_BIN naming a directory or a non-executable file is an error', T, (t) => {
  const dir = tempDir(t);
  const plain = path.join(dir, 'offload-lock');
  fs.writeFileSync(plain, 'not executable', { mode: 0o644 });
  for (const bad of [dir, plain]) {
    const out = findIn(INDEX_URL, cleanEnv({ OFFLOAD_LOCK_BIN: bad, PATH: '' }));
    assert.match(out, /^error /, `${bad}: ${out}`);
  }
});

test('findBinary: PATH is searched in order when OFFLOAD_LOCK_BIN is unset', T, (t) => {
  const dir = tempDir(t);
  const first = fakeBinary(path.join(dir, 'p1'));
  const second = fakeBinary(path.join(dir, 'p2'));
  const empty = path.join(dir, 'p0');
  fs.mkdirSync(empty);
  const env = cleanEnv({ PATH: [empty, path.dirname(first), path.dirname(second)].join(path.delimiter) });
  delete env.OFFLOAD_LOCK_BIN;
  assert.equal(findIn(INDEX_URL, env), `found ${first}`);
  env.OFFLOAD_LOCK_BIN = '';
  assert.equal(findIn(INDEX_URL, env), `found ${first}`, 'an empty OFFLOAD_LOCK_BIN counts as unset');
});

test('findBinary: falls back to <repo>/build/offload-lock, and errors when that is missing too', T, (t) => {
  const root = tempDir(t);
  const url = packageCopy(root);
  const emptyPath = path.join(root, 'empty-bin');
  fs.mkdirSync(emptyPath);
  const env = cleanEnv({ PATH: emptyPath });
  delete env.OFFLOAD_LOCK_BIN;

  const missing = findIn(url, env);
  assert.match(missing, /^error /);
  assert.doesNotMatch(missing, /\n/);
  assert.ok(missing.includes('OFFLOAD_LOCK_BIN'), missing);
  assert.ok(missing.includes('PATH'), missing);
  assert.ok(missing.includes(path.join(root, 'build', 'offload-lock')), missing);

  const built = fakeBinary(path.join(root, 'build'));
  assert.equal(findIn(url, env), `found ${built}`);

  const onPath = fakeBinary(path.join(root, 'onpath'));
  assert.equal(findIn(url, { ...env, PATH: path.dirname(onPath) }), `found ${onPath}`, 'PATH before the repo build');
});

test('acquireGpuLock rejects with the findBinary error when no binary exists', T, (t) => {
  const dir = tempDir(t);
  const r = nodeEvalSync(`
    import { acquireGpuLock } from ${JSON.stringify(INDEX_URL)};
    try { await acquireGpuLock({ lockPath: ${JSON.stringify(path.join(dir, 'gpu.lock'))}, waitMs: 0 }); console.log('no error'); }
    catch (err) { console.log('error ' + err.message); }
  `, { env: cleanEnv({ OFFLOAD_LOCK_BIN: path.join(dir, 'nope'), PATH: '' }) });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /^error offload-lock binary not found/);
  assert.equal(fs.existsSync(path.join(dir, 'gpu.lock')), false);
});
