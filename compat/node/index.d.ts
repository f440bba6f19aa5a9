// Type declarations for index.mjs, the Node side of offload-lock: every export,
// with the shapes the offload-lock command prints and the errors it rejects
// with. Self-contained: needs neither @types/node nor any other package.

/** The default `waitMs`: 30 minutes, used when neither `waitMs` nor `$GPU_LOCK_WAIT_MS` is set. */
export declare const DEFAULT_WAIT_MS: 1800000;

/** The default `ttlMs`: 1 hour. */
export declare const DEFAULT_TTL_MS: 3600000;

/**
 * The exit codes of the `offload-lock` command, one per outcome (the CLI's own
 * table). `status` exits `ok` when the lock is held and `busy` when it is free.
 */
export declare const exitCodes: Readonly<{
  ok: 0;
  busy: 1;
  usage: 2;
  notOwner: 3;
  system: 4;
  lost: 5;
}>;

/** One of the values of {@link exitCodes}. */
export type ExitCode = (typeof exitCodes)[keyof typeof exitCodes];

/**
 * The `code` of every Error this package throws or rejects with.
 * - `EBUSY`: `withGpuLock` found the lock still busy after the wait; the message
 *   names the holder as the command does.
 * - `ENOENT`: no usable `offload-lock` binary (see {@link findBinary}).
 * - `ERR_INVALID_ARG_VALUE`: an option of the wrong kind, before anything runs (a TypeError):
 *   `waitMs` or `ttlMs` not a non-negative number or `Infinity`, `priority` not
 *   one of {@link Priority}, `expectMs` not a non-negative finite number,
 *   `gpus` not 1 to 1024 or `'auto'`, `gpu` not 0 to 1023,
 *   `signal` not an AbortSignal, `onProgress` or `onLost` not a function.
 * - `ERR_OFFLOAD_LOCK_USAGE`, `ERR_OFFLOAD_LOCK_NOT_OWNER`, `ERR_OFFLOAD_LOCK_SYSTEM`,
 *   `ERR_OFFLOAD_LOCK_LOST`: the command ended with that outcome (exit 2, 3, 4, 5)
 *   where the call could not go on; `ERR_OFFLOAD_LOCK_LOST` is also the
 *   {@link LostError} of a held lock that was lost (`onLost`, `withGpuLock`).
 * - `ERR_OFFLOAD_LOCK_FAILED`: the command could not be started, was killed by a
 *   signal, exited with an unexpected status, or printed something unreadable.
 * - `ABORT_ERR`: the `signal` given to {@link acquireGpuLock} aborted the wait
 *   (an {@link AbortError}).
 */
export type ErrorCode =
  | 'EBUSY'
  | 'ENOENT'
  | 'ERR_INVALID_ARG_VALUE'
  | 'ERR_OFFLOAD_LOCK_USAGE'
  | 'ERR_OFFLOAD_LOCK_NOT_OWNER'
  | 'ERR_OFFLOAD_LOCK_SYSTEM'
  | 'ERR_OFFLOAD_LOCK_LOST'
  | 'ERR_OFFLOAD_LOCK_FAILED'
  | 'ABORT_ERR';

/** An Error thrown by this package; `code` says which kind. */
export interface OffloadLockError extends Error {
  code: ErrorCode;
}

/**
 * What an acquisition rejects with when its `signal` aborts the wait (or was
 * already aborted), as Node's own APIs do. By then the `offload-lock hold`
 * child has ended: it left the queue and holds no lock.
 */
export interface AbortError extends OffloadLockError {
  name: 'AbortError';
  code: 'ABORT_ERR';
  /** The signal's `reason`. */
  cause: unknown;
}

/** The codes of errors that come from a run of the `offload-lock` command. */
export type CommandErrorCode = Extract<ErrorCode, `ERR_OFFLOAD_LOCK_${string}`>;

/** A run of the `offload-lock` command failed. */
export interface CommandError extends OffloadLockError {
  code: CommandErrorCode;
  /** The command's exit status; null when it was killed, could not be started, or the fault is in its output. */
  exitCode: number | null;
  /** The signal that killed the command (e.g. `'SIGKILL'`), else null. */
  signal: string | null;
  /** What the command wrote on stderr ('' when nothing, or when it could not be started). */
  stderr: string;
  /** The underlying error, when the command could not be started or its output not read. */
  cause?: unknown;
}

