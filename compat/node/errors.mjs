// The errors of the Node side of offload-lock: the command's table of exit
// codes, the `code` of every Error the package throws or rejects with, and
// the Errors made from a run of the command. Built-in modules only.

// The exit codes of the offload-lock command, one per outcome: the same table
// as the CLI's (src/cli/args.hpp), which a C++ test compares with this one.
// `status` uses ok for held and busy for free.
export const exitCodes = Object.freeze({ ok: 0, busy: 1, usage: 2, notOwner: 3, system: 4, lost: 5 });

// The `code` of every Error this package throws or rejects with (see README,
// "Errors"): errno names where the condition is that errno's meaning, Node's
// own code for a bad argument, and one code per CLI outcome otherwise.
export const codes = Object.freeze({
  busy: 'EBUSY',
  noBinary: 'ENOENT',
  badArgument: 'ERR_INVALID_ARG_VALUE',
  usage: 'ERR_OFFLOAD_LOCK_USAGE',
  notOwner: 'ERR_OFFLOAD_LOCK_NOT_OWNER',
  system: 'ERR_OFFLOAD_LOCK_SYSTEM',
  lost: 'ERR_OFFLOAD_LOCK_LOST',
  failed: 'ERR_OFFLOAD_LOCK_FAILED',
  aborted: 'ABORT_ERR',
});

// An exit status that should not have ended the command -> its code.
export function codeForExit(status) {
  switch (status) {
    case exitCodes.usage: return codes.usage;
    case exitCodes.notOwner: return codes.notOwner;
    case exitCodes.system: return codes.system;
    case exitCodes.lost: return codes.lost;
    default: return codes.failed; // killed by a signal, could not start, unexpected status or output
  }
}

export function withCode(err, code) {
  err.code = code;
  return err;
}

export function lastLine(text) {
  const lines = String(text || '').split('\n').map((l) => l.trim()).filter(Boolean);
  return lines.length ? lines[lines.length - 1] : '';
}

export function cliError(what, { status, signal, stderr, error }) {
  let reason;
  if (error) reason = error.message;
  else reason = lastLine(stderr) || (signal ? `killed by ${signal}` : `exit code ${status}`);
  const err = withCode(new Error(`offload-lock ${what} failed: ${reason}`), error ? codes.failed : codeForExit(status));
  err.exitCode = status ?? null;
  err.signal = signal ?? null;
  err.stderr = stderr || '';
  if (error) err.cause = error;
  return err;
}

// An Error with code ERR_OFFLOAD_LOCK_LOST.
export function lostError(message, extra = {}) {
  return Object.assign(withCode(new Error(message), codes.lost), extra);
}

