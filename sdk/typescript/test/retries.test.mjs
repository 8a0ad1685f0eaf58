// Errors, timeouts and retries, against a scripted fetch: what is retried (reads, and
// writes under one Idempotency-Key that stays the same), what is not, and what is thrown.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
  ConflictError,
  InternalServerError,
  Memtape,
  MemtapeError,
  NotFoundError,
  RateLimitError,
  UnprocessableEntityError,
} from 'memtape';

const json = (status, body, headers = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
const error = (status, code, message, headers) => json(status, { error: { code, message } }, headers);
// A server's wish to be asked again soon, so the tests do not wait for the backoff.
const SOON = { 'retry-after-ms': '1' };

/** A client whose fetch answers from `script` in turn (a Response, an Error to throw, or a function). */
function scripted(script, options = {}) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, method: init.method, key: new Headers(init.headers).get('idempotency-key'), body: init.body });
    const step = script[Math.min(calls.length - 1, script.length - 1)];
    if (typeof step === 'function') return step(init);
    if (step instanceof Error) throw step;
    return step.clone();
  };
  return { client: new Memtape({ baseURL: 'http://memtape.test', fetch, ...options }), calls };
}

test('a write that got no answer is sent again with the same Idempotency-Key', async () => {
  const { client, calls } = scripted([new TypeError('fetch failed'), json(201, { ids: [7], captured: [] })]);
  const appended = await client.sessions.append('s', { role: 'user', content: 'hi' });
  assert.deepEqual(appended, { ids: [7], captured: [] });
  assert.equal(calls.length, 2);
  assert.ok(calls[0].key);
  assert.equal(calls[1].key, calls[0].key);
  assert.equal(calls[1].body, calls[0].body, 'the same bytes, so the server sees the same request');
});

test('5xx and 429 are retried up to maxRetries, then the last error is thrown', async () => {
  let { client, calls } = scripted([error(503, 'unavailable', 'busy', SOON), error(500, 'internal', 'disk', SOON), json(201, { version: 1 })]);
  assert.deepEqual(await client.memory.save({ content: 'x' }), { version: 1 });
  assert.equal(calls.length, 3);
  assert.equal(new Set(calls.map((c) => c.key)).size, 1);

  ({ client, calls } = scripted([error(429, 'rate_limited', 'slow down', SOON)], { maxRetries: 1 }));
  const e = await client.memory.show().catch((x) => x);
  assert.ok(e instanceof RateLimitError);
  assert.equal(calls.length, 2);

  ({ client, calls } = scripted([error(502, 'model', 'the model failed', SOON)]));
  const last = await client.memory.save({ content: 'x' }, { maxRetries: 0 }).catch((x) => x);
  assert.ok(last instanceof InternalServerError);
  assert.equal(last.status, 502);
  assert.equal(calls.length, 1);
});

test('a read is retried after a connection error', async () => {
  const { client, calls } = scripted([new TypeError('socket hang up'), json(200, { status: 'ok' })]);
  assert.deepEqual(await client.healthz(), { status: 'ok' });
  assert.equal(calls.length, 2);
  assert.equal(calls[0].key, null, 'a read carries no Idempotency-Key');
});

test('a 4xx is thrown at once with the status, code and message of the error body', async () => {
  const { client, calls } = scripted([error(404, 'not_found', 'no session nope')]);
  const e = await client.sessions.history('nope').catch((x) => x);
  assert.ok(e instanceof NotFoundError && e instanceof APIError && e instanceof MemtapeError);
  assert.equal(e.status, 404);
  assert.equal(e.code, 'not_found');
  assert.equal(e.message, 'no session nope');
  assert.equal(e.name, 'NotFoundError');
  assert.equal(calls.length, 1);

  const u = await scripted([error(422, 'unprocessable', 'bad role')]).client.sessions.append('s', { role: 'user' }).catch((x) => x);
  assert.ok(u instanceof UnprocessableEntityError);
  assert.equal(u.code, 'unprocessable');
});

test('503 no_model (no model configured) is not retried', async () => {
  const { client, calls } = scripted([error(503, 'no_model', 'no model is configured', SOON)]);
  const e = await client.memory.emergence().catch((x) => x);
  assert.ok(e instanceof InternalServerError);
  assert.equal(e.code, 'no_model');
  assert.equal(calls.length, 1);
});

test('an error that is not JSON keeps its status, and its text as the message', async () => {
  const { client } = scripted([new Response('Bad Gateway from a proxy', { status: 502 })], { maxRetries: 0 });
  const e = await client.agents.list().catch((x) => x);
  assert.ok(e instanceof InternalServerError);
  assert.equal(e.status, 502);
  assert.equal(e.code, undefined);
  assert.equal(e.message, 'Bad Gateway from a proxy');
});

test('Retry-After is followed', async () => {
  const { client, calls } = scripted([error(429, 'rate_limited', 'wait', { 'retry-after': '0.2' }), json(200, { tools: [] })]);
  const t0 = Date.now();
  await client.tools.list();
  assert.ok(Date.now() - t0 >= 150, `waited ${Date.now() - t0} ms`);
  assert.equal(calls.length, 2);
});

/** A fetch step that never answers, until its request is aborted. */
const hang = (init) =>
  new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError'))));

test('an attempt that takes longer than the timeout fails with APIConnectionTimeoutError, after its retries', async () => {
  const { client, calls } = scripted([hang], { timeout: 50, maxRetries: 1 });
  const t0 = Date.now();
  const e = await client.sessions.list().catch((x) => x);
  assert.ok(e instanceof APIConnectionTimeoutError && e instanceof APIConnectionError, String(e));
  assert.equal(calls.length, 2);
  assert.ok(Date.now() - t0 >= 100);
});

test('a 409 after an attempt that got no answer is that attempt still running: asked again', async () => {
  const { client, calls } = scripted(
    [hang, error(409, 'conflict', 'a request with this Idempotency-Key is still running', SOON), json(201, { ids: [1], captured: [] })],
    { timeout: 50 },
  );
  assert.deepEqual(await client.sessions.append('s', { role: 'user', content: 'x' }), { ids: [1], captured: [] });
  assert.equal(calls.length, 3);
  assert.equal(new Set(calls.map((c) => c.key)).size, 1);

  // A 409 to a first attempt is a real conflict.
  const first = scripted([error(409, 'conflict', 'the memory is at version 3, not 1')]);
  const e = await first.client.memory.save({ content: 'x', if_version: 1 }).catch((x) => x);
  assert.ok(e instanceof ConflictError);
  assert.equal(first.calls.length, 1);
});

test('the caller aborting ends the call with APIUserAbortError, without retries', async () => {
  const { client, calls } = scripted([hang]);
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 20);
  const e = await client.search({ q: 'x', signal: controller.signal }).catch((x) => x);
  assert.ok(e instanceof APIUserAbortError, String(e));
  assert.equal(calls.length, 1);

  const aborted = AbortSignal.abort();
  await assert.rejects(client.healthz({ signal: aborted }), APIUserAbortError);
  assert.equal(calls.length, 1, 'an aborted signal sends nothing');
});

test('the backoff waits between retries when the server says nothing', async () => {
  const { client, calls } = scripted([new TypeError('fetch failed'), new TypeError('fetch failed'), json(200, { hits: [] })]);
  const t0 = Date.now();
  await client.search({ q: 'x' });
  const waited = Date.now() - t0;
  assert.equal(calls.length, 3);
  // 0.5 s then 1 s, less up to a quarter of jitter.
  assert.ok(waited >= 1000, `waited ${waited} ms`);
});
