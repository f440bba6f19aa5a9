// A CommonJS project uses the ESM-only package: dynamic import() always,
// and require() where Node loads ES modules synchronously (20.19, 22.12+).
const { test } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const INDEX = path.join(__dirname, '..', 'index.mjs');

test('import() from CommonJS', async () => {
  const m = await import(INDEX);
  assert.equal(typeof m.acquireGpuLock, 'function');
  assert.equal(typeof m.withGpuLock, 'function');
});

test('require() from CommonJS where Node supports require(esm)', (t) => {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (!((major === 20 && minor >= 19) || (major === 22 && minor >= 12) || major >= 23)) {
    t.skip(`Node ${process.versions.node} cannot require() an ES module`);
    return;
  }
  const m = require(INDEX);
  assert.equal(typeof m.acquireGpuLock, 'function');
  assert.equal(m.exitCodes.busy, 1);
});
