// The generated types: the committed src/types.ts and src/operations.ts are what the
// generator makes from the server's openapi.json now (so an API change without `npm run
// generate` fails here), the check notices a change, and the generator's translation of
// JSON Schema into TypeScript, on a small document, compiles and says what it should.

import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { generateOperations, generateTypes } from '../scripts/generate.mjs';

const root = fileURLToPath(new URL('..', import.meta.url));
const generator = join(root, 'scripts', 'generate.mjs');
const specPath = join(root, '..', '..', 'crates', 'memtape-server', 'openapi.json');

test('the committed types are a fresh generation from openapi.json', () => {
  const run = spawnSync(process.execPath, [generator, '--check'], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
});

test('the check fails when the document changed', () => {
  const spec = JSON.parse(readFileSync(specPath, 'utf8'));
  spec.components.schemas.Health.properties.uptime = { type: 'integer', description: 'Seconds up.' };
  const dir = mkdtempSync(join(tmpdir(), 'memtape-generate-'));
  try {
    const changed = join(dir, 'openapi.json');
    writeFileSync(changed, JSON.stringify(spec));
    const run = spawnSync(process.execPath, [generator, '--check', '--spec', changed], { encoding: 'utf8' });
    assert.equal(run.status, 1);
    assert.match(run.stderr, /^src\/types\.ts and src\/operations\.ts differ .*npm run generate/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const small = {
  openapi: '3.1.0',
  info: { title: 'small', version: '1.2.3' },
  paths: {
    '/things/{id}': {
      parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'integer' } }],
      get: {
        summary: 'A thing.',
        operationId: 'thing',
        parameters: [
          { name: 'agent', in: 'query', schema: { type: 'string' } },
          { name: 'user', in: 'query', schema: { type: 'string' } },
          { name: 'mode', in: 'query', description: 'How.', schema: { $ref: '#/components/schemas/Mode' } },
        ],
        responses: { 200: { content: { 'application/json': { schema: { $ref: '#/components/schemas/Thing' } } } } },
      },
      post: {
        operationId: 'load',
        parameters: [{ name: 'Idempotency-Key', in: 'header', schema: { type: 'string' } }],
        requestBody: { required: true, content: { 'application/x-ndjson': { schema: { type: 'string' } } } },
        responses: { 201: { content: { 'application/json': { schema: { type: 'array', items: { $ref: '#/components/schemas/Thing' } } } } } },
      },
    },
  },
  components: {
    schemas: {
      Mode: { type: 'string', description: 'A mode.', enum: ['fast', 'slow'] },
      Thing: {
        type: 'object',
        description: 'A thing.\nOn two lines.',
        required: ['id', 'tags'],
        properties: {
          id: { type: 'integer', description: 'Its id.' },
          name: { type: ['string', 'null'], description: 'Its name, if any.' },
          tags: { type: 'array', items: { type: 'string' } },
          mode: { oneOf: [{ type: 'null' }, { $ref: '#/components/schemas/Mode', description: 'Its mode.' }] },
          counts: { type: 'object', additionalProperties: { type: 'integer' } },
          meta: { type: 'object', description: 'Anything.' },
          'odd-name': { type: 'boolean' },
          kind: { type: 'string', const: 'thing' },
          size: { type: 'number', nullable: true },
        },
        additionalProperties: false,
      },
      Either: {
        description: 'One or the other.',
        oneOf: [
          { type: 'string', description: 'A text.' },
          { type: 'object', description: 'A box.', required: ['box'], properties: { box: { type: 'number' } } },
        ],
      },
      Both: { allOf: [{ $ref: '#/components/schemas/Thing' }, { type: 'object', properties: { more: { type: 'boolean' } } }] },
      Any: { anyOf: [{ type: 'integer' }, { type: 'array', items: { anyOf: [{ type: 'string' }, { type: 'integer' }] } }] },
      ContentPart: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } },
    },
  },
};

