// Shared helpers for the compat/node tests (not a test file itself).
// Process tracking and temp dirs come from the reference-runner helpers.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export { T, deadPid, makeLock, spawnTracked, tempDir, waitFor, RUNNER } from '../../../tests/interop/reference/helpers.mjs';
import { spawnTracked } from '../../../tests/interop/reference/helpers.mjs';

export const PKG_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const INDEX = path.join(PKG_DIR, 'index.mjs');
export const INDEX_URL = pathToFileURL(INDEX).href;
export const REFERENCE = path.resolve(PKG_DIR, '..', '..', 'tests', 'interop', 'reference', 'gpu-lock-v1.mjs');

// The environment without the variables that steer lock paths and waits.
export function cleanEnv(extra = {}) {
  const env = { ...process.env };
  for (const k of ['GPU_LOCK', 'TMPDIR', 'TMP', 'TEMP', 'GPU_LOCK_WAIT_MS', 'GPU_LOCK_V1_WRITE_DELAY_MS']) delete env[k];
  return { ...env, ...extra };
}

// Is the process gone (no such pid, or a zombie nobody reaped yet)?
export function gone(pid) {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return err.code !== 'EPERM';
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

export function readMetaFile(lock) {
  return JSON.parse(fs.readFileSync(path.join(lock, 'meta.json'), 'utf8'));
}

// Run an ES module snippet in a fresh node; `env` replaces the environment.
export function nodeEvalSync(script, { env, timeout = 30000 } = {}) {
  return spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    env: env || process.env, encoding: 'utf8', timeout,
  });
}

// Same, as a tracked child process (stdout lines, exit waiting).
export function nodeEval(script, { env, t } = {}) {
  return spawnTracked(process.execPath, ['--input-type=module', '-e', script], { env, t });
}

// Write a script file and return its path (for a real argv[1]).
export function writeScript(dir, name, text) {
  const p = path.join(dir, name);
  fs.writeFileSync(p, text);
  return p;
}

// Pids of this process's children whose command line contains every string
// in `parts` (Linux /proc).
export function childPids(parts) {
  const found = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== process.pid) continue;
      const args = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (parts.every((p) => args.includes(p))) found.push(Number(entry));
    } catch {
      // the process went away meanwhile
    }
  }
  return found;
}

// Process group id of a live process (Linux /proc).
export function pgidOf(pid) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
}
