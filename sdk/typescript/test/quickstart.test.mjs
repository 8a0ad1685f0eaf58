// The README's quick start runs: it is examples/quickstart.mjs word for word, and that
// script, run as a user would (`node examples/quickstart.mjs`, MEMTAPE_URL set), works
// against a real server; so does the TypeScript snippet of the project's own README.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { startServer } from './server.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const example = join(root, 'examples', 'quickstart.mjs');

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

test('the README’s quick start is examples/quickstart.mjs', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const block = /## Quick start\n[\s\S]*?```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'README.md has no js block under "## Quick start"');
  assert.equal(block[1], readFileSync(example, 'utf8'));
  const lines = block[1].split('\n').filter((l) => l.trim() && !l.trim().startsWith('//'));
  assert.ok(lines.length <= 10, `${lines.length} lines of code`);
});

test('examples/quickstart.mjs runs against a server', async () => {
  const env = { ...process.env, MEMTAPE_URL: server.url };
  delete env.MEMTAPE_API_KEY;
  const { stdout } = await promisify(execFile)(process.execPath, [example], { cwd: root, env });
  assert.match(stdout, /^2 messages; best hit: "(I prefer green tea\.|Noted: green tea\.)"; memory v\d+\n$/);
});

test('the main README’s TypeScript snippet runs as written against a server', async () => {
  const readme = readFileSync(join(root, '..', '..', 'README.md'), 'utf8');
  const block = /<!-- typescript -->\n```js\n([\s\S]*?)```\n<!-- \/typescript -->/.exec(readme);
  assert.ok(block, 'README.md has no js block between <!-- typescript --> markers');
  // Inside the package (dist/, built output), so `import ... from "memtape"` resolves to
  // this package as it would once installed.
  const snippet = join(root, 'dist', 'readme-snippet.mjs');
  writeFileSync(snippet, block[1]);
  try {
    const env = { ...process.env, MEMTAPE_URL: server.url };
    delete env.MEMTAPE_API_KEY;
    const { stdout } = await promisify(execFile)(process.execPath, [snippet], { cwd: root, env });
    assert.equal(stdout, 'Hi, I am Ada. I prefer dark mode.\n');
  } finally {
    rmSync(snippet, { force: true });
  }
});
