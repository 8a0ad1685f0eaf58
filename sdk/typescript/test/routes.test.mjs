// Every operation of the OpenAPI document has a client method, and that method sends it:
// each method of ROUTES is called against a fetch that records the request, which must be
// the operation's method and path, with its scope, key, body and Idempotency-Key.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import { Memtape, ROUTES, operations } from 'memtape';

const spec = JSON.parse(readFileSync(new URL('../../../crates/memtape-server/openapi.json', import.meta.url), 'utf8'));
const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options'];
const documented = Object.entries(spec.paths).flatMap(([path, item]) =>
  METHODS.filter((m) => item[m]).map((m) => `${m.toUpperCase()} ${path}`),
);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test('every operation of openapi.json is routed to a client method, once', () => {
  const routed = Object.values(ROUTES);
  assert.equal(new Set(routed).size, routed.length, 'an operation is routed twice');
  assert.deepEqual([...routed].sort(), [...documented].sort());
  assert.deepEqual(Object.keys(operations).sort(), [...documented].sort(), 'src/operations.ts is stale');
});

/** A recording fetch that answers each request with an empty success. */
function recorder() {
  const requests = [];
  const fetch = async (url, init) => {
    requests.push({ url: new URL(url), method: init.method, headers: new Headers(init.headers), body: init.body });
    const op = Object.values(operations).find((o) => o.method === init.method && pattern(o.path).test(new URL(url).pathname));
    const text = op?.response === 'text' ? '' : '{}';
    return new Response(text, { status: op?.status ?? 200, headers: { 'content-type': 'application/json' } });
  };
  return { requests, fetch };
}

function pattern(path) {
  return new RegExp(`^${path.replace(/\{\w+\}/g, '[^/]+')}$`);
}

/** The method of `client` a ROUTES name names (`memory.save` is client.memory.save). */
function methodOf(client, name) {
  const parts = name.split('.');
  const owner = parts.slice(0, -1).reduce((o, p) => o[p], client);
  const fn = owner[parts.at(-1)];
  assert.equal(typeof fn, 'function', `client.${name} is not a method`);
  return fn.bind(owner);
}

test('each client method sends its operation: method, path, scope, key, body, Idempotency-Key', async () => {
  const { requests, fetch } = recorder();
  const client = new Memtape({ baseURL: 'http://memtape.test/prefix/', apiKey: 'k1', agent: 'a1', user: 'u1', fetch });
  for (const [name, key] of Object.entries(ROUTES)) {
    const op = operations[key];
    // The convention of every method: the path parameters in order, then the body if the
    // operation has one, then the query parameters and request options.
    const pathArgs = op.pathParams.map((p) => (p === 'id' ? 42 : `${p} x/ü`));
    const params = {};
    for (const q of op.query) {
      const param = spec.paths[op.path][op.method.toLowerCase()].parameters.find((p) => p.name === q);
      if (param.required) params[q] = q === 'from' || q === 'to' ? 1 : '/memories/x.md';
    }
    const body =
      op.body === 'application/x-ndjson'
        ? '{"a":1}\n'
        : op.body === 'multipart/form-data'
          ? new Uint8Array([137, 80, 78, 71])
          : op.body
            ? { probe: name }
            : undefined;
    const args = [...pathArgs, ...(op.body ? [body] : []), params];
    requests.length = 0;
    await methodOf(client, name)(...args);
    assert.equal(requests.length, 1, `${name}: ${requests.length} requests`);
    const [r] = requests;
    assert.equal(r.method, op.method, name);
    const expected = `/prefix${op.path.replace(/\{(\w+)\}/g, (_, p) => encodeURIComponent(String(pathArgs[op.pathParams.indexOf(p)])))}`;
    assert.equal(r.url.pathname, expected, name);
    assert.equal(r.url.searchParams.get('agent'), op.scoped ? 'a1' : null, `${name}: agent`);
    assert.equal(r.url.searchParams.get('user'), op.scoped ? 'u1' : null, `${name}: user`);
    for (const [q, v] of Object.entries(params)) assert.equal(r.url.searchParams.get(q), String(v), `${name}: ${q}`);
    assert.equal(r.headers.get('authorization'), 'Bearer k1', name);
    if (op.idempotencyKey) assert.match(r.headers.get('idempotency-key') ?? '', UUID, `${name}: Idempotency-Key`);
    else assert.equal(r.headers.get('idempotency-key'), null, name);
    if (op.method === 'GET') {
      assert.equal(r.body, undefined, name);
      assert.equal(r.headers.get('content-type'), null, name);
    } else if (op.body === 'multipart/form-data') {
      // fetch writes a form's content type, with its boundary.
      assert.equal(r.headers.get('content-type'), null, name);
      assert.ok(r.body instanceof FormData, name);
      assert.equal((await r.body.get('file').arrayBuffer()).byteLength, 4, name);
    } else {
      assert.equal(r.headers.get('content-type'), op.body ?? 'application/json', name);
      if (op.body === 'application/json') assert.deepEqual(JSON.parse(r.body), body, name);
      else if (op.body) assert.equal(r.body, body, name);
      else assert.equal(r.body, undefined, name);
    }
  }
});

