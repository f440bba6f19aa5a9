// serve's page in a real browser (headless Debian chromium): it shows a new
// holder within a second of its acquisition, pushed by the event stream
// (the page never polls the server), a hostile label is shown as the text
// it is, never as markup, and a gpulease holder (the stand-in of
// tests/interop/gpulease) shows as the GPU's holder while the lock is free.
//   node --test serve_page_test.mjs   (OFFLOAD_LOCK_BIN: the command)
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { test } from 'node:test';

import { openPage, whenPage } from './cdp.mjs';

const bin = process.env.OFFLOAD_LOCK_BIN;
assert.ok(bin, 'OFFLOAD_LOCK_BIN names the command');

// A child whose stdout lines can be awaited; killed at the end of the test.
function start(args, t) {
  const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const lines = readline.createInterface({ input: child.stdout });
  const queue = [];
  const waiting = [];
  lines.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
  t.after(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  return {
    child,
    line: (ms = 10000) =>
      queue.length
        ? Promise.resolve(queue.shift())
        : new Promise((resolve, reject) => {
            waiting.push(resolve);
            setTimeout(() => reject(new Error(`no line from ${args.join(' ')}`)), ms);
          }),
  };
}

async function setUp(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'offload-lock-page-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const lock = path.join(dir, 'gpu.lock');
  assert.equal(spawnSync(bin, ['--lock', lock, 'history', '--start']).status, 0);
  const serve = start(['--lock', lock, 'serve', '--listen', '127.0.0.1:0'], t);
  const first = await serve.line();
  const url = first.match(/on (http:\/\/127\.0\.0\.1:\d+\/)/)[1];
  const page = await openPage();
  t.after(() => page.close());
  await page.navigate(url);
  // Connected: the first board arrived over the event stream.
  await page.evaluate(whenPage("document.getElementById('state').textContent === 'live'", 10000));
  return { lock, page };
}

test('the page shows a new holder within a second of its acquisition', async (t) => {
  const { lock, page } = await setUp(t);
  assert.match(await page.evaluate("document.querySelector('#slots tbody').textContent"), /^gpu0free/);
  const label = `page-holder-${process.pid}`;
  // The page watches from before the acquisition; it reports when it saw it.
  const seen = page.evaluate(whenPage(`document.querySelector('#slots tbody').textContent.includes('${label}')`, 10000));
  const holder = start(['--lock', lock, 'hold', '--label', label, '--max-hold', '2h'], t);
  const acquired = JSON.parse((await holder.line()).replace(/^acquired /, ''));
  const seenAt = await seen;
  // Its row as top's: the maximum hold in a column of its own.
  assert.match(await page.evaluate("document.querySelector('#slots tbody').textContent"), /in 1h59m0$/);
  const latency = seenAt - acquired.startedAt;
  t.diagnostic(`holder shown ${latency} ms after its acquisition`);
  // The bound the issue sets; the benchmark measures the figure.
  assert.ok(latency <= 1000, `shown ${latency} ms after the acquisition`);
  // And gone again when it releases.
  const gone = page.evaluate(whenPage(`!document.querySelector('#slots tbody').textContent.includes('${label}')`, 10000));
  holder.child.stdin.end();
  await gone;
});

test('a hostile label is shown as text, not markup', async (t) => {
  const { lock, page } = await setUp(t);
  const label = `<img src=x onerror="document.title='pwned'"><b id="injected">bold</b>\u001b[31m\u202e`;
  const holder = start(['--lock', lock, 'hold', '--label', label], t);
  await holder.line();
  await page.evaluate(whenPage("document.querySelector('#slots tbody').textContent.includes('<img src=x')", 10000));
  const dom = await page.evaluate(`({
    text: document.querySelector('#slots tbody').textContent,
    images: document.querySelectorAll('img').length,
    injected: document.getElementById('injected') !== null,
    bold: document.querySelectorAll('#slots b').length,
    title: document.title,
  })`);
  assert.equal(dom.images, 0);
  assert.equal(dom.injected, false);
  assert.equal(dom.bold, 0);
  assert.notEqual(dom.title, 'pwned');
  // The text itself, with the control and bidirectional characters escaped
  // as the command escapes them.
  assert.ok(dom.text.includes(`<img src=x onerror="document.title='pwned'"><b id="injected">bold</b>\\x1b[31m\\u202e (pid`), dom.text);
  // And in the history list, too.
  holder.child.stdin.end();
  await page.evaluate(whenPage("document.getElementById('history').textContent.includes('released it')", 10000));
  assert.equal(await page.evaluate("document.querySelectorAll('#history img, #history b').length"), 0);
});

test('a gpulease holder shows on the GPU it keeps, its claim as text, and goes when it lets go', async (t) => {
  const standin = path.join(path.dirname(bin), 'gpulease-standin');
  if (!fs.existsSync(standin)) {
    t.skip('gpulease-standin is not built');
    return;
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'offload-lock-page-lease-'));
  t.after(() => fs.rmSync(root, { recursive: true, force: true }));
  const saved = { root: process.env.OFFLOAD_LOCK_LEASE_ROOT, lock: process.env.GPU_LOCK };
  process.env.OFFLOAD_LOCK_LEASE_ROOT = root;
  delete process.env.GPU_LOCK;
  t.after(() => {
    if (saved.root === undefined) delete process.env.OFFLOAD_LOCK_LEASE_ROOT;
    else process.env.OFFLOAD_LOCK_LEASE_ROOT = saved.root;
    if (saved.lock !== undefined) process.env.GPU_LOCK = saved.lock;
  });
  const { page } = await setUp(t);
  const reason = '<b id="leased">x</b>\u202e';
  const seen = page.evaluate(whenPage("document.querySelector('#slots tbody').textContent.includes('gpulease: media lease')", 10000));
  const g = spawn(standin, ['hold', '-state-dir', root, '-class', 'media', '-reason', reason], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.after(() => {
    if (g.exitCode === null) g.kill('SIGKILL');
  });
  const lines = readline.createInterface({ input: g.stdout });
  const acquired = await new Promise((resolve) => lines.on('line', (l) => l.startsWith('acquired ') && resolve(l)));
  const epoch = acquired.split(' ')[2];
  await seen;
  const dom = await page.evaluate(`({
    text: document.querySelector('#slots tbody').textContent,
    injected: document.getElementById('leased') !== null,
    held: document.querySelector('#slots tbody tr').className,
  })`);
  assert.ok(dom.text.includes(`gpulease: media lease (pid ${g.pid}, epoch ${epoch}, reason "<b id="leased">x</b>\\u202e")`), dom.text);
  assert.equal(dom.injected, false);
  assert.equal(dom.held, 'held');
  const gone = page.evaluate(whenPage("document.querySelector('#slots tbody').textContent.startsWith('gpu0free')", 10000));
  g.stdin.end();
  await gone;
});
