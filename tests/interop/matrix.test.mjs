// The holder/waiter matrix: for every pair of
// participant kinds {C++ library, CLI run, CLI acquire/release from Node,
// compat/node, v1 reference runner}, on a lock directory of its own:
//
//   round 1: the waiter does not get the lock while the holder holds it, and
//            gets it once the holder releases;
//   round 2: the waiter takes over once the holder is killed with SIGKILL
//            (CLI run: its CMD; acquire/release from Node and compat/node:
//            the Node process).
//
// Whenever someone holds, the Go reader (gpulock-inspect), the v1 rules
// (reference runner.mjs inspect) and `offload-lock status` report it held by
// the RIGHT pid (CLI run: CMD's; acquire from Node: the Node process's;
// compat/node: its `offload-lock hold` child's; library and reference runner:
// their own), and free after the release. No helper process (a `hold` child,
// an `acquire` keeper) may outlive the pair.
//
// Run: node --test tests/interop/matrix.test.mjs (after scripts/build).
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import {
  BOUND_MS, KINDS, KIND_NAMES, processesMentioning, readersSeeFree, readersSeeHeld, startParticipant, tempDir, waitFor,
} from './harness.mjs';

// Long enough for the reference runner to try twice (it polls once a second).
const QUIET_WINDOW_MS = 1500;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function round(t, dir, holderKind, waiterKind, how) {
  const lock = path.join(dir, `gpu-${how}.lock`);
  const holder = startParticipant(holderKind, lock, { t, label: `holder-${holderKind}` });
  await holder.acquired();
  readersSeeHeld(assert, lock, holder.recordedPid, `${KIND_NAMES[holderKind]} holding`);

  const waiter = startParticipant(waiterKind, lock, { t, label: `waiter-${waiterKind}` });
  await sleep(QUIET_WINDOW_MS);
  assert.equal(waiter.hasAcquired(), false,
    `${KIND_NAMES[waiterKind]} got the lock while ${KIND_NAMES[holderKind]} held it: ${waiter.proc.describe()}`);
  assert.equal(waiter.proc.exit, null, `waiter exited while waiting: ${waiter.proc.describe()}`);
  readersSeeHeld(assert, lock, holder.recordedPid, `${KIND_NAMES[holderKind]} still holding while ${KIND_NAMES[waiterKind]} waits`);

  const t0 = Date.now();
  if (how === 'release') {
    await holder.release();
  } else {
    holder.kill();
  }
  await waiter.acquired(BOUND_MS);
  const tookMs = Date.now() - t0;
  readersSeeHeld(assert, lock, waiter.recordedPid, `${KIND_NAMES[waiterKind]} holding after the ${how}`);
  assert.notEqual(waiter.recordedPid, holder.recordedPid);

  await waiter.release();
  readersSeeFree(assert, lock, `after ${KIND_NAMES[waiterKind]} released`);
  if (how === 'kill') {
    // What remains of the killed holder ends by itself: run exits with its
    // CMD's status, 128+9; the hold child and the keeper end with their holder.
    const e = await holder.proc.waitExit(BOUND_MS);
    if (holderKind === 'run') assert.equal(e.code, 137, `offload-lock run after its CMD was SIGKILLed: ${holder.proc.describe()}`);
    else assert.equal(e.signal, 'SIGKILL', holder.proc.describe());
  }
  await waitFor(() => processesMentioning(lock).length === 0,
    `no process left mentioning ${lock} (left: ${processesMentioning(lock).join(' | ')})`);
  return tookMs;
}

// Two pairs at a time, one per core of a small machine: more only makes
// each pair slower and its bounds easier to miss.
describe('interop matrix: holder x waiter', { concurrency: 2 }, () => {
  for (const holderKind of KINDS) {
    for (const waiterKind of KINDS) {
      it(`${KIND_NAMES[holderKind]} holds, ${KIND_NAMES[waiterKind]} waits`, { timeout: 6 * BOUND_MS }, async (t) => {
        const dir = tempDir(t, `matrix-${holderKind}-${waiterKind}-`);
        const released = await round(t, dir, holderKind, waiterKind, 'release');
        const killed = await round(t, dir, holderKind, waiterKind, 'kill');
        t.diagnostic(`took over ${released} ms after the release, ${killed} ms after the SIGKILL`);
      });
    }
  }
});
