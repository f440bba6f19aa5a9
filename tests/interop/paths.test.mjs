// Path rules across participants (doc/protocol.md A1, D7):
// for combinations of TMPDIR, TMP, TEMP and GPU_LOCK, these all name the same
// lock directory:
//   - plain Node: GPU_LOCK || path.join(os.tmpdir(), 'local-offload-gpu.lock')
//     (the existing runners' rule),
//   - `offload-lock path` (C++),
//   - compat/node defaultLockPath(),
//   - the v1 reference runner's defaultLockPath(),
// and the Go reader (`gpulock-inspect` without PATH prints its path) names the
// same one too, except exactly where Go's os.TempDir ignores TMP/TEMP (GPU_LOCK
// and TMPDIR empty or unset, TMP or TEMP set): there Go names
// /tmp/local-offload-gpu.lock, and `offload-lock path --explain` says so on a
// line starting `go: <Go's path>`.
//
// Run: node --test tests/interop/paths.test.mjs (after scripts/build).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { BIN, BOUND_MS, COMPAT, GO_INSPECT, HERE, cleanEnv } from './harness.mjs';

const NAME = 'local-offload-gpu.lock';
const V1 = path.join(HERE, 'reference', 'gpu-lock-v1.mjs');

// Each case: the variables set ('' = set but empty; absent = unset).
const CASES = [
  {},
  { TMPDIR: '/x/tmpdir' },
  { TMPDIR: '/x/tmpdir/' },
  { TMPDIR: '/x//tmpdir//' },
  { TMPDIR: '/' },
  { TMPDIR: '' },
  { TMPDIR: 'relative/tmpdir' },
  { TMP: '/x/tmp' },
  { TMP: '/x/tmp/' },
  { TEMP: '/x/temp' },
  { TMP: '/x/tmp', TEMP: '/x/temp' },
  { TMPDIR: '', TMP: '/x/tmp' },
  { TMPDIR: '', TMP: '', TEMP: '/x/temp' },
  { TMP: '', TEMP: '' },
  { TMPDIR: '/x/tmpdir', TMP: '/x/tmp' },
  { TMPDIR: '/x/tmpdir', TEMP: '/x/temp' },
  { TMPDIR: '/x/tmpdir', TMP: '/x/tmp', TEMP: '/x/temp' },
  { GPU_LOCK: '/x/gpu.lock' },
  { GPU_LOCK: '/x//odd/../gpu.lock/' }, // used as is by everyone, not cleaned
  { GPU_LOCK: '/x/gpu.lock', TMP: '/x/tmp' },
  { GPU_LOCK: '/x/gpu.lock', TMPDIR: '/x/tmpdir', TEMP: '/x/temp' },
  { GPU_LOCK: '', TMP: '/x/tmp' },
  { GPU_LOCK: '', TMPDIR: '/x/tmpdir' },
  { GPU_LOCK: '', TEMP: '/x/temp/' },
];

// The Go rule, independently: GPU_LOCK, else filepath.Join(TMPDIR or /tmp, NAME).
function goRule(env) {
  if (env.GPU_LOCK) return env.GPU_LOCK;
  return path.join(env.TMPDIR || '/tmp', NAME); // path.join cleans like filepath.Join here
}

function run(cmd, args, env) {
  const r = spawnSync(cmd, args, { env: cleanEnv(env), encoding: 'utf8', timeout: BOUND_MS });
  if (r.error) throw r.error;
  return r;
}

function nodePaths(env) {
  const script = `
    import os from 'node:os';
    import path from 'node:path';
    import { defaultLockPath as compat } from ${JSON.stringify(pathToFileURL(COMPAT).href)};
    import { defaultLockPath as v1 } from ${JSON.stringify(pathToFileURL(V1).href)};
    const plain = process.env.GPU_LOCK || path.join(os.tmpdir(), ${JSON.stringify(NAME)});
    process.stdout.write(JSON.stringify({ plain, compat: compat(), v1: v1() }));`;
  const r = run(process.execPath, ['--input-type=module', '-e', script], env);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
}

const show = (env) => (Object.keys(env).length ? Object.entries(env).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(' ') : '(none set)');

describe('interop path rules', { concurrency: 4 }, () => {
  for (const env of CASES) {
    it(show(env), { timeout: 3 * BOUND_MS }, () => {
      const node = nodePaths(env);
      const expected = node.plain;
      assert.equal(node.compat, expected, 'compat/node defaultLockPath()');
      assert.equal(node.v1, expected, 'reference runner defaultLockPath()');

      const cli = run(BIN, ['path'], env);
      assert.equal(cli.status, 0, cli.stderr);
      assert.equal(cli.stdout, `${expected}\n`, 'offload-lock path');

      const go = run(GO_INSPECT, [], env);
      assert.ok(go.status === 0 || go.status === 1, go.stderr);
      const goPath = JSON.parse(go.stdout).path;
      assert.equal(goPath, goRule(env), 'the Go reader follows the Go rule');

      const splitCase = !env.GPU_LOCK && !env.TMPDIR && !!(env.TMP || env.TEMP);
      if (splitCase) {
        assert.equal(goPath, `/tmp/${NAME}`);
        assert.notEqual(goPath, expected, 'TMP/TEMP only: Go resolves another path (D7)');
      } else {
        assert.equal(goPath, expected, 'Go agrees with Node here');
      }

      const explain = run(BIN, ['path', '--explain'], env);
      assert.equal(explain.status, 0, explain.stderr);
      const lines = explain.stdout.split('\n');
      assert.equal(lines[0], expected, 'path --explain: first line is the path');
      const goLine = lines.find((l) => l.startsWith('go: '));
      if (splitCase) {
        assert.ok(goLine && goLine.startsWith(`go: ${goPath} `), `path --explain must name Go's path ${goPath}: ${JSON.stringify(explain.stdout)}`);
      } else {
        assert.ok(!goLine || !goLine.startsWith('go: /'), `path --explain reports a disagreement that is not there: ${JSON.stringify(explain.stdout)}`);
      }

      const json = run(BIN, ['--json', 'path'], env);
      assert.equal(json.status, 0, json.stderr);
      const j = JSON.parse(json.stdout);
      assert.deepEqual({ path: j.path, goPath: j.goPath, goDisagrees: j.goDisagrees },
        { path: expected, goPath, goDisagrees: splitCase }, 'offload-lock --json path');
    });
  }
});
