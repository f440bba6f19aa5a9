// The named error codes and exit codes, and index.d.ts against index.mjs:
// every export is declared, the declared constants are the real values, and
// every error the package throws carries a `code` that index.d.ts declares.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import * as pkg from '../index.mjs';
import { DEFAULT_TTL_MS, DEFAULT_WAIT_MS, acquireGpuLock, acquireSync, exitCodes, findBinary, inspect, releaseSync, withGpuLock } from '../index.mjs';
import { PKG_DIR, T, tempDir } from './helpers.mjs';

const DTS = fs.readFileSync(path.join(PKG_DIR, 'index.d.ts'), 'utf8');

// The string literals of `export type NAME = 'a' | 'b' ...;` in index.d.ts.
function declaredUnion(name) {
  const m = DTS.match(new RegExp(`export type ${name} =([^;]*);`));
  assert.ok(m, `index.d.ts declares ${name}`);
  return [...m[1].matchAll(/'([^']*)'/g)].map((x) => x[1]);
}

const ERROR_CODES = declaredUnion('ErrorCode');

// An offload-lock stand-in: a shell script, used through OFFLOAD_LOCK_BIN for
// the rest of the test.
function fakeBinary(t, script) {
  const p = path.join(tempDir(t), 'offload-lock');
  fs.writeFileSync(p, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  const before = process.env.OFFLOAD_LOCK_BIN;
  process.env.OFFLOAD_LOCK_BIN = p;
  t.after(() => {
    if (before === undefined) delete process.env.OFFLOAD_LOCK_BIN;
    else process.env.OFFLOAD_LOCK_BIN = before;
  });
  return p;
}

// Asserts err is an Error with that code, and a declared one.
function hasCode(err, code) {
  assert.ok(err instanceof Error, String(err));
  assert.equal(err.code, code, err.message);
  assert.ok(ERROR_CODES.includes(err.code), `${err.code} is declared in index.d.ts`);
  return true;
}

// And, for a failed run of the command, its exit code, signal and stderr.
function isCommandError(err, code, { exitCode, signal = null, stderr }) {
  hasCode(err, code);
  assert.equal(err.exitCode, exitCode);
  assert.equal(err.signal, signal);
  assert.equal(typeof err.stderr, 'string');
  if (stderr) assert.match(err.stderr, stderr);
  return true;
}

test('exitCodes is the CLI table, frozen', T, () => {
  assert.deepEqual({ ...exitCodes }, { ok: 0, busy: 1, usage: 2, notOwner: 3, system: 4, lost: 5 });
  assert.deepEqual(Object.keys(exitCodes), ['ok', 'busy', 'usage', 'notOwner', 'system', 'lost']);
  assert.ok(Object.isFrozen(exitCodes));
});

test('index.d.ts declares every export of index.mjs, and only those', T, () => {
  const declared = [...DTS.matchAll(/^export declare (?:const|function) (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual([...new Set(declared)].sort(), Object.keys(pkg).sort());
});

test('index.d.ts declares the real values of the constants', T, () => {
  const literal = (name) => Number(DTS.match(new RegExp(`export declare const ${name}: (\\d+);`))[1]);
  assert.equal(literal('DEFAULT_WAIT_MS'), DEFAULT_WAIT_MS);
  assert.equal(literal('DEFAULT_TTL_MS'), DEFAULT_TTL_MS);
  const block = DTS.match(/export declare const exitCodes: Readonly<\{([^}]*)\}>/)[1];
  const declared = Object.fromEntries([...block.matchAll(/(\w+): (\d+);/g)].map((m) => [m[1], Number(m[2])]));
  assert.deepEqual(declared, { ...exitCodes });
});

test('package.json points TypeScript at index.d.ts', T, () => {
  const json = JSON.parse(fs.readFileSync(path.join(PKG_DIR, 'package.json'), 'utf8'));
  assert.equal(json.types, './index.d.ts');
  assert.deepEqual(json.exports, { '.': { types: './index.d.ts', default: './index.mjs' } });
  assert.ok(json.files.includes('index.d.ts'));
});

test('EBUSY: withGpuLock when the lock stays busy', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const h = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  t.after(() => h.release());
  await assert.rejects(withGpuLock({ lockPath: lock, waitMs: 0 }, () => {}), (err) => hasCode(err, 'EBUSY'));
});

test('ENOENT: no offload-lock binary, from findBinary and from every call', T, async (t) => {
  const nowhere = path.join(tempDir(t), 'no', 'offload-lock');
  const before = process.env.OFFLOAD_LOCK_BIN;
  process.env.OFFLOAD_LOCK_BIN = nowhere;
  t.after(() => { process.env.OFFLOAD_LOCK_BIN = before; });
  assert.throws(() => findBinary(), (err) => hasCode(err, 'ENOENT'));
  assert.throws(() => inspect(), (err) => hasCode(err, 'ENOENT'));
  assert.throws(() => acquireSync({ waitMs: 0 }), (err) => hasCode(err, 'ENOENT'));
  await assert.rejects(acquireGpuLock({ waitMs: 0 }), (err) => hasCode(err, 'ENOENT'));
});

test('ERR_INVALID_ARG_VALUE: a waitMs or ttlMs that is not a duration, before the CLI runs', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  for (const bad of [{ waitMs: -1 }, { waitMs: NaN }, { waitMs: '5m' }, { ttlMs: -5 }]) {
    assert.throws(() => acquireSync({ lockPath: lock, ...bad }), (err) => err instanceof TypeError && hasCode(err, 'ERR_INVALID_ARG_VALUE'));
    await assert.rejects(acquireGpuLock({ lockPath: lock, ...bad }), (err) => err instanceof TypeError && hasCode(err, 'ERR_INVALID_ARG_VALUE'));
  }
  assert.equal(fs.existsSync(lock), false);
});

test('ERR_OFFLOAD_LOCK_USAGE: the CLI rejects the arguments (a TTL of 0)', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const usage = { exitCode: exitCodes.usage, stderr: /ttl/i };
  assert.throws(() => acquireSync({ lockPath: lock, waitMs: 0, ttlMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_USAGE', usage));
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0, ttlMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_USAGE', usage));
});

test('ERR_OFFLOAD_LOCK_SYSTEM: a missing parent directory', T, async (t) => {
  const lock = path.join(tempDir(t), 'missing', 'gpu.lock');
  const system = { exitCode: exitCodes.system, stderr: /No such file or directory/ };
  assert.throws(() => acquireSync({ lockPath: lock, waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_SYSTEM', system));
  await assert.rejects(acquireGpuLock({ lockPath: lock, waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_SYSTEM', system));
});

test('ERR_OFFLOAD_LOCK_NOT_OWNER and _LOST: those outcomes where the call cannot go on', T, (t) => {
  fakeBinary(t, `echo 'offload-lock: not yours' >&2; exit ${exitCodes.notOwner}`);
  assert.throws(() => inspect(), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_NOT_OWNER', { exitCode: 3, stderr: /not yours/ }));
  fakeBinary(t, `echo 'offload-lock: lost' >&2; exit ${exitCodes.lost}`);
  assert.throws(() => acquireSync({ waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_LOST', { exitCode: 5, stderr: /lost/ }));
});

test('ERR_OFFLOAD_LOCK_FAILED: killed, an unexpected status, unreadable output', T, async (t) => {
  fakeBinary(t, 'kill -KILL $$');
  assert.throws(() => inspect(), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: null, signal: 'SIGKILL' }));
  await assert.rejects(acquireGpuLock({ waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: null, signal: 'SIGKILL' }));

  fakeBinary(t, 'exit 9');
  assert.throws(() => releaseSync({ token: 'x' }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: 9 }));
  await assert.rejects(acquireGpuLock({ waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: 9 }));

  fakeBinary(t, 'echo "acquired {not json"; cat >/dev/null');
  await assert.rejects(acquireGpuLock({ waitMs: 0 }), (err) => {
    isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: null });
    assert.ok(err.cause instanceof Error);
    return true;
  });
  fakeBinary(t, 'echo "{"');
  assert.throws(() => inspect(), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: null }));
  fakeBinary(t, 'exit 0');
  assert.throws(() => acquireSync({ waitMs: 0 }), (err) => isCommandError(err, 'ERR_OFFLOAD_LOCK_FAILED', { exitCode: null }));
});

test('every declared code is one the package really uses', T, () => {
  const src = ['index.mjs', 'errors.mjs', 'handle.mjs'].map((f) => fs.readFileSync(path.join(PKG_DIR, f), 'utf8')).join('\n');
  for (const code of ERROR_CODES) assert.ok(src.includes(`'${code}'`), `${code} appears in the package's modules`);
  assert.equal(ERROR_CODES.length, new Set(ERROR_CODES).size, 'no code declared twice');
});
