// The package is ready to publish: its version is the server's (the Rust workspace's, the
// API's), its manifest says what a registry and Node need, and a pack holds the compiled
// client and its declarations, nothing else.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { VERSION } from 'memtape';

const root = fileURLToPath(new URL('..', import.meta.url));
const repo = join(root, '..', '..');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));

/** A `key = "value"` of Cargo.toml's [workspace.package]. */
function workspace(key) {
  const cargo = readFileSync(join(repo, 'Cargo.toml'), 'utf8');
  const section = /^\[workspace\.package\]\n([\s\S]*?)(?=^\[)/m.exec(cargo)?.[1] ?? '';
  return new RegExp(`^${key} = "([^"]*)"`, 'm').exec(section)?.[1];
}

test('the version is the server’s everywhere', () => {
  const spec = JSON.parse(readFileSync(join(repo, 'crates', 'memtape-server', 'openapi.json'), 'utf8'));
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8'));
  assert.equal(pkg.version, workspace('version'));
  assert.equal(VERSION, pkg.version);
  assert.equal(spec.info.version, pkg.version);
  assert.equal(lock.version, pkg.version);
});

test('the manifest: name, ESM with types, files, license, engines, repository', () => {
  assert.equal(pkg.name, 'memtape');
  assert.equal(pkg.type, 'module');
  assert.deepEqual(pkg.exports['.'], { types: './dist/index.d.ts', import: './dist/index.js' });
  assert.equal(pkg.license, workspace('license'));
  assert.equal(pkg.engines.node, '>=18');
  assert.equal(pkg.repository.url, workspace('repository'));
  assert.equal(pkg.repository.directory, 'sdk/typescript');
  assert.deepEqual(Object.keys(pkg.dependencies ?? {}), [], 'no run-time dependencies');
});

test('a pack holds the compiled client, its declarations, the README and the manifest', () => {
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }),
  );
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ['README.md', 'package.json', 'dist/index.js', 'dist/index.d.ts', 'dist/client.js', 'dist/types.d.ts']) {
    assert.ok(files.includes(f), `${f} is not packed: ${files.join(', ')}`);
  }
  assert.deepEqual(files.filter((f) => !/^(README\.md|package\.json|dist\/[\w-]+\.(js|d\.ts))$/.test(f)), []);
});
