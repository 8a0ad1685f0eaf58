// The client against a real memtape server (MEMTAPE_BIN, a fresh data directory, no keys,
// BM25 only): every resource, the error mapping, idempotent writes and scope isolation.
// Each test works in an agent of its own, so the tests do not see each other's data.

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import {
  BadRequestError,
  ConflictError,
  InternalServerError,
  Memtape,
  NotFoundError,
  UnprocessableEntityError,
} from 'memtape';

import { startServer } from './server.mjs';

let server;
let base;

before(async () => {
  server = await startServer();
  base = new Memtape({ baseURL: server.url, apiKey: null });
});
after(() => server?.stop());

/** A client for an agent of its own. */
const scoped = (agent, options = {}) => base.withOptions({ agent, ...options });

test('healthz and the tenant’s agents', async () => {
  assert.deepEqual(await base.healthz(), { status: 'ok' });
  const client = scoped('agents-test');
  await client.sessions.append('s', { role: 'user', content: 'hello' });
  const { agents } = await client.agents.list();
  const mine = agents.find((a) => a.agent === 'agents-test');
  assert.ok(mine, JSON.stringify(agents));
  assert.equal(mine.sessions, 1);
});

test('append and history round trip: messages, tool calls, tool results, content parts', async () => {
  const client = scoped('roundtrip');
  const one = await client.sessions.append('s1', { role: 'user', content: 'What is the weather in Paris?' });
  assert.equal(one.ids.length, 1);
  const toolCall = {
    id: 'call_1',
    type: 'function',
    function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) },
  };
  const batch = await client.sessions.append('s1', {
    messages: [
      { role: 'assistant', content: null, tool_calls: [toolCall] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 24°C' },
      { role: 'assistant', content: 'It is sunny in Paris.' },
    ],
  });
  assert.equal(batch.ids.length, 3);
  assert.ok(batch.ids.every((id) => id > one.ids[0]));
  const parts = [
    { type: 'text', text: 'And what is in this picture?' },
    { type: 'image_url', image_url: { url: 'https://example.org/cat.png' } },
  ];
  await client.sessions.append('s1', { role: 'user', content: parts });

  const { messages } = await client.sessions.history('s1');
  assert.deepEqual(messages, [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', tool_calls: [toolCall] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 24°C' },
    { role: 'assistant', content: 'It is sunny in Paris.' },
    { role: 'user', content: parts },
  ]);
  const { messages: last } = await client.sessions.history('s1', { max_messages: 1 });
  assert.deepEqual(last, [{ role: 'user', content: parts }]);

  const { entries } = await client.sessions.entries('s1', { kind: 'tool_call' });
  assert.equal(entries.length, 1);
  assert.equal(entries[0].kind, 'tool_call');
  assert.deepEqual(entries[0].payload.tool_calls, [toolCall]);
});

test('a session name with spaces, a slash and non-ASCII travels in the path', async () => {
  const client = scoped('names');
  await client.sessions.append('a b/ü?#', { role: 'user', content: 'odd name' });
  const { sessions } = await client.sessions.list();
  assert.deepEqual(sessions.map((s) => s.session), ['a b/ü?#']);
  const { messages } = await client.sessions.history('a b/ü?#');
  assert.equal(messages[0].content, 'odd name');
});

test('search finds appended text, within its scope', async () => {
  const client = scoped('search');
  await client.sessions.append('s', { role: 'user', content: 'my cat is called Zanzibar' });
  await client.sessions.append('s', { role: 'assistant', content: 'a lovely name' });
  const { hits } = await client.search({ q: 'Zanzibar' });
  assert.ok(hits.length >= 1);
  assert.equal(hits[0].entry.payload.content, 'my cat is called Zanzibar');
  assert.equal(typeof hits[0].score, 'number');
  const { hits: limited } = await client.search({ q: 'Zanzibar name', limit: 1, kind: 'message', mode: 'bm25' });
  assert.equal(limited.length, 1);
  const { hits: elsewhere } = await scoped('search-other').search({ q: 'Zanzibar' });
  assert.deepEqual(elsewhere, []);
});

