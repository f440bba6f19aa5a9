// What happens to the lock when the Node process that holds it ends.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { inspect } from '../index.mjs';
import {
  INDEX_URL, T, cleanEnv, gone, nodeEval, pgidOf, readMetaFile, spawnTracked, tempDir, waitFor,
} from './helpers.mjs';

const holderScript = (lock, after) => `
  import { acquireGpuLock } from ${JSON.stringify(INDEX_URL)};
  const h = await acquireGpuLock({ lockPath: ${JSON.stringify(lock)}, waitMs: 0, label: 'lifetime' });
  if (!h) { console.log('busy'); process.exit(1); }
  console.log('held ' + JSON.stringify({ pid: h.pid, token: h.token }));
  ${after}
`;

async function startHolder(t, lock, after) {
  const child = nodeEval(holderScript(lock, after), { env: cleanEnv(), t });
  const line = await child.waitLine(/^held /, 30000);
  const info = JSON.parse(line.slice('held '.length));
  return { child, info };
}

test('a Node process killed with SIGKILL while holding: the lock is released', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const { child, info } = await startHolder(t, lock, 'setInterval(() => {}, 1000);');
  t.after(() => { if (!gone(info.pid)) process.kill(info.pid, 'SIGKILL'); });
  assert.equal(inspect(lock).held, true);
  assert.equal(readMetaFile(lock).pid, info.pid);
  assert.equal(gone(info.pid), false);

  child.child.kill('SIGKILL');
  const exit = await child.waitExit();
  assert.equal(exit.signal, 'SIGKILL');
  // The hold child sees EOF on its stdin and releases.
  await waitFor(() => !fs.existsSync(lock), { timeoutMs: 15000, what: 'lock release after SIGKILL' });
  assert.equal(inspect(lock).held, false);
  await waitFor(() => gone(info.pid), { timeoutMs: 15000, what: 'hold child exit' });
});

test('a Node process that simply finishes while holding is not kept alive, and the lock is released', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  // Nothing keeps the event loop busy after the acquire: the process must exit
  // on its own even though it never called release().
  const { child, info } = await startHolder(t, lock, '');
  t.after(() => { if (!gone(info.pid)) process.kill(info.pid, 'SIGKILL'); });
  const exit = await child.waitExit(15000);
  assert.deepEqual(exit, { code: 0, signal: null });
  await waitFor(() => !fs.existsSync(lock), { timeoutMs: 15000, what: 'lock release after exit' });
  await waitFor(() => gone(info.pid), { timeoutMs: 15000, what: 'hold child exit' });
});

test('a Node process that exits via process.exit() while holding releases the lock', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const { child, info } = await startHolder(t, lock, 'setInterval(() => {}, 1000); process.stdin.on("data", () => process.exit(3));');
  t.after(() => { if (!gone(info.pid)) process.kill(info.pid, 'SIGKILL'); });
  assert.equal(inspect(lock).held, true);
  child.child.stdin.write('go\n');
  const exit = await child.waitExit(15000);
  assert.equal(exit.code, 3);
  await waitFor(() => !fs.existsSync(lock), { timeoutMs: 15000, what: 'lock release after process.exit' });
});

test('an uncaught exception while holding releases the lock', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  const { child, info } = await startHolder(t, lock, 'setTimeout(() => { throw new Error("render crashed"); }, 0);');
  t.after(() => { if (!gone(info.pid)) process.kill(info.pid, 'SIGKILL'); });
  const exit = await child.waitExit(15000);
  assert.notEqual(exit.code, 0);
  await waitFor(() => !fs.existsSync(lock), { timeoutMs: 15000, what: 'lock release after crash' });
});

test('a SIGINT to the runner\'s process group does not release the lock while the runner lives', T, async (t) => {
  const lock = path.join(tempDir(t), 'gpu.lock');
  // The runner handles SIGINT itself (say, to finish the frame it renders) and
  // lives in its own process group, as a job started from a terminal would.
  const script = `process.on('SIGINT', () => console.log('sigint'));\n${holderScript(lock, 'setInterval(() => {}, 1000);')}`;
  const child = spawnTracked(process.execPath, ['--input-type=module', '-e', script], { env: cleanEnv(), t, detached: true });
  const line = await child.waitLine(/^held /, 30000);
  const info = JSON.parse(line.slice('held '.length));
  t.after(() => { if (!gone(info.pid)) process.kill(info.pid, 'SIGKILL'); });

  assert.equal(pgidOf(child.child.pid), child.child.pid, 'the runner leads its own process group');
  assert.notEqual(pgidOf(info.pid), child.child.pid, 'the hold child must not be in the runner\'s process group');

  process.kill(-child.child.pid, 'SIGINT'); // what Ctrl-C does to the foreground job
  await child.waitLine(/^sigint$/);
  assert.equal(gone(info.pid), false, 'the hold child must not have received the SIGINT');
  assert.equal(inspect(lock).held, true);
  assert.equal(readMetaFile(lock).pid, info.pid);

  child.child.kill('SIGKILL');
  await child.waitExit();
  await waitFor(() => !fs.existsSync(lock), { timeoutMs: 15000, what: 'lock release after the runner died' });
});
