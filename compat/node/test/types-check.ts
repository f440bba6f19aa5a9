// Compile-only check of index.d.ts (never run): scripts/test compiles this file
// with `tsc --strict --noEmit`. It imports the package by its name, so it also
// checks that package.json leads TypeScript to the declarations, and it uses
// every export the way a runner would. Three kinds of lines:
// - plain uses, which must compile;
// - `expectType<Exact<...>>` lines, which pin each declared type to the shape
//   index.mjs and the CLI really produce (the README and `--json status`);
// - `@ts-expect-error` lines, which must NOT compile; if a declaration grows
//   too loose (any, a missing readonly, a wider union), tsc reports them as
//   unused.

import {
  DEFAULT_TTL_MS,
  DEFAULT_WAIT_MS,
  acquireGpuLock,
  acquireSync,
  defaultLockPath,
  exitCodes,
  findBinary,
  inspect,
  releaseSync,
  withGpuLock,
} from 'offload-lock';
import type {
  AbortError,
  AbortSignalLike,
  AcquireOptions,
  AcquiredInfo,
  CommandError,
  ErrorCode,
  ExitCode,
  GpuLockHandle,
  LockInfo,
  LockStatus,
  LostError,
  OffloadLockError,
  Priority,
  ProgressHolder,
  ReleaseOptions,
  ReleaseResult,
  SlotStatus,
  SyncAcquireOptions,
  WaitProgress,
  Waiter,
  YieldRequest,
} from 'offload-lock';

// Exact<A, B> is true only when A and B are the same type (any is not).
type Exact<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
declare function expectType<T extends true>(): void;

// --- constants --------------------------------------------------------------

expectType<Exact<typeof DEFAULT_WAIT_MS, 1800000>>();
expectType<Exact<typeof DEFAULT_TTL_MS, 3600000>>();
expectType<
  Exact<
    typeof exitCodes,
    { readonly ok: 0; readonly busy: 1; readonly usage: 2; readonly notOwner: 3; readonly system: 4; readonly lost: 5 }
  >
>();
expectType<Exact<ExitCode, 0 | 1 | 2 | 3 | 4 | 5>>();
// @ts-expect-error exitCodes is frozen
exitCodes.busy = 7;
// @ts-expect-error there is no such outcome
exitCodes.timeout;

function outcome(status: number | null): string {
  switch (status) {
    case exitCodes.ok: return 'held';
    case exitCodes.busy: return 'free';
    default: return 'failed';
  }
}

// --- errors -----------------------------------------------------------------

expectType<
  Exact<
    ErrorCode,
    | 'EBUSY'
    | 'ENOENT'
    | 'ERR_INVALID_ARG_VALUE'
    | 'ERR_OFFLOAD_LOCK_USAGE'
    | 'ERR_OFFLOAD_LOCK_NOT_OWNER'
    | 'ERR_OFFLOAD_LOCK_SYSTEM'
    | 'ERR_OFFLOAD_LOCK_LOST'
    | 'ERR_OFFLOAD_LOCK_FAILED'
    | 'ABORT_ERR'
  >
>();
expectType<Exact<OffloadLockError['code'], ErrorCode>>();
expectType<Exact<AbortError['name'], 'AbortError'>>();
expectType<Exact<AbortError['code'], 'ABORT_ERR'>>();
expectType<AbortError extends OffloadLockError ? true : false>();
expectType<
  Exact<
    CommandError['code'],
    | 'ERR_OFFLOAD_LOCK_USAGE'
    | 'ERR_OFFLOAD_LOCK_NOT_OWNER'
    | 'ERR_OFFLOAD_LOCK_SYSTEM'
    | 'ERR_OFFLOAD_LOCK_LOST'
    | 'ERR_OFFLOAD_LOCK_FAILED'
  >
>();
expectType<Exact<CommandError['exitCode'], number | null>>();
expectType<Exact<CommandError['signal'], string | null>>();
expectType<Exact<CommandError['stderr'], string>>();

function explain(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const e = err as OffloadLockError;
  switch (e.code) {
    case 'EBUSY': return 'the GPU stayed busy';
    case 'ENOENT': return `install offload-lock: ${e.message}`;
    case 'ERR_INVALID_ARG_VALUE': return `bad option: ${e.message}`;
    case 'ABORT_ERR': return 'gave up waiting';
    // @ts-expect-error not a code this package uses
    case 'ETIMEDOUT': return 'never';
    default: {
      const c = e as CommandError;
      const status: ExitCode | number | null = c.exitCode;
      return `offload-lock exited ${status} (${c.signal ?? 'no signal'}): ${c.stderr.trim()}`;
    }
  }
}

// --- options and results ----------------------------------------------------