test('agent and user scope isolate sessions, search and memory', async () => {
  const alice = scoped('scope', { user: 'alice' });
  const bob = scoped('scope', { user: 'bob' });
  await alice.sessions.append('s', { role: 'user', content: 'alice likes marmalade' });
  await bob.sessions.append('s', { role: 'user', content: 'bob likes mustard' });
  assert.deepEqual((await alice.sessions.history('s')).messages, [{ role: 'user', content: 'alice likes marmalade' }]);
  assert.deepEqual((await bob.sessions.history('s')).messages, [{ role: 'user', content: 'bob likes mustard' }]);
  assert.deepEqual((await bob.search({ q: 'marmalade' })).hits, []);
  assert.equal((await alice.search({ q: 'marmalade' })).hits.length, 1);
  // The agent's search covers its users; another agent's covers nothing of them.
  assert.equal((await scoped('scope').search({ q: 'marmalade', scope: 'agent' })).hits.length, 1);
  await assert.rejects(scoped('scope-other', { user: 'alice' }).sessions.history('s'), NotFoundError);

  await alice.memory.save({ content: '- likes marmalade\n' });
  assert.match((await alice.memory.show()).text, /marmalade/);
  assert.doesNotMatch((await bob.memory.show()).text, /marmalade/);
  // A call names its own scope over the client's.
  assert.match((await bob.memory.show({ user: 'alice' })).text, /marmalade/);
});

test('sessions: start, anchors, thread, entries page by page, consolidate, context, new', async () => {
  const client = scoped('lifecycle');
  const started = await client.sessions.start('s');
  assert.equal(typeof started.bootstrap, 'number');
  const { ids } = await client.sessions.append('s', {
    messages: [
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'first answer' },
      { role: 'user', content: 'second question' },
    ],
  });

  const context = await client.sessions.context('s', { system: 'You are terse.', dry_run: true, budget: 4000 });
  assert.equal(context.messages[0].role, 'system');
  assert.match(context.messages[0].content, /You are terse\./);
  assert.deepEqual(context.messages.at(-1), { role: 'user', content: 'second question' });
  assert.equal(context.max_input_tokens, 4000);

  const thread = await client.sessions.thread(ids[2]);
  assert.deepEqual(
    thread.entries.map((e) => e.id),
    ids,
  );

  const all = [];
  for await (const entry of client.sessions.iterEntries('s', { limit: 2 })) all.push(entry);
  const { entries } = await client.sessions.entries('s');
  assert.deepEqual(
    all.map((e) => e.id),
    entries.map((e) => e.id),
  );
  assert.ok(all.length >= 5, `${all.length} entries`);
  const page = await client.sessions.entries('s', { limit: 2 });
  assert.equal(page.entries.length, 2);
  assert.equal(typeof page.next, 'number');

  // An anchor: a named boundary, after which the history starts again.
  const anchor = await client.sessions.anchor('s', { name: 'phase/1', state: { step: 1 } });
  assert.ok(anchor.id > ids[2]);
  const anchors = await client.sessions.entries('s', { kind: 'anchor' });
  assert.deepEqual(anchors.entries.at(-1).payload, { name: 'phase/1', state: { step: 1 } });
  await client.sessions.append('s', { role: 'user', content: 'third question' });


  await client.sessions.consolidate('s', { through: ids[1] });
  assert.deepEqual((await client.sessions.history('s')).messages, [{ role: 'user', content: 'third question' }]);
  const [listed] = (await client.sessions.list()).sessions;
  assert.equal(listed.last_consolidated, ids[1]);

  const renewed = await client.sessions.new('s');
  assert.equal(typeof renewed.archived, 'number');
  assert.deepEqual((await client.sessions.history('s')).messages, []);
});

