// How the client reads in TypeScript, checked by the compiler (test/types.test.mjs runs
// `tsc -p tsconfig.test.json`): typed requests and answers, and `@ts-expect-error` where
// the types must refuse a call. Never run.

import Memtape, { NotFoundError, type ChatMessage, type EntryWire, type Params } from 'memtape';

const client = new Memtape({ baseURL: 'http://127.0.0.1:7077', agent: 'a', timeout: 5_000 });

export async function usage(): Promise<void> {
  const appended = await client.sessions.append('s', { role: 'user', content: 'hi' });
  const ids: number[] = appended.ids;
  await client.sessions.append('s', {
    messages: [
      { role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c', content: 'ok' },
    ],
  });
  await client.sessions.append('s', { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x' } }] });
  // @ts-expect-error: a role the API does not have
  await client.sessions.append('s', { role: 'robot', content: 'x' });

  const history = await client.sessions.history('s', { max_messages: 10, view: 'thread', user: null, timeout: 1_000 });
  const first: ChatMessage | undefined = history.messages[0];
  // @ts-expect-error: a misspelt parameter
  await client.sessions.history('s', { max_mesages: 1 });

  const { hits } = await client.search({ q: 'tea', mode: 'bm25', limit: 3 });
  const entry: EntryWire | undefined = hits[0]?.entry;
  // @ts-expect-error: `q` is required
  await client.search({ limit: 3 });
  // @ts-expect-error: not a mode
  await client.search({ q: 'tea', mode: 'fuzzy' });

  const jsonl: string = await client.export({ format: 'nanobot', session: 's' });
  await client.import(jsonl, { session: 't', idempotencyKey: 'k' });
  await client.import([{ role: 'user', content: 'x' }], { format: 'nanobot', session: 'u' });

  const version: number = (await client.memory.save({ content: 'x', if_version: 3 })).version;
  const { diff } = await client.memory.diff({ from: version - 1, to: version });
  // @ts-expect-error: `to` is required
  await client.memory.diff({ from: 1 });
  await client.memories.edit({ command: 'insert', path: '/memories/a.md', insert_line: 0, insert_text: 'x' });
  // @ts-expect-error: an insert needs its line
  await client.memories.edit({ command: 'insert', path: '/memories/a.md', insert_text: 'x' });
  // @ts-expect-error: healthz has no scope
  await client.healthz({ agent: 'x' });

  const params: Params<'GET /v1/memory/versions'> = { path: 'MEMORY.md', ops: true, agent: 'b' };
  await client.memory.versions(params);
  for await (const e of client.sessions.iterEntries('s', { limit: 50 })) void e.id;

  try {
    await client.sessions.history('nope');
  } catch (e) {
    if (e instanceof NotFoundError) {
      const status: number = e.status;
      const code: string | undefined = e.code;
      void [status, code];
    }
  }
  void [ids, first, entry, diff];
}

// The API's types keep their names next to the resources (`Sessions` is the answer of
// `sessions.list`, `SessionsResource` the namespace).
export async function names(): Promise<void> {
  const sessions: import('memtape').Sessions = await client.sessions.list();
  const tools: import('memtape').Tools = await client.tools.list();
  const agents: import('memtape').Agents = await client.agents.list();
  const resource: import('memtape').SessionsResource = client.sessions;
  void [sessions, tools, agents, resource];
}