/**
 * A waiter's priority in the queue: an integer from -100 to 100 (higher is
 * served first), or a name: `'batch'` (-10), `'normal'` (0, the default),
 * `'interactive'` (10).
 */
export type Priority = number | 'batch' | 'normal' | 'interactive';

/** Options of {@link acquireSync} (and, with more, of {@link acquireGpuLock}). */
export interface SyncAcquireOptions {
  /** The lock directory; else `$GPU_LOCK` if not empty, else `<os.tmpdir()>/local-offload-gpu.lock`. */
  lockPath?: string;
  /** How long to wait for a busy lock, in ms; `Infinity` waits forever. Default `$GPU_LOCK_WAIT_MS`, else 30 minutes. */
  waitMs?: number;
  /** A holder whose meta.json is older than this (ms) is stale. Default 1 hour; 0 is a usage error. */
  ttlMs?: number;
  /** What holds the lock, shown by `offload-lock status`. Default: the script's file name, else `'node'`. */
  label?: string;
  /** The place in the queue: served by priority, then arrival. Default `'normal'`. */
  priority?: Priority;
  /** How long the lock will be held, ms, for the ETAs others see (`--expect`); 0 or absent: undeclared. */
  expectMs?: number;
}

/**
 * The minimal AbortSignal this package uses (Node's and the DOM's both fit),
 * so that the declarations need no lib of their own.
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  readonly reason?: unknown;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** A holder as a progress event shows it: its `--json` object and what it declared. */
export interface ProgressHolder extends LockInfo {
  /** The holder's priority; null when the lock is not held. */
  priority: number | null;
  /** How long the holder declared it would hold the lock, ms; null when undeclared. */
  expectMs: number | null;
  /** When it is expected to be free, ms from now: 0 when free or overdue, null when unknown. */
  freeInMs: number | null;
}

/**
 * One report of a wait, as `offload-lock --json hold` writes it on stderr:
 * when the holder changes, and every second while nothing does.
 */
export interface WaitProgress {
  event: 'waiting';
  /** A holder (or this waiter's position) differs from the previous report. */
  changed: boolean;
  /** Since the wait began. */
  waitedMs: number;
  /** This waiter's place in the queue, 1 = next; null when not known. */
  position: number | null;
  /** When this waiter should get the lock, ms from now, as `status` gives it; null when unknown. */
  etaMs: number | null;
  /** The lock, or each GPU slot waited for, as last seen. */
  holders: ProgressHolder[];
}

/** Options of {@link acquireGpuLock} and {@link withGpuLock}. */
export interface AcquireOptions extends SyncAcquireOptions {
  /**
   * Take the first free of this many GPU slots (`--gpus N`), or as many as
   * the machine has GPUs (`'auto'`); the handle's `gpu` says which.
   */
  gpus?: number | 'auto';
  /** Take GPU slot K only (`--gpu K`), 0 to 1023. */
  gpu?: number;
  /**
   * Called once if the lock stops being held before it is released: someone
   * else removed or replaced it, or the `offload-lock hold` child holding it
   * was killed. The error has code `ERR_OFFLOAD_LOCK_LOST`.
   */
  onLost?: (err: LostError) => void;
  /**
   * Aborting it while waiting ends the wait (the child leaves the queue and
   * takes no lock) and rejects with an {@link AbortError}; already aborted,
   * rejects at once without starting anything. Once the lock is held it has
   * no effect: release the handle.
   */
  signal?: AbortSignalLike;
  /** Called with each {@link WaitProgress} while waiting (never once held). What it throws is ignored. */
  onProgress?: (progress: WaitProgress) => void;
}

/** Options of {@link releaseSync}. */
export interface ReleaseOptions {
  /** The lock directory, as for {@link AcquireOptions.lockPath}. */
  lockPath?: string;
  /** The token {@link acquireSync} returned; without it, releases only a lock this process holds. */
  token?: string;
}

/** One inspection of a lock directory, as `offload-lock --json status` prints it. Unknown values are null. */
export interface LockInfo {
  path: string;
  held: boolean;
  /** The recorded holder pid. */
  pid: number | null;
  /** When the holder took the lock, epoch ms. */
  startedAt: number | null;
  /** How long it has been held, ms; null when not held. */
  heldForMs: number | null;
  label: string | null;
  host: string | null;
  token: string | null;
  /** Why the lock is stale, or null. */
  stale: string | null;
  /** The uid owning the lock directory. */
  ownerUid: number | null;
  /** Held, but the Node runners would judge it stale (and may reclaim it): why; else null. */
  v1Stale: string | null;
  /** The holder runs in another pid namespace than this reader. */
  otherPidNamespace: boolean;
}