test('the model routes answer 503 no_model on a server without a model, at once', async () => {
  let requests = 0;
  const client = new Memtape({
    baseURL: server.url,
    agent: 'model-routes',
    fetch: (...args) => {
      requests++;
      return fetch(...args);
    },
  });
  await client.sessions.append('s', { role: 'user', content: 'hi' });
  for (const call of [
    () => client.sessions.consolidation('s'),
    () => client.sessions.extraction('s'),
    () => client.memory.emergence({ days: 3 }),
  ]) {
    requests = 0;
    const e = await call().catch((x) => x);
    assert.ok(e instanceof InternalServerError, String(e));
    assert.equal(e.status, 503);
    assert.equal(e.code, 'no_model');
    assert.match(e.message, /no model/);
    assert.equal(requests, 1, 'not retried');
  }
});

test('memory: save, show, view, versions, diff, undo, blame, file, as of', async () => {
  const client = scoped('memory');
  const v1 = await client.memory.save({ content: '# Memory\n- likes tea\n' });
  const v2 = await client.memory.save({ content: '# Memory\n- likes coffee\n' });
  assert.equal(v2.version, v1.version + 1);
  assert.equal(v2.source, 'memory.save');
  assert.deepEqual(v2.paths, ['MEMORY.md']);
  assert.match((await client.memory.show()).text, /likes coffee/);

  const view = await client.memory.view();
  assert.equal(view.version, v2.version);
  assert.equal(view.files['MEMORY.md'].content, '# Memory\n- likes coffee\n');

  const { versions } = await client.memory.versions({ path: 'MEMORY.md' });
  assert.deepEqual(
    versions.map((v) => v.version),
    [v1.version, v2.version],
  );

  const { diff } = await client.memory.diff({ from: v1.version, to: v2.version });
  assert.match(diff, /^-- likes tea$/m);
  assert.match(diff, /^\+- likes coffee$/m);

  const undone = await client.memory.undo({ version: v1.version });
  assert.equal(undone.recorded?.version, v2.version + 1);
  assert.equal((await client.memory.file({ path: 'MEMORY.md' })).content, '# Memory\n- likes tea\n');

  const blame = await client.memory.blame({ path: 'MEMORY.md' });
  assert.deepEqual(
    blame.lines.map((l) => [l.line, l.text]),
    [
      [1, '# Memory'],
      [2, '- likes tea'],
    ],
  );
  assert.equal(blame.lines[0].version, v1.version);

  // As it stood at version 2's entry.
  const then = await client.memory.asOf(v2.id);
  assert.equal(then.files['MEMORY.md'].content, '# Memory\n- likes coffee\n');
  assert.match((await client.memory.show({ as_of: String(v2.id) })).text, /likes coffee/);
});

test('memory: write a file with if_version, and a conflict', async () => {
  const client = scoped('memory-file');
  const written = await client.memory.writeFile({ path: 'memories/notes.md', content: 'one\n' });
  const file = await client.memory.file({ path: 'memories/notes.md' });
  assert.equal(file.content, 'one\n');
  assert.equal(file.memory_version, written.recorded.version);
  await client.memory.writeFile({ path: 'memories/notes.md', content: 'two\n', if_version: file.memory_version });
  const e = await client.memory
    .writeFile({ path: 'memories/notes.md', content: 'three\n', if_version: file.memory_version })
    .catch((x) => x);
  assert.ok(e instanceof ConflictError, String(e));
  assert.equal(e.status, 409);
  assert.equal(e.code, 'conflict');
  assert.equal((await client.memory.file({ path: 'memories/notes.md' })).content, 'two\n');
});