expectType<Exact<Priority, number | 'batch' | 'normal' | 'interactive'>>();
expectType<
  Exact<
    SyncAcquireOptions,
    { lockPath?: string; waitMs?: number; ttlMs?: number; label?: string; priority?: Priority; expectMs?: number }
  >
>();
expectType<
  Exact<
    AcquireOptions,
    {
      lockPath?: string;
      waitMs?: number;
      ttlMs?: number;
      label?: string;
      priority?: Priority;
      expectMs?: number;
      gpus?: number | 'auto';
      gpu?: number;
      onLost?: (err: LostError) => void;
      signal?: AbortSignalLike;
      onProgress?: (progress: WaitProgress) => void;
    }
  >
>();
expectType<Exact<AbortSignalLike['aborted'], boolean>>();
expectType<
  Exact<
    WaitProgress,
    {
      event: 'waiting';
      changed: boolean;
      waitedMs: number;
      position: number | null;
      etaMs: number | null;
      holders: ProgressHolder[];
    }
  >
>();
expectType<ProgressHolder extends LockInfo ? true : false>();
expectType<Exact<ProgressHolder['priority'], number | null>>();
expectType<Exact<ProgressHolder['expectMs'], number | null>>();
expectType<Exact<ProgressHolder['freeInMs'], number | null>>();
expectType<Exact<YieldRequest, { pid: number; label: string; priority: number }>>();
expectType<Exact<SlotStatus['yieldRequested'], YieldRequest | null>>();
expectType<Exact<SlotStatus['priority'], number | null>>();
expectType<Exact<SlotStatus['expectMs'], number | null>>();
expectType<Exact<SlotStatus['freeInMs'], number | null>>();
expectType<Exact<ReleaseOptions, { lockPath?: string; token?: string }>>();
expectType<Exact<ReleaseResult, 'released' | 'free' | 'not-owner'>>();
expectType<
  Exact<
    LockInfo,
    {
      path: string;
      held: boolean;
      pid: number | null;
      startedAt: number | null;
      heldForMs: number | null;
      label: string | null;
      host: string | null;
      token: string | null;
      stale: string | null;
      ownerUid: number | null;
      v1Stale: string | null;
      otherPidNamespace: boolean;
    }
  >
>();
expectType<Exact<AcquiredInfo['gpu'], number | undefined>>();
expectType<SlotStatus extends LockInfo ? true : false>();
expectType<Exact<SlotStatus['gpu'], number>>();
expectType<Exact<SlotStatus['busy'], boolean>>();
expectType<Exact<SlotStatus['busyBy'], 'lock' | 'gpulease' | null>>();
expectType<
  Exact<
    Waiter,
    {
      pid: number;
      label: string;
      host: string;
      since: number;
      waitedMs: number;
      gpu: number | null;
      gpus: number;
      position: number | null;
      priority: number;
      expectMs: number | null;
      etaMs: number | null;
    }
  >
>();
expectType<Exact<LockStatus['slots'], SlotStatus[]>>();
expectType<Exact<LockStatus['waiters'], Waiter[]>>();
expectType<Exact<LockStatus['gpu'], number>>();
expectType<Exact<GpuLockHandle['release'], () => void>>();
expectType<Exact<GpuLockHandle['releaseAsync'], () => Promise<boolean>>>();
expectType<Exact<GpuLockHandle['gpu'], number>>();
expectType<Exact<GpuLockHandle['lost'], LostError | null>>();
expectType<Exact<LostError['code'], 'ERR_OFFLOAD_LOCK_LOST'>>();
expectType<LostError extends OffloadLockError ? true : false>();

// --- functions, as a runner uses them --------------------------------------

expectType<Exact<ReturnType<typeof defaultLockPath>, string>>();
expectType<Exact<ReturnType<typeof findBinary>, string>>();
expectType<Exact<ReturnType<typeof acquireGpuLock>, Promise<GpuLockHandle | null>>>();
expectType<Exact<ReturnType<typeof inspect>, LockStatus>>();
expectType<Exact<ReturnType<typeof acquireSync>, string | null>>();
expectType<Exact<ReturnType<typeof releaseSync>, ReleaseResult>>();

declare function render(frames: number): Promise<number>;