/** The `acquired` object `offload-lock hold` prints once it holds the lock. */
export interface AcquiredInfo extends LockInfo {
  /** The GPU slot held, when the command was given GPU slots. */
  gpu?: number;
}

/** What nvidia-smi says of a slot's GPU. */
export interface GpuDevice {
  index: number;
  uuid: string | null;
  name: string | null;
  memoryUsedMiB: number | null;
  memoryTotalMiB: number | null;
  utilizationPct: number | null;
  processes: { pid: number; name: string | null; memoryMiB: number | null; holdsLock: boolean }[];
}

/** One GPU slot of {@link LockStatus}. */
export interface SlotStatus extends LockInfo {
  /**
   * Someone has the GPU: the lock is held, or (slot 0, the plain lock) the gpulease lease that every
   * acquisition of it also takes is held, which `held` alone does not say.
   */
  busy: boolean;
  /** What keeps it busy: 'lock', 'gpulease' (the lock itself is free), or null when free. */
  busyBy: 'lock' | 'gpulease' | null;
  gpu: number;
  /** null without nvidia-smi or when it does not know the GPU. */
  device: GpuDevice | null;
  /** The holder's priority in the queue; null when free. */
  priority: number | null;
  /** How long the holder declared it would hold the lock, ms; null when undeclared or free. */
  expectMs: number | null;
  /** When the lock is expected to be free, ms from now: 0 when free or overdue, null when unknown. */
  freeInMs: number | null;
  /** The holder's maximum hold (`--max-hold`), ms; null when it set none, or free. */
  maxHoldMs: number | null;
  /** What is left of it, ms (below 0 once it has passed); null when there is none. */
  maxHoldInMs: number | null;
  /** When a site policy's idleAfter marked the holder's GPU idle, epoch ms; null when not idle (or free). */
  idleSince: number | null;
  /** How long it has been idle, ms; null when not idle. */
  idleForMs: number | null;
  /** A waiter of a higher priority than the holder's asked it to yield; null when none (or free). */
  yieldRequested: YieldRequest | null;
}

/** The waiter that asked the holder to yield (`offload-lock run --yield-signal`). */
export interface YieldRequest {
  pid: number;
  /** '' when it gave none. */
  label: string;
  priority: number;
}

/** An offload-lock process waiting for the lock. */
export interface Waiter {
  pid: number;
  /** '' when it gave none. */
  label: string;
  /** '' when unknown. */
  host: string;
  /** When its wait began, epoch ms. */
  since: number;
  waitedMs: number;
  /** The slot it asked for; null: the first free one of `gpus`. */
  gpu: number | null;
  gpus: number;
  /** Its place in the queue, 1 = next: one more than the waiters ahead that would take a slot it would take. */
  position: number | null;
  priority: number;
  /** Its declared duration, ms; null when undeclared. */
  expectMs: number | null;
  /** When it should get the lock, ms from now; null when unknown. */
  etaMs: number | null;
}

/** The gpulease lease of current upstream runners, judged by gpulease's rules (doc/protocol-gpulease.md). */
export interface LeaseStatus {
  /** The lease directory. */
  dir: string;
  /** Which rule placed it: 'explicit', 'GPU_LOCK', 'OFFLOAD_LOCK_LEASE_ROOT', 'LOCAL_OFFLOAD_STATE_DIR' or 'default'. */
  rule: string;
  /** 'unknown': something could not be read; it is never taken over. */
  state: 'free' | 'held' | 'stale' | 'unknown';
  held: boolean;
  why: string;
  /** An unparseable claim inside gpulease's 10 s grace. */
  inProgress: boolean;
  /** The holder's fields: null without a parseable claim. */
  pid: number | null;
  class: string | null;
  /** The lease's fencing epoch. */
  epoch: number | null;
  reason: string;
  origin: string;
  jobId: string;
  acquiredAtMs: number | null;
  /** The end of the holder's declared window. */
  expiresAtMs: number | null;
  /** Its last heartbeat. */
  renewedAtMs: number | null;
  heldForMs: number | null;
  /** What gpulease's own readers conclude. */
  gpuleaseReadersHeld: boolean;
  /** The last epoch issued; null when unknown. */
  counter: number | null;
}