test('memory: daily notes, recall, flags, forget, prune, clear, dropped, restore', async () => {
  const client = scoped('memory-more');
  const note = await client.memory.daily({ content: 'met Bob at the station' });
  assert.match(note.paths[0], /^memory\/\d{4}-\d{2}-\d{2}\.md$/);
  assert.match((await client.memory.recall({ query: 'Bob' })).text, /met Bob at the station/);
  const old = await client.memory.daily({ content: 'an old note', date: '2020-01-15' });
  assert.deepEqual(old.paths, ['memory/2020-01-15.md']);

  await client.memory.save({ content: 'fact one\n' });
  const flagged = await client.memory.flags({ path: 'MEMORY.md', enabled: true, sort_order: 1 });
  assert.equal(flagged.source, 'flags');
  const file = await client.memory.file({ path: 'MEMORY.md' });
  assert.equal(file.enabled, true);
  assert.equal(file.sort_order, 1);

  const saved = await client.memory.save({ content: 'fact two\n' });
  const forgot = await client.memory.forget({ ids: [saved.id] });
  assert.equal(typeof forgot.version, 'number');
  assert.equal((await client.memory.file({ path: 'MEMORY.md' })).content, 'fact one\n');

  const pruned = await client.memory.prune({ days: 1 });
  assert.ok(pruned.removed >= 1, JSON.stringify(pruned));

  assert.deepEqual(await client.memory.dropped(), { dropped: [] });
  const e = await client.memory.restore(saved.id).catch((x) => x);
  assert.ok(e instanceof BadRequestError, String(e));
  assert.equal(e.code, 'bad_request');

  const cleared = await client.memory.clear();
  assert.equal(cleared.recorded?.source, 'memory.clear');
  assert.deepEqual((await client.memory.view()).files, {});
});

test('memory files under /memories: create, view, edit, rename, delete', async () => {
  const client = scoped('memories');
  assert.match((await client.memories.create({ path: '/memories/a.md', file_text: 'line one\nline two\n' })).text, /created/);
  assert.match((await client.memories.view({ path: '/memories/a.md' })).text, /1\tline one\n\s+2\tline two/);
  assert.match((await client.memories.view({ path: '/memories/a.md', start: 2, end: 2 })).text, /^(?!.*line one).*2\tline two/s);
  await client.memories.edit({ command: 'str_replace', path: '/memories/a.md', old_str: 'one', new_str: '1' });
  await client.memories.edit({ command: 'insert', path: '/memories/a.md', insert_line: 0, insert_text: 'zero' });
  await client.memories.rename({ old_path: '/memories/a.md', new_path: '/memories/b.md' });
  assert.match((await client.memories.view()).text, /b\.md/);
  assert.match((await client.memories.view({ path: '/memories/b.md' })).text, /1\tzero\n\s+2\tline 1\n\s+3\tline two/);
  await client.memories.delete({ path: '/memories/b.md' });
  const e = await client.memories.delete({ path: '/memories/b.md' }).catch((x) => x);
  assert.ok(e instanceof NotFoundError, String(e));
  assert.equal(e.code, 'not_found');
  assert.match(e.message, /does not exist/);
});

test('workspace files: write, read, edit, list', async () => {
  const client = scoped('workspace');
  const written = await client.workspace.write({ path: 'notes.md', content: 'hello workspace' });
  assert.equal(written.created, true);
  assert.equal((await client.workspace.read({ path: 'notes.md' })).content, 'hello workspace');
  const edited = await client.workspace.edit({ path: 'notes.md', old_text: 'hello', new_text: 'bye' });
  assert.equal(edited.replacements, 1);
  const listed = await client.workspace.list({ prefix: 'n' });
  assert.deepEqual(
    listed.files.map((f) => f.filename),
    ['notes.md'],
  );
});

