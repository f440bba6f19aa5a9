// The benchmark's page-update row: how long after an acquisition serve's
// page, open in headless chromium, shows the new holder. The acquisition's
// moment is its meta.json startedAt (epoch ms, set just before the claim),
// the page's is Date.now() in the page when the DOM first shows the label.
//   node page_update.mjs OFFLOAD_LOCK LOCK ROUNDS
// Prints "ms N" per round, or "error MESSAGE".
import { spawn, spawnSync } from 'node:child_process';
import readline from 'node:readline';

import { openPage, whenPage } from '../cli/cdp.mjs';

const [bin, lock, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText || 20);

function lines(child) {
  const rl = readline.createInterface({ input: child.stdout });
  const queue = [];
  const waiting = [];
  rl.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
  return () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiting.push(r)));
}

const children = [];
let page = null;
try {
  spawnSync(bin, ['--lock', lock, 'history', '--start']);
  const serve = spawn(bin, ['--lock', lock, 'serve', '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(serve);
  const url = (await lines(serve)()).match(/on (http:\/\/\S+)/)[1];
  page = await openPage();
  await page.navigate(url);
  await page.evaluate(whenPage("document.getElementById('state').textContent === 'live'", 20000));
  for (let k = 0; k < rounds; k++) {
    const label = `round-${k}`;
    const seen = page.evaluate(whenPage(`document.querySelector('#slots tbody').textContent.includes('${label}')`, 20000));
    const holder = spawn(bin, ['--lock', lock, 'hold', '--label', label], { stdio: ['pipe', 'pipe', 'inherit'] });
    children.push(holder);
    const acquired = JSON.parse((await lines(holder)()).replace(/^acquired /, ''));
    const at = await seen;
    console.log(`ms ${at - acquired.startedAt}`);
    const free = page.evaluate(whenPage(`!document.querySelector('#slots tbody').textContent.includes('${label}')`, 20000));
    holder.stdin.end();
    await new Promise((r) => holder.on('exit', r));
    await free;
  }
} catch (e) {
  console.log(`error ${String(e.message || e).split('\n')[0]}`);
} finally {
  if (page) await page.close();
  for (const c of children) if (c.exitCode === null) c.kill('SIGTERM');
}
