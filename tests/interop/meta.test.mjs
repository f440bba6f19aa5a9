// meta.json across participants (doc/protocol.md B2): the
// meta.json each participant writes starts with exactly
// {"pid":<N>,"startedAt":<13 digits>, names the recorded holder, and reads the
// same to every reader: the Go reader, the v1 rules, `offload-lock status`,
// the library's inspect (and its predictions of the Node and Go verdicts), and
// compat/node's inspect().
//
// Run: node --test tests/interop/meta.test.mjs (after scripts/build).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import {
  BOUND_MS, COMPAT, KINDS, KIND_NAMES, cleanEnv, cliStatus, goInspect, libInspect, refInspect, startParticipant, tempDir,
} from './harness.mjs';

const PREFIX = /^\{"pid":([1-9]\d*),"startedAt":(\d{13})/;

function compatInspect(lock) {
  const script = `import { inspect } from ${JSON.stringify(pathToFileURL(COMPAT).href)};
    process.stdout.write(JSON.stringify(inspect(${JSON.stringify(lock)})));`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { env: cleanEnv(), encoding: 'utf8', timeout: BOUND_MS });
  if (r.status !== 0) throw new Error(`compat/node inspect: ${r.stderr}`);
  return JSON.parse(r.stdout);
}

describe('interop meta.json: written by one, read identically by all', { concurrency: 3 }, () => {
  for (const kind of KINDS) {
    it(`${KIND_NAMES[kind]} writes it`, { timeout: 3 * BOUND_MS }, async (t) => {
      const dir = tempDir(t, `meta-${kind}-`);
      const lock = path.join(dir, 'gpu.lock');
      const label = `meta-${kind}`;
      const h = startParticipant(kind, lock, { t, label });
      await h.acquired();
      const before = Date.now();

      const raw = fs.readFileSync(path.join(lock, 'meta.json'), 'utf8');
      const m = PREFIX.exec(raw);
      assert.ok(m, `meta.json does not start with {"pid":N,"startedAt":<13 digits>: ${JSON.stringify(raw)}`);
      const pid = Number(m[1]);
      const startedAt = Number(m[2]);
      assert.equal(pid, h.recordedPid, `meta.json names pid ${pid}, the holder is ${h.recordedPid}`);
      assert.ok(startedAt <= before && startedAt > before - 60000, `startedAt ${startedAt} is not a recent epoch ms`);
      const meta = JSON.parse(raw); // the whole file is one JSON object
      assert.deepEqual(Object.keys(meta).slice(0, 2), ['pid', 'startedAt']);
      if (kind === 'ref') {
        assert.equal(raw, `{"pid":${pid},"startedAt":${startedAt}}`, 'the v1 runner writes exactly two keys');
      } else {
        assert.equal(raw[m[0].length], ',', 'offload-lock carries its extra keys after the two v1 keys');
        assert.equal(meta.label, label);
        assert.match(meta.token, /^[0-9a-f]{32}$/);
      }

      const go = goInspect(lock);
      assert.deepEqual({ held: go.held, pid: go.pid, startedAt: go.startedAt, label: go.label },
        { held: true, pid, startedAt, label: meta.label ?? '' }, `Go reader: ${JSON.stringify(go)}`);

      const ref = refInspect(lock);
      assert.equal(ref.stale, false, `v1 rules: ${JSON.stringify(ref)}`);
      assert.deepEqual(ref.meta, meta, 'the v1 rules parse the same object');

      const cli = cliStatus(lock);
      assert.deepEqual({ held: cli.held, pid: cli.pid, startedAt: cli.startedAt, label: cli.label, token: cli.token },
        { held: true, pid, startedAt, label: meta.label ?? null, token: meta.token ?? null }, `offload-lock status: ${JSON.stringify(cli)}`);

      const lib = libInspect(lock);
      assert.deepEqual({ held: lib.held, pid: lib.pid, startedAt: lib.startedAt, nodeStale: lib.nodeStale, goHeld: lib.goHeld },
        { held: true, pid, startedAt, nodeStale: ref.stale, goHeld: go.held }, `library inspect: ${JSON.stringify(lib)}`);

      const compat = compatInspect(lock);
      assert.deepEqual({ held: compat.held, pid: compat.pid, startedAt: compat.startedAt },
        { held: true, pid, startedAt }, `compat/node inspect: ${JSON.stringify(compat)}`);

      await h.release();
      assert.equal(fs.existsSync(lock), false, 'the release removed the lock');
    });
  }
});