test('tools: list and call; the WAL scanner', async () => {
  const client = scoped('tools');
  const { tools } = await client.tools.list();
  const save = tools.find((t) => t.name === 'memory.save');
  assert.ok(save, tools.map((t) => t.name).join(', '));
  assert.equal(save.input_schema.type, 'object');
  const result = await client.tools.call('memory.save', { input: { content: 'saved by a tool' } });
  assert.deepEqual(result, { text: 'saved to long-term memory', is_error: false });
  assert.equal((await client.memory.file({ path: 'MEMORY.md' })).content, 'saved by a tool');
  const refused = await client.tools.call('memory.save', { input: {} });
  assert.equal(refused.is_error, true);

  const { matches } = await client.wal.scan({ text: 'Actually, my name is Bob.' });
  assert.ok(matches.some((m) => m.category === 'correction'), JSON.stringify(matches));
});

test('export and import round trip (memtape and nanobot formats)', async () => {
  const client = scoped('transfer');
  await client.sessions.append('a', {
    messages: [
      { role: 'user', content: 'remember the blue door' },
      { role: 'assistant', content: 'I will.' },
    ],
  });
  const exported = await client.export({ session: 'a' });
  const lines = exported.trimEnd().split('\n').map((l) => JSON.parse(l));
  assert.equal(lines.length, 2);
  assert.deepEqual(lines[0].payload, { role: 'user', content: 'remember the blue door' });

  const imported = await client.import(exported, { session: 'b' });
  assert.equal(imported.entries, 2);
  assert.deepEqual(imported.sessions, [{ session: 'b' }]);
  assert.deepEqual((await client.sessions.history('b')).messages, (await client.sessions.history('a')).messages);

  // The lines as values; nanobot's format, into another agent.
  const nanobot = await client.export({ session: 'a', format: 'nanobot' });
  const values = nanobot.trimEnd().split('\n').map((l) => JSON.parse(l));
  const other = scoped('transfer-other');
  await other.import(values, { format: 'nanobot', session: 'c' });
  assert.deepEqual((await other.sessions.history('c')).messages, (await client.sessions.history('a')).messages);

  const e = await client.import('not json\n', { session: 'd' }).catch((x) => x);
  assert.ok(e instanceof BadRequestError, String(e));
  assert.match(e.message, /line 1/);
});

test('an upload goes on a message by reference and comes back as parts', async () => {
  const client = scoped('attachments');
  const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x6b, 0x69, 0x74, 0x74, 0x65, 0x6e]);
  const upload = await client.files.upload(png, { filename: 'cat.png', mediaType: 'image/png' });
  assert.equal(upload.media_type, 'image/png');
  assert.deepEqual(await client.files.get(upload.id), upload);
  await client.sessions.append('pics', { role: 'user', content: 'look', files: [upload.reference] });
  const refs = await client.sessions.history('pics');
  assert.deepEqual(refs.messages[0].files, [upload.reference]);
  const parts = await client.sessions.history('pics', { attachments: 'parts' });
  assert.deepEqual(parts.messages[0].content[1], {
    type: 'image_url',
    image_url: { url: 'data:image/png;base64,iVBORw0KGgpraXR0ZW4=', detail: 'low' },
  });
  const wrong = await client.files.upload(new TextEncoder().encode('text'), { mediaType: 'image/png' }).catch((x) => x);
  assert.ok(wrong instanceof UnprocessableEntityError, String(wrong));
});

test('retention and erasure (a server without keys is its own admin)', async () => {
  const client = scoped('erasure');
  assert.equal((await client.retention.get()).agent, 'erasure');
  const set = await client.retention.set({ messages_days: 30 });
  assert.equal(set.effective.messages_days, 30);
  const runs = await client.retention.run({ dry_run: true });
  assert.ok(Array.isArray(runs));
  assert.ok(runs.some((r) => r.agent === 'erasure'));

  await client.sessions.append('gone', { role: 'user', content: 'a secret to erase' });
  const dry = await client.erase({ what: 'session', session: 'gone', dry_run: true });
  assert.equal(dry.dry_run, true);
  assert.equal(dry.entries, 1);
  assert.equal((await client.sessions.history('gone')).messages.length, 1);
  const erased = await client.erase({ what: 'session', session: 'gone', reason: 'asked to' });
  assert.equal(typeof erased.receipt, 'number');
  assert.deepEqual((await client.sessions.history('gone')).messages, []);
  assert.deepEqual((await client.search({ q: 'secret' })).hits, []);
});