test('JSON Schema into TypeScript: refs, unions, enums, nullables, arrays, maps, required, docs', () => {
  const types = generateTypes(small, 'small.json');
  assert.match(types, /\/\*\* A mode\. \*\/\nexport type Mode = "fast" \| "slow";/);
  assert.match(types, /\/\*\*\n \* A thing\.\n \* On two lines\.\n \*\/\nexport interface Thing \{/);
  assert.match(types, /  \/\*\* Its id\. \*\/\n  id: number;/);
  assert.match(types, /  name\?: string \| null;/);
  assert.match(types, /  tags: string\[\];/);
  assert.match(types, /  \/\*\* Its mode\. \*\/\n  mode\?: Mode \| null;/);
  assert.match(types, /  counts\?: \{\n    \[key: string\]: number;\n  \};/);
  assert.match(types, /  meta\?: \{ \[key: string\]: unknown \};/);
  assert.match(types, /  "odd-name"\?: boolean;/);
  assert.match(types, /  kind\?: "thing";/);
  assert.match(types, /  size\?: number \| null;/);
  assert.match(types, /export type Either =\n  \/\*\* A text\. \*\/\n  \| string\n  \/\*\* A box\. \*\/\n  \| \{\n    box: number;\n  \};/);
  assert.match(types, /export type Both = Thing & \{\n  more\?: boolean;\n\};/);
  assert.match(types, /export type Any =\n  \| number\n  \| Array<string \| number>;/);
  assert.match(types, /export interface ContentPart \{\n  type: string;\n  \[key: string\]: unknown;\n\}/);

  const ops = generateOperations(small, 'small.json');
  assert.match(ops, /"GET \/things\/\{id\}": \{\n    path: \{\n      id: number;\n    \};/);
  assert.match(ops, /      \/\*\* How\. \*\/\n      mode\?: S\.Mode;/);
  assert.match(ops, /    body: never;\n    response: S\.Thing;/);
  assert.match(ops, /"POST \/things\/\{id\}": \{\n    path: \{\n      id: number;\n    \};\n    query: \{\};\n    body: string;\n    response: S\.Thing\[\];/);
  assert.match(ops, /"GET \/things\/\{id\}": \{ method: "GET", path: "\/things\/\{id\}", operationId: "thing", pathParams: \["id"\], query: \["agent", "user", "mode"\], scoped: true, idempotencyKey: false, body: null, bodyRequired: false, status: 200, response: "json" \}/);
  assert.match(ops, /idempotencyKey: true, body: "application\/x-ndjson", bodyRequired: true, status: 201/);

  // And it compiles, strictly.
  const dir = mkdtempSync(join(tmpdir(), 'memtape-generate-'));
  try {
    writeFileSync(join(dir, 'types.ts'), types);
    writeFileSync(join(dir, 'operations.ts'), ops);
    writeFileSync(
      join(dir, 'use.ts'),
      `import type { Thing, Either, ContentPart } from './types.js';
import { operations, type Operations } from './operations.js';
const thing: Thing = { id: 1, tags: [], mode: null, counts: { a: 1 }, 'odd-name': true };
const either: Either[] = ['x', { box: 2 }];
const part: ContentPart = { type: 'image_url', image_url: { url: 'u' } };
const q: Operations['GET /things/{id}']['query'] = { mode: 'fast' };
// @ts-expect-error: not a mode
const bad: Operations['GET /things/{id}']['query'] = { mode: 'medium' };
// @ts-expect-error: Thing is closed
const extra: Thing = { id: 1, tags: [], colour: 'red' };
export const all = [thing, either, part, q, bad, extra, operations['POST /things/{id}'].body];
`,
    );
    const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
    const compilerOptions = { noEmit: true, strict: true, target: 'ES2022', module: 'NodeNext', types: [] };
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['use.ts'] }));
    execFileSync(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json')], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    assert.fail(`the generated TypeScript does not compile:\n${e.stdout ?? ''}${e.stderr ?? ''}${e.stdout ? '' : e}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
