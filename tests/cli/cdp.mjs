// A headless Debian chromium driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in a NUL byte, on the
// child's descriptors 3 and 4), so no WebSocket client is needed. Used by
// serve's page test and by the benchmark's page-update row.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';

// Starts chromium with a fresh profile; resolves to a page: `evaluate(expr)`
// (awaits a promise the expression returns, returns its value),
// `navigate(url)` and `close()`.
export async function openPage() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'offload-lock-chromium-'));
  const child = spawn(
    chromiumPath,
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
      '--disable-dev-shm-usage',
      `--user-data-dir=${profile}`,
      '--remote-debugging-pipe',
      'about:blank',
    ],
    // Its own process group: its helper processes end with it.
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'], detached: true },
  );
  let stderr = '';
  child.stderr.on('data', (b) => {
    stderr = (stderr + b.toString()).slice(-4000);
  });
  const toBrowser = child.stdio[3];
  const fromBrowser = child.stdio[4];
  let nextId = 1;
  const pending = new Map();
  let buffer = Buffer.alloc(0);
  fromBrowser.on('data', (chunk) => {
    buffer = Buffer.concat([buffer, chunk]);
    for (let nul = buffer.indexOf(0); nul >= 0; nul = buffer.indexOf(0)) {
      const msg = JSON.parse(buffer.subarray(0, nul).toString());
      buffer = buffer.subarray(nul + 1);
      if (msg.id && pending.has(msg.id)) {
        const { resolve, reject } = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) reject(new Error(`${msg.error.message} (${JSON.stringify(msg.error.data ?? '')})`));
        else resolve(msg.result);
      }
    }
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  exited.then(() => {
    for (const { reject } of pending.values()) reject(new Error(`chromium exited: ${stderr}`));
    pending.clear();
  });
  const send = (method, params = {}, sessionId = undefined) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      const msg = { id, method, params };
      if (sessionId) msg.sessionId = sessionId;
      toBrowser.write(JSON.stringify(msg) + '\0');
    });
  const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
  const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
  await send('Runtime.enable', {}, sessionId);
  await send('Page.enable', {}, sessionId);
  return {
    async navigate(url) {
      await send('Page.navigate', { url }, sessionId);
    },
    async evaluate(expression) {
      const r = await send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true }, sessionId);
      if (r.exceptionDetails) throw new Error(`page: ${JSON.stringify(r.exceptionDetails)}`);
      return r.result.value;
    },
    async close() {
      try {
        await Promise.race([send('Browser.close'), new Promise((r) => setTimeout(r, 2000))]);
      } catch {
        // already gone
      }
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        // the group is gone already
      }
      fs.rmSync(profile, { recursive: true, force: true, maxRetries: 20, retryDelay: 100 });
    },
  };
}

// A page-side wait: resolves to Date.now() in the page as soon as
// `predicate` (an expression over `document`) holds, checked on every DOM
// change; rejects after `ms`.
export function whenPage(predicate, ms) {
  return `new Promise((resolve, reject) => {
    const check = () => { try { return ${predicate}; } catch { return false; } };
    if (check()) return resolve(Date.now());
    const obs = new MutationObserver(() => { if (check()) { obs.disconnect(); resolve(Date.now()); } });
    obs.observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
    setTimeout(() => { obs.disconnect(); reject(new Error('not seen in ${ms} ms')); }, ${ms});
  })`;
}
