// The client's types in use: test/usage.ts compiles, and each call the types must refuse is
// refused (`@ts-expect-error` that meets no error fails the compilation).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

test('test/usage.ts compiles against the package’s declarations', () => {
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  const run = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.test.json')], { encoding: 'utf8' });
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
});
