#!/usr/bin/env node
// Command-line driver around the v1 stand-in (gpu-lock-v1.mjs), for tests only.
//
//   node runner.mjs hold [--lock P] [--wait-ms N] [--ttl-ms N]
//       acquire; print `acquired <pid>`; hold until stdin EOF or SIGTERM;
//       release; print `released`; exit 0.
//       busy after the wait: print `busy`, exit 1. thrown error: one line on
//       stderr, exit 4.
//   node runner.mjs inspect [--lock P] [--ttl-ms N]
//       print {"stale":bool,"meta":<parsed meta or null>} (exit 0).
//   node runner.mjs path
//       print defaultLockPath().
//
// Without --wait-ms the wait comes from env GPU_LOCK_WAIT_MS, else 30 min,
// as in the v1 runners.

import { acquireGpuLock, defaultLockPath, isStale, readMeta } from './gpu-lock-v1.mjs';

const USAGE = 'usage: node runner.mjs hold [--lock P] [--wait-ms N] [--ttl-ms N] | inspect [--lock P] [--ttl-ms N] | path';

function usage(msg) {
  process.stderr.write(`runner: ${msg}\n${USAGE}\n`);
  process.exit(2);
}

function parseOptions(args, allowed) {
  const opts = {};
  for (let i = 0; i < args.length; i++) {
    let name = args[i];
    let value;
    const eq = name.indexOf('=');
    if (name.startsWith('--') && eq > 0) {
      value = name.slice(eq + 1);
      name = name.slice(0, eq);
    }
    if (!allowed.includes(name)) usage(`unknown option ${name}`);
    if (value === undefined) {
      if (i + 1 >= args.length) usage(`${name} needs a value`);
      value = args[++i];
    }
    if (name === '--lock') {
      opts.lockPath = value;
    } else {
      const n = Number(value);
      if (value === '' || !Number.isFinite(n) || n < 0) usage(`${name} needs a non-negative number`);
      opts[name === '--wait-ms' ? 'waitMs' : 'ttlMs'] = n;
    }
  }
  return opts;
}

function oneLine(err) {
  const text = err && err.message ? err.message : String(err);
  return text.replace(/\s+/g, ' ').trim();
}

async function hold(opts) {
  let handle;
  try {
    handle = await acquireGpuLock(opts);
  } catch (err) {
    process.stderr.write(`runner: ${oneLine(err)}\n`);
    process.exit(4);
  }
  if (!handle) {
    process.stdout.write('busy\n');
    process.exit(1);
  }
  let done = false;
  const finish = () => {
    if (done) return;
    done = true;
    handle.release();
    process.stdout.write('released\n', () => process.exit(0));
  };
  process.on('SIGTERM', finish);
  process.on('SIGINT', finish);
  process.stdin.on('end', finish);
  process.stdin.on('close', finish);
  process.stdin.on('error', finish);
  process.stdin.resume();
  // Only now, with the handlers in place, tell the world we hold the lock.
  process.stdout.write(`acquired ${process.pid}\n`);
}

function inspect(opts) {
  const lockPath = opts.lockPath || defaultLockPath();
  const stale = isStale(lockPath, opts.ttlMs);
  const read = readMeta(lockPath);
  process.stdout.write(`${JSON.stringify({ stale, meta: read ? read.meta : null })}\n`);
}

const [command, ...rest] = process.argv.slice(2);
switch (command) {
  case 'hold':
    await hold(parseOptions(rest, ['--lock', '--wait-ms', '--ttl-ms']));
    break;
  case 'inspect':
    inspect(parseOptions(rest, ['--lock', '--ttl-ms']));
    break;
  case 'path':
    if (rest.length) usage('path takes no options');
    process.stdout.write(`${defaultLockPath()}\n`);
    break;
  default:
    usage(command ? `unknown command ${command}` : 'missing command');
}