test('errors carry the status, code and message of the server', async () => {
  const client = scoped('errors');
  const missing = await client.sessions.history('nope').catch((x) => x);
  assert.ok(missing instanceof NotFoundError);
  assert.equal(missing.status, 404);
  assert.equal(missing.code, 'not_found');
  assert.equal(missing.message, 'no session nope');
  assert.deepEqual(missing.body, { error: { code: 'not_found', message: 'no session nope' } });

  const thread = await client.sessions.thread(987654321).catch((x) => x);
  assert.ok(thread instanceof NotFoundError);
  assert.equal(thread.message, 'no entry 987654321');

  // A role the API does not have (past the types, as JavaScript may send it).
  const bad = await client.sessions.append('s', { role: 'robot', content: 'beep' }).catch((x) => x);
  assert.ok(bad instanceof UnprocessableEntityError);
  assert.equal(bad.status, 422);
  assert.equal(bad.code, 'unprocessable');
  assert.match(bad.message, /unknown variant `robot`/);

  const query = await client.sessions.history('s', { max_messages: 'many' }).catch((x) => x);
  assert.ok(query instanceof BadRequestError);
  assert.equal(query.code, 'bad_request');
});

test('a write sent twice with the same idempotency key is stored once', async () => {
  const client = scoped('idempotency');
  const idempotencyKey = crypto.randomUUID();
  const first = await client.sessions.append('s', { role: 'user', content: 'only once' }, { idempotencyKey });
  const again = await client.sessions.append('s', { role: 'user', content: 'only once' }, { idempotencyKey });
  assert.deepEqual(again, first);
  assert.deepEqual((await client.sessions.history('s')).messages, [{ role: 'user', content: 'only once' }]);

  // The key names one request: another body under it is refused.
  const other = await client.sessions.append('s', { role: 'user', content: 'another' }, { idempotencyKey }).catch((x) => x);
  assert.ok(other instanceof UnprocessableEntityError, String(other));
  assert.match(other.message, /Idempotency-Key/);

  // Without a key of the caller's, each call is a write of its own.
  await client.memory.daily({ content: 'a note' });
  await client.memory.daily({ content: 'a note' });
  const { versions } = await client.memory.versions();
  assert.equal(versions.filter((v) => v.source === 'memory.daily').length, 2);
});

test('a write whose answer was lost is retried under its key, and stored once', async () => {
  // A proxy that passes the first request on to the server, waits for its answer, then
  // drops the connection instead of answering: the write landed, the client saw nothing.
  let seen = 0;
  const keys = [];
  const proxy = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    seen++;
    keys.push(req.headers['idempotency-key']);
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.connection;
    delete headers['content-length'];
    const upstream = await fetch(new URL(req.url, server.url), {
      method: req.method,
      headers,
      body: chunks.length ? Buffer.concat(chunks) : undefined,
    });
    const body = await upstream.text();
    if (seen === 1) {
      req.socket.destroy();
      return;
    }
    res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' });
    res.end(body);
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = proxy.address();
    const client = new Memtape({ baseURL: `http://127.0.0.1:${port}`, agent: 'lost-answer' });
    const appended = await client.sessions.append('s', { role: 'user', content: 'landed once' });
    assert.equal(seen, 2, 'retried once');
    assert.equal(keys[1], keys[0], 'under the same Idempotency-Key');
    const { entries } = await scoped('lost-answer').sessions.entries('s');
    assert.deepEqual(
      entries.map((e) => e.id),
      appended.ids,
    );
  } finally {
    proxy.closeAllConnections?.();
    await new Promise((resolve) => proxy.close(resolve));
  }
});