/** What {@link inspect} returns: slot 0 at the top level, every slot in `slots`, and the waiters. */
export interface LockStatus extends SlotStatus {
  slots: SlotStatus[];
  /** In the order they will be served: priority, then arrival. */
  waiters: Waiter[];
  /** The gpulease lease; null where no gpulease root exists. */
  gpulease: LeaseStatus | null;
}

/** The loss of a held lock (see {@link AcquireOptions.onLost}). */
export interface LostError extends OffloadLockError {
  code: 'ERR_OFFLOAD_LOCK_LOST';
  /** The hold child's exit status, when it ended; null otherwise. */
  exitCode?: number | null;
  /** The signal that killed the hold child (e.g. `'SIGKILL'`), when one did. */
  signal?: string | null;
}

// Symbol.dispose and Symbol.asyncDispose where the TypeScript lib has them
// (5.2 and later, for `using` and `await using`); nothing where it has not.
type DisposeKey = SymbolConstructor extends { readonly dispose: infer K extends symbol } ? K : never;
type AsyncDisposeKey = SymbolConstructor extends { readonly asyncDispose: infer K extends symbol } ? K : never;

/**
 * A held lock, from {@link acquireGpuLock}: `await using lock = await
 * acquireGpuLock(...)` releases it at the end of the block.
 */
export type GpuLockHandle = GpuLockHandleBase &
  { readonly [K in DisposeKey]: () => void } &
  { readonly [K in AsyncDisposeKey]: () => Promise<void> };

/** What every {@link GpuLockHandle} has. */
export interface GpuLockHandleBase {
  /** The token of this acquisition. */
  readonly token: string;
  /** The lock directory held. */
  readonly path: string;
  /** The `offload-lock hold` child that holds the lock (its recorded holder). */
  readonly pid: number;
  /** The whole `acquired` object the child printed. */
  readonly info: AcquiredInfo;
  /** The GPU slot held (0 for a plain lock). */
  readonly gpu: number;
  /** null while held; the {@link LostError} once the lock was lost. */
  readonly lost: LostError | null;
  /** Releases the lock by its token, synchronously; idempotent; never throws. */
  release(): void;
  /**
   * Releases without blocking: the hold child gives the lock back and exits.
   * Resolves true when it released it, false when it had been lost.
   * Idempotent; never rejects.
   */
  releaseAsync(): Promise<boolean>;
}

/** What {@link releaseSync} did. */
export type ReleaseResult = 'released' | 'free' | 'not-owner';

/** The lock path by the Node runners' rule: `$GPU_LOCK` if not empty, else `<os.tmpdir()>/local-offload-gpu.lock`. */
export declare function defaultLockPath(): string;

/**
 * The `offload-lock` executable: `$OFFLOAD_LOCK_BIN` (must be executable), else
 * `offload-lock` on `$PATH`, else `<repo>/build/offload-lock`.
 * @throws {OffloadLockError} code `ENOENT` when there is none.
 */
export declare function findBinary(): string;

/**
 * Takes the GPU lock. Resolves with the handle once held, or null when the
 * lock is still busy after `waitMs`. Rejects with an {@link AbortError} when
 * `signal` aborts the wait, and with an {@link OffloadLockError} (a
 * {@link CommandError} when the command failed) on anything else.
 */
export declare function acquireGpuLock(options?: AcquireOptions): Promise<GpuLockHandle | null>;

/**
 * Acquires, runs `fn`, and releases even when `fn` throws. Rejects with code
 * `EBUSY` naming the holder (without calling `fn`) when the lock stays busy,
 * and with the {@link LostError} when the lock was lost while `fn` ran and no
 * `onLost` was given.
 */
export declare function withGpuLock<T>(fn: (lock: GpuLockHandle) => T | PromiseLike<T>): Promise<Awaited<T>>;
export declare function withGpuLock<T>(
  options: AcquireOptions | null | undefined,
  fn: (lock: GpuLockHandle) => T | PromiseLike<T>,
): Promise<Awaited<T>>;

/**
 * `offload-lock --json status` for the lock at `lockPath` (default: the
 * ordinary path), synchronously. Throws a {@link CommandError} when it fails.
 */
export declare function inspect(lockPath?: string): LockStatus;

/**
 * Takes the lock on behalf of this Node process (its pid is recorded as the
 * holder). Returns the token, or null when still busy after `waitMs`.
 */
export declare function acquireSync(options?: SyncAcquireOptions): string | null;

/** Releases a lock taken with {@link acquireSync}; see {@link ReleaseResult}. */
export declare function releaseSync(options?: ReleaseOptions): ReleaseResult;
