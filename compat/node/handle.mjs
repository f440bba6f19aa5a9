// The handle of a lock held by an `offload-lock hold` child: release
// (synchronous, as gpu-lock.mjs's), releaseAsync and the dispose symbols,
// and the loss of the lock (onLost). Built-in modules only.

import { execFileSync } from 'node:child_process';

import { exitCodes, lostError } from './errors.mjs';

const RELEASE_TIMEOUT_MS = 60 * 1000;

// The handle of a lock held by `child` (an `offload-lock hold`): `api` is
// what the caller gets; lose() tells it the lock is gone.
export function makeHandle(bin, child, info, lockDir, onLost) {
  // From now on the child must not keep this process alive: a runner may
  // exit while holding, and the child then releases on stdin EOF.
  child.unref();
  child.stdin.unref();
  child.stdout.unref();
  child.stderr.unref();
  child.stdout.resume(); // never let an unread pipe block the child

  let released = false;
  let lost = null;
  const exited = new Promise((resolve) => child.on('exit', (status, signalName) => resolve({ status, signalName })));
  const lose = (err) => {
    if (released || lost) return;
    lost = err;
    if (onLost) {
      try { onLost(err); } catch { /* the caller's own fault */ }
    }
  };
  // The hold child ending while we still hold: whatever killed it, the
  // lock is no longer held for us (its holder pid is dead: stale for all).
  exited.then(({ status, signalName }) => {
    if (released) return;
    const how = signalName ? `was killed by ${signalName}` : `exited with status ${status}`;
    lose(lostError(`the offload-lock hold child (pid ${info.pid}) holding ${lockDir} ${how}; the lock is no longer held`,
      { exitCode: status ?? null, signal: signalName ?? null }));
  });
  const api = {
    token: info.token,
    path: lockDir,
    pid: info.pid,
    gpu: typeof info.gpu === 'number' ? info.gpu : 0,
    info,
    get lost() { return lost; },
    release() {
      if (released) return;
      released = true;
      try {
        // Synchronous, so the lock is gone when release() returns. Errors are
        // ignored as in gpu-lock.mjs; the token makes sure only our own lock
        // is removed.
        execFileSync(bin, ['--lock', lockDir, 'release', '--token', String(info.token)], {
          stdio: ['ignore', 'ignore', 'ignore'],
          timeout: RELEASE_TIMEOUT_MS,
        });
      } catch {
        /* ignored */
      }
      try { child.stdin.end(); } catch { /* ignore */ }
    },
    // Without blocking the event loop: the hold child releases (by its
    // own, ownership-checked handle) when its stdin closes; resolves once it
    // has exited, with true when it released the lock and false when the
    // lock had been lost. Idempotent; never rejects.
    async releaseAsync() {
      if (!released && !lost) {
        released = true;
        child.ref(); // keep this process alive until the child is done
        try { child.stdin.end(); } catch { /* ignore */ }
      } else if (!released) {
        released = true;
      }
      const { status } = await exited;
      child.unref();
      return status === exitCodes.ok && !lost;
    },
  };
  api[Symbol.dispose] = () => api.release();
  api[Symbol.asyncDispose] = async () => { await api.releaseAsync(); };
  return { api, lose };
}