async function runner(): Promise<void> {
  const where: string = defaultLockPath();
  const bin: string = findBinary();

  const lock = await acquireGpuLock({ waitMs: 5 * 60 * 1000, ttlMs: DEFAULT_TTL_MS, label: 'render' });
  if (!lock) throw new Error(`GPU busy: ${where} (${bin})`);
  // @ts-expect-error null when busy: a handle must be checked before use
  (await acquireGpuLock()).release();
  try {
    await render(24);
  } finally {
    lock.release();
  }
  const token: string = lock.token;
  const holder: number = lock.pid;
  const held: boolean = lock.info.held;
  const dir: string = lock.path;
  // @ts-expect-error the handle is read-only
  lock.token = 'other';
  // @ts-expect-error release is synchronous and returns nothing
  await lock.release().then(() => {});
  const gone: boolean = await lock.releaseAsync();
  // @ts-expect-error gpu is a slot number, not a string
  const slotName: string = lock.gpu;
  void gone, slotName;
  await acquireGpuLock({ gpus: 'auto', gpu: 1, onLost: (err) => { const c: 'ERR_OFFLOAD_LOCK_LOST' = err.code; void c, err.signal; } });
  // @ts-expect-error gpus is a count or 'auto'
  await acquireGpuLock({ gpus: 'all' });
  // @ts-expect-error onLost takes the error
  await acquireGpuLock({ onLost: (n: number) => n });
  void token, holder, held, dir;

  await acquireGpuLock();
  await acquireGpuLock({});
  await acquireGpuLock({ lockPath: '/tmp/x.lock', waitMs: Infinity });
  // @ts-expect-error durations are milliseconds, not CLI strings
  await acquireGpuLock({ waitMs: '5m' });
  // @ts-expect-error no such option
  await acquireGpuLock({ wait: 1000 });

  // The queue: priority, declared duration, abort, progress.
  const controller = { signal: { aborted: false, addEventListener() {}, removeEventListener() {} } };
  await acquireGpuLock({ priority: 'interactive', expectMs: 20 * 60 * 1000, signal: controller.signal });
  await acquireGpuLock({ priority: -10 });
  // @ts-expect-error not a priority name
  await acquireGpuLock({ priority: 'urgent' });
  // @ts-expect-error durations are milliseconds
  await acquireGpuLock({ expectMs: '20m' });
  // @ts-expect-error not an AbortSignal
  await acquireGpuLock({ signal: true });
  await acquireGpuLock({
    onProgress(p) {
      const where: number | null = p.position;
      const waited: number = p.waitedMs;
      const who: Array<string | null> = p.holders.map((h) => h.label);
      const free: Array<number | null> = p.holders.map((h) => h.freeInMs);
      // @ts-expect-error position may be null
      const pos: number = p.position;
      void where, waited, who, free, pos;
    },
  });
  // @ts-expect-error the progress is an object, not a number
  await acquireGpuLock({ onProgress: (ms: number) => ms });
  try {
    await acquireGpuLock({ signal: controller.signal });
  } catch (err) {
    if ((err as AbortError).name === 'AbortError') void (err as AbortError).cause;
  }
  await withGpuLock({ priority: 'batch', signal: controller.signal, onProgress: () => {} }, () => 1);
  acquireSync({ priority: 5, expectMs: 1000 });
  // @ts-expect-error a synchronous wait cannot be aborted
  acquireSync({ signal: controller.signal });
  // @ts-expect-error nor report progress
  acquireSync({ onProgress: () => {} });

  const frames: number = await withGpuLock(async (l) => render(l.pid));
  const same: number = await withGpuLock({ waitMs: 0 }, (l: GpuLockHandle) => l.pid);
  const viaNull: string = await withGpuLock(null, () => 'done');
  // @ts-expect-error the result is the callback's, unwrapped
  const wrong: Promise<number> = await withGpuLock(async () => 1);
  void frames, same, viaNull, wrong;

  const status: LockStatus = inspect();
  const other = inspect('/tmp/other.lock');
  const ages: Array<number | null> = other.slots.map((s) => s.heldForMs);
  const queue: string[] = status.waiters.map((w) => `${w.label || 'unnamed'} (pid ${w.pid}) ${w.waitedMs} ms, gpu ${w.gpu ?? 'any'}`);
  const etas: Array<number | null> = status.waiters.map((w) => w.etaMs);
  const asked: string = status.yieldRequested ? `${status.yieldRequested.label} (${status.yieldRequested.priority})` : '';
  // @ts-expect-error yieldRequested may be null
  const asker: number = status.yieldRequested.pid;
  void etas, asked, asker;
  if (status.held && status.pid !== null) {
    const pid: number = status.pid;
    void pid;
  }
  // @ts-expect-error pid may be null
  const pid: number = status.pid;
  void ages, queue, pid;

  const t = acquireSync({ waitMs: 0, label: 'script' });
  if (t !== null) {
    const r: ReleaseResult = releaseSync({ token: t });
    if (r === 'not-owner') throw new Error('taken over');
    // @ts-expect-error not a result releaseSync gives
    if (r === 'busy') throw new Error('never');
  }
  releaseSync();
  // @ts-expect-error the token is a string
  releaseSync({ token: 42 });

  try {
    await withGpuLock({ waitMs: 0 }, () => undefined);
  } catch (err) {
    void explain(err), outcome((err as CommandError).exitCode);
  }
}

void runner;
