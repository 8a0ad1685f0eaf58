// The client against a server with API keys (made with `memtape keys create`): no key or a
// wrong one is a 401, the key from the options or from MEMTAPE_API_KEY works, a write key
// may not erase (403) where an admin key may, and a key sees its own tenant only.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { AuthenticationError, Memtape, NotFoundError, PermissionDeniedError } from 'memtape';

import { startServer } from './server.mjs';

let server;

before(async () => {
  server = await startServer({
    keys: {
      writer: { tenant: 't1', role: 'write' },
      admin: { tenant: 't1', role: 'admin' },
      reader: { tenant: 't1', role: 'read' },
      other: { tenant: 't2', role: 'write' },
    },
  });
});
after(() => server?.stop());

const client = (apiKey) => new Memtape({ baseURL: server.url, apiKey, agent: 'keys' });

test('keys create prints the key alone', () => {
  for (const key of Object.values(server.keys)) assert.match(key, /^mtk_\w+$/);
});

test('without a key, or with a wrong one: 401 unauthorized (healthz needs none)', async () => {
  assert.deepEqual(await client(null).healthz(), { status: 'ok' });
  const none = await client(null).sessions.list().catch((x) => x);
  assert.ok(none instanceof AuthenticationError, String(none));
  assert.equal(none.status, 401);
  assert.equal(none.code, 'unauthorized');
  assert.match(none.message, /Bearer/);
  const wrong = await client('mtk_000000000000_0000').sessions.list().catch((x) => x);
  assert.ok(wrong instanceof AuthenticationError);
  assert.match(wrong.message, /not valid/);
});

test('the key from the options, or from MEMTAPE_API_KEY and MEMTAPE_URL', async () => {
  const writer = client(server.keys.writer);
  await writer.sessions.append('s', { role: 'user', content: 'with a key' });
  assert.equal((await writer.sessions.history('s')).messages.length, 1);

  const saved = { url: process.env.MEMTAPE_URL, key: process.env.MEMTAPE_API_KEY };
  process.env.MEMTAPE_URL = server.url;
  process.env.MEMTAPE_API_KEY = server.keys.writer;
  try {
    const fromEnv = new Memtape({ agent: 'keys' });
    assert.deepEqual((await fromEnv.sessions.history('s')).messages, [{ role: 'user', content: 'with a key' }]);
  } finally {
    for (const [k, v] of [['MEMTAPE_URL', saved.url], ['MEMTAPE_API_KEY', saved.key]]) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
});

test('roles: a read key may not write, a write key may not erase, an admin key may', async () => {
  const read = await client(server.keys.reader).memory.save({ content: 'x' }).catch((x) => x);
  assert.ok(read instanceof PermissionDeniedError, String(read));
  assert.equal(read.code, 'forbidden');

  const writer = client(server.keys.writer);
  await writer.sessions.append('erase-me', { role: 'user', content: 'to be erased' });
  const denied = await writer.erase({ what: 'session', session: 'erase-me' }).catch((x) => x);
  assert.ok(denied instanceof PermissionDeniedError, String(denied));
  assert.equal(denied.status, 403);
  assert.match(denied.message, /admin/);
  await assert.rejects(writer.retention.set({ messages_days: 7 }), PermissionDeniedError);

  const admin = client(server.keys.admin);
  const erased = await admin.erase({ what: 'session', session: 'erase-me' });
  assert.equal(erased.entries, 1);
  assert.equal((await admin.retention.set({ messages_days: 7 })).effective.messages_days, 7);
});

test('a key sees its own tenant only', async () => {
  const writer = client(server.keys.writer);
  await writer.sessions.append('mine', { role: 'user', content: 'tenant one only' });
  const other = client(server.keys.other);
  await assert.rejects(other.sessions.history('mine'), NotFoundError);
  assert.deepEqual((await other.search({ q: 'tenant' })).hits, []);
  assert.deepEqual((await other.sessions.list()).sessions, []);
});
