// Benchmark helper for the v1 protocol (spawned by offload-lock-bench).
//
//   cycle LOCK BATCHES OPS    the v1 acquire+release steps inline, as gpu-lock-v1.mjs
//                             performs them uncontended: mkdirSync, writeFileSync of
//                             meta.json, rmSync recursive. Prints a JSON array of
//                             ns/op, one per batch (after one unreported warm-up batch).
//   acquire LOCK BATCHES OPS  the same through acquireGpuLock() + release() (async).
//   waiter LOCK               on each "go" line: prints "w <ns>", waits in
//                             acquireGpuLock(), prints "a <ns>" stamped right after
//                             getting the lock, after releasing it.
//   once LOCK                 acquireGpuLock({waitMs: 0}) + release(), then exit.
//   loop LOCK ID HOLD_MS PAUSE_MS STOP
//                             until the file STOP exists: acquireGpuLock() (polling as v1 does), hold
//                             HOLD_MS, print "ID a <held ns> <release ns>", release, pause
//                             a random 0..PAUSE_MS ms; prints "ID ready" first. (The
//                             queue section's v1 runners barging on a queued lock.)
//
// Times are process.hrtime.bigint(): CLOCK_MONOTONIC on Linux, the clock the
// C++ side stamps with.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { acquireGpuLock } from '../interop/reference/gpu-lock-v1.mjs';

const now = () => process.hrtime.bigint();
const [mode, lock, ...rest] = process.argv.slice(2);

function v1Cycle(lockPath) {
  fs.mkdirSync(lockPath);
  fs.writeFileSync(
    path.join(lockPath, 'meta.json'),
    JSON.stringify({ pid: process.pid, startedAt: Date.now() }),
  );
  try {
    fs.rmSync(lockPath, { recursive: true, force: true });
  } catch {
    // v1 ignores every error here.
  }
}

async function viaModule(lockPath) {
  const l = await acquireGpuLock({ lockPath, waitMs: 0 });
  if (!l) throw new Error(`busy: ${lockPath}`);
  l.release();
}

if (mode === 'cycle' || mode === 'acquire') {
  const batches = Number(rest[0]);
  const ops = Number(rest[1]);
  const perOp = [];
  for (let b = -1; b < batches; b++) {
    const t0 = now();
    if (mode === 'cycle') for (let i = 0; i < ops; i++) v1Cycle(lock);
    else for (let i = 0; i < ops; i++) await viaModule(lock);
    const t1 = now();
    if (b >= 0) perOp.push(Number(t1 - t0) / ops);
  }
  process.stdout.write(`${JSON.stringify(perOp)}\n`);
} else if (mode === 'waiter') {
  const rl = readline.createInterface({ input: process.stdin });
  process.stdout.write('ready\n');
  for await (const line of rl) {
    if (line !== 'go') continue;
    process.stdout.write(`w ${now()}\n`);
    const l = await acquireGpuLock({ lockPath: lock, waitMs: 3600 * 1000 });
    const t = now();
    if (!l) {
      process.stdout.write('e acquireGpuLock returned null\n');
      continue;
    }
    l.release();
    process.stdout.write(`a ${t}\n`);
  }
} else if (mode === 'once') {
  const l = await acquireGpuLock({ lockPath: lock, waitMs: 0 });
  if (!l) process.exit(1);
  l.release();
} else if (mode === 'loop') {
  const [id, holdMs, pauseMs, stop] = [rest[0], Number(rest[1]), Number(rest[2]), rest[3]];
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  process.stdout.write(`${id} ready\n`);
  while (!fs.existsSync(stop)) {
    const l = await acquireGpuLock({ lockPath: lock, waitMs: 3600 * 1000 });
    const t = now();
    if (!l) {
      process.stdout.write(`${id} e acquireGpuLock returned null\n`);
      continue;
    }
    await sleep(holdMs);
    const r = now();
    process.stdout.write(`${id} a ${t} ${r}\n`);
    l.release();
    await sleep(Math.random() * pauseMs);
  }
} else {
  process.stderr.write(`v1-helper: unknown mode ${mode}\n`);
  process.exit(2);
}