test('a call names its own scope over the client, and null sends none', async () => {
  const { requests, fetch } = recorder();
  const client = new Memtape({ baseURL: 'http://memtape.test', agent: 'a1', user: 'u1', fetch, apiKey: null });
  await client.sessions.history('s', { agent: 'a2', user: null, max_messages: 3 });
  const [r] = requests;
  assert.equal(r.url.search, '?agent=a2&max_messages=3');
  assert.equal(r.headers.get('authorization'), null);
  await client.withOptions({ user: 'u9' }).sessions.list();
  assert.equal(requests[1].url.search, '?agent=a1&user=u9');
});

test('each write gets its own Idempotency-Key, and an explicit one is sent as given', async () => {
  const { requests, fetch } = recorder();
  const client = new Memtape({ baseURL: 'http://memtape.test', fetch });
  await client.memory.save({ content: 'a' });
  await client.memory.save({ content: 'a' });
  await client.memory.save({ content: 'a' }, { idempotencyKey: 'my-key-1' });
  const keys = requests.map((r) => r.headers.get('idempotency-key'));
  assert.notEqual(keys[0], keys[1]);
  assert.equal(keys[2], 'my-key-1');
});

test('a path parameter is required', async () => {
  const client = new Memtape({ baseURL: 'http://memtape.test', fetch: recorder().fetch });
  await assert.rejects(client.sessions.history(''), TypeError);
});

test('baseURL and apiKey default to MEMTAPE_URL and MEMTAPE_API_KEY, then to the local server', () => {
  const saved = { url: process.env.MEMTAPE_URL, key: process.env.MEMTAPE_API_KEY };
  try {
    delete process.env.MEMTAPE_URL;
    delete process.env.MEMTAPE_API_KEY;
    let client = new Memtape();
    assert.equal(client.baseURL, 'http://127.0.0.1:7077');
    assert.equal(client.apiKey, null);
    process.env.MEMTAPE_URL = 'http://example.test:9/';
    process.env.MEMTAPE_API_KEY = 'env-key';
    client = new Memtape();
    assert.equal(client.baseURL, 'http://example.test:9');
    assert.equal(client.apiKey, 'env-key');
    assert.equal(new Memtape({ apiKey: null }).apiKey, null);
    assert.equal(new Memtape({ baseURL: 'http://x.test', apiKey: 'k' }).baseURL, 'http://x.test');
  } finally {
    for (const [k, v] of [['MEMTAPE_URL', saved.url], ['MEMTAPE_API_KEY', saved.key]]) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
});

test('without a global crypto (Node 18), the Idempotency-Key comes from node:crypto', async () => {
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
  Object.defineProperty(globalThis, 'crypto', { value: undefined, configurable: true, writable: true });
  try {
    const { requests, fetch } = recorder();
    await new Memtape({ baseURL: 'http://memtape.test', fetch }).memory.save({ content: 'x' });
    assert.match(requests[0].headers.get('idempotency-key'), UUID);
  } finally {
    if (saved) Object.defineProperty(globalThis, 'crypto', saved);
    else delete globalThis.crypto;
  }
});
