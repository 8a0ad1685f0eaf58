// The client: `Memtape`, its resources (sessions, memory, memories, workspace, tools, wal,
// retention, agents) and the one request path under them: URL and scope, the API key,
// timeouts, and retries of what is safe to send again (reads, and writes under an
// Idempotency-Key that stays the same across the retries of one call).

import {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
  MemtapeError,
} from './errors.js';
import { operations, type OperationInfo, type OperationKey, type Operations } from './operations.js';
import type * as S from './types.js';
import { VERSION } from './version.js';

/** Where the client goes when neither `baseURL` nor `MEMTAPE_URL` says. */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:7077';

/** How long one attempt may take by default (milliseconds). */
export const DEFAULT_TIMEOUT = 60_000;

/** How many times a failed request that is safe to send again is retried by default. */
export const DEFAULT_MAX_RETRIES = 2;

export interface ClientOptions {
  /** The server (default: env `MEMTAPE_URL`, else `http://127.0.0.1:7077`). */
  baseURL?: string | undefined;
  /**
   * The API key, sent as `Authorization: Bearer KEY` (default: env `MEMTAPE_API_KEY`;
   * `null` sends none). A server without keys needs none.
   */
  apiKey?: string | null | undefined;
  /** The agent every scoped call is for unless it names one (the server's default: `default`). */
  agent?: string | undefined;
  /** The user every scoped call is for unless it names one (default: none, the agent's own). */
  user?: string | undefined;
  /** How long one attempt may take, in milliseconds (default 60 000). */
  timeout?: number | undefined;
  /** Retries of a request that is safe to send again (default 2). */
  maxRetries?: number | undefined;
  /** Headers sent with every request. */
  defaultHeaders?: Record<string, string> | undefined;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch | undefined;
}

/** Options of one call, next to its query parameters. */
export interface RequestOptions {
  /** How long each attempt may take, in milliseconds. */
  timeout?: number;
  /** Retries of this call (when it is safe to send again). */
  maxRetries?: number;
  /** Aborts the call (an APIUserAbortError). */
  signal?: AbortSignal;
  /**
   * The `Idempotency-Key` of a write (default: a new UUID per call, the same for each of
   * its retries). Give your own to make a write safe to repeat across calls too: the
   * server runs it once per key (for 24 hours) and answers a repeat with the first answer.
   */
  idempotencyKey?: string;
  /** Headers for this call. */
  headers?: Record<string, string>;
}

const REQUEST_OPTIONS = ['timeout', 'maxRetries', 'signal', 'idempotencyKey', 'headers'] as const;

/** The scope of a call: `agent` and `user`, over the client's; `null` sends none. */
export interface Scope {
  agent?: string | null;
  user?: string | null;
}

type Query<K extends OperationKey> = Operations[K]['query'];

/** A call's parameters: its query parameters (with the scope) and its request options. */
export type Params<K extends OperationKey> = ('agent' extends keyof Query<K>
  ? Omit<Query<K>, 'agent' | 'user'> & Scope
  : Query<K>) &
  RequestOptions;

/** What an operation answers. */
export type Answer<K extends OperationKey> = Operations[K]['response'];

/**
 * Which client method calls which operation (`METHOD /path` of the OpenAPI document).
 * Every operation has one: the tests check it against the document and call each method.
 */
export const ROUTES = {
  healthz: 'GET /healthz',
  search: 'GET /v1/search',
  export: 'GET /v1/export',
  import: 'POST /v1/import',
  erase: 'POST /v1/erase',
  'agents.list': 'GET /v1/agents',
  'sessions.list': 'GET /v1/sessions',
  'sessions.start': 'POST /v1/sessions/{session}/start',
  'sessions.new': 'POST /v1/sessions/{session}/new',
  'sessions.append': 'POST /v1/sessions/{session}/messages',
  'sessions.history': 'GET /v1/sessions/{session}/history',
  'sessions.entries': 'GET /v1/sessions/{session}/entries',
  'sessions.anchor': 'POST /v1/sessions/{session}/anchors',
  'sessions.thread': 'GET /v1/entries/{id}/thread',
  'sessions.consolidate': 'POST /v1/sessions/{session}/consolidate',
  'sessions.context': 'POST /v1/sessions/{session}/context',
  'sessions.consolidation': 'POST /v1/sessions/{session}/consolidation',
  'sessions.extraction': 'POST /v1/sessions/{session}/extraction',
  'memory.view': 'GET /v1/memory',
  'memory.show': 'GET /v1/memory/show',
  'memory.save': 'POST /v1/memory/save',
  'memory.daily': 'POST /v1/memory/daily',
  'memory.versions': 'GET /v1/memory/versions',
  'memory.diff': 'GET /v1/memory/diff',
  'memory.undo': 'POST /v1/memory/undo',
  'memory.blame': 'GET /v1/memory/blame',
  'memory.file': 'GET /v1/memory/file',
  'memory.writeFile': 'PUT /v1/memory/file',
  'memory.recall': 'GET /v1/memory/recall',
  'memory.search': 'GET /v1/memory/search',
  'memory.forget': 'POST /v1/memory/forget',
  'memory.prune': 'POST /v1/memory/prune',
  'memory.flags': 'PUT /v1/memory/flags',
  'memory.clear': 'POST /v1/memory/clear',
  'memory.dropped': 'GET /v1/memory/dropped',
  'memory.restore': 'POST /v1/memory/dropped/{id}/restore',
  'memory.emergence': 'POST /v1/memory/emergence',
  'memories.view': 'GET /v1/memories',
  'memories.create': 'PUT /v1/memories',
  'memories.delete': 'DELETE /v1/memories',
  'memories.edit': 'PATCH /v1/memories',
  'memories.rename': 'POST /v1/memories/rename',
  'workspace.list': 'GET /v1/workspace/files',
  'workspace.read': 'GET /v1/workspace/file',
  'workspace.write': 'PUT /v1/workspace/file',
  'workspace.edit': 'PATCH /v1/workspace/file',
  'tools.list': 'GET /v1/tools',
  'tools.call': 'POST /v1/tools/{name}',
  'wal.scan': 'POST /v1/wal/scan',
  'nodes.add': 'POST /v1/sessions/{session}/nodes/{node}/turns',
  'nodes.history': 'GET /v1/sessions/{session}/nodes/{node}/history',
  'nodes.clear': 'POST /v1/sessions/{session}/nodes/{node}/clear',
  'nodes.export': 'GET /v1/sessions/{session}/nodes/{node}/export',
  'nodes.import': 'POST /v1/sessions/{session}/nodes/{node}/import',
  'nodes.cleanup': 'POST /v1/nodes/cleanup',
  'retention.get': 'GET /v1/retention',
  'retention.set': 'PUT /v1/retention',
  'retention.run': 'POST /v1/retention/run',
  'files.upload': 'POST /v1/files',
  'files.get': 'GET /v1/files/{id}',
} as const satisfies Record<string, OperationKey>;

// An operation of the document that no method calls fails the build here, naming it.
type Unrouted = Exclude<OperationKey, (typeof ROUTES)[keyof typeof ROUTES]>;
const everyOperationRouted: [Unrouted] extends [never] ? true : Unrouted = true;
void everyOperationRouted;

/** A value from the environment (Node's `process.env`), where there is one. */
function readEnv(name: string): string | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  const value = env?.[name]?.trim();
  return value ? value : undefined;
}

/** A random UUID (crypto.randomUUID; on Node 18, whose global `crypto` is off, node:crypto's). */
async function uuid(): Promise<string> {
  const crypto = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (crypto?.randomUUID) return crypto.randomUUID();
  const nodeCrypto = 'node:crypto';
  const { randomUUID } = (await import(nodeCrypto)) as { randomUUID: () => string };
  return randomUUID();
}

/** How long to wait before retry `attempt` (0 for the first): the server's Retry-After, else backoff. */
function retryDelay(attempt: number, headers: Headers | undefined): number {
  const ms = Number(headers?.get('retry-after-ms'));
  if (Number.isFinite(ms) && ms > 0 && ms <= 60_000) return ms;
  const after = headers?.get('retry-after');
  if (after) {
    const seconds = Number(after);
    const wait = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(after) - Date.now();
    if (Number.isFinite(wait) && wait > 0 && wait <= 60_000) return wait;
  }
  const backoff = Math.min(500 * 2 ** attempt, 8_000);
  return backoff * (1 - Math.random() * 0.25);
}

/** Whether an error answer may go away if the same request is sent again. */
function retryableStatus(error: APIError): boolean {
  if (error.status === 503 && error.code === 'no_model') return false; // configuration, not load
  return error.status === 408 || error.status === 429 || error.status >= 500;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new APIUserAbortError());
    const onAbort = () => {
      clearTimeout(timer);
      reject(new APIUserAbortError());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * A client of a memtape server.
 *
 * ```ts
 * const client = new Memtape(); // MEMTAPE_URL, MEMTAPE_API_KEY
 * await client.sessions.append('s1', { role: 'user', content: 'I prefer tea.' });
 * const { messages } = await client.sessions.history('s1');
 * ```
 */
export class Memtape {
  readonly baseURL: string;
  readonly apiKey: string | null;
  readonly agent: string | undefined;
  readonly user: string | undefined;
  readonly timeout: number;
  readonly maxRetries: number;
  private readonly options: ClientOptions;
  private readonly fetch: typeof fetch;

  readonly agents: AgentsResource;
  readonly sessions: SessionsResource;
  readonly memory: MemoryResource;
  readonly memories: MemoriesResource;
  readonly workspace: WorkspaceResource;
  readonly tools: ToolsResource;
  readonly wal: WalResource;
  readonly retention: RetentionResource;
  readonly nodes: NodesResource;
  readonly files: FilesResource;

  constructor(options: ClientOptions = {}) {
    this.options = options;
    this.baseURL = (options.baseURL ?? readEnv('MEMTAPE_URL') ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
    this.apiKey = options.apiKey === undefined ? (readEnv('MEMTAPE_API_KEY') ?? null) : options.apiKey;
    this.agent = options.agent;
    this.user = options.user;
    this.timeout = options.timeout ?? DEFAULT_TIMEOUT;
    this.maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
    const f = options.fetch ?? (globalThis as { fetch?: typeof fetch }).fetch;
    if (!f) throw new MemtapeError('no fetch: pass `fetch` in the options (Node 18 or later has one)');
    this.fetch = f;
    this.agents = new AgentsResource(this);
    this.sessions = new SessionsResource(this);
    this.memory = new MemoryResource(this);
    this.memories = new MemoriesResource(this);
    this.workspace = new WorkspaceResource(this);
    this.tools = new ToolsResource(this);
    this.wal = new WalResource(this);
    this.retention = new RetentionResource(this);
    this.nodes = new NodesResource(this);
    this.files = new FilesResource(this);
  }

  /** A client like this one with some options changed (another agent, user, key, ...). */
  withOptions(options: ClientOptions): Memtape {
    return new Memtape({
      ...this.options,
      baseURL: this.baseURL,
      apiKey: this.apiKey,
      ...options,
    });
  }

  /** Liveness: `{status: "ok"}` (needs no key). */
  healthz(options?: RequestOptions): Promise<S.Health> {
    return this.request('GET /healthz', {}, undefined, options);
  }

  /** Searches the tape: messages, tool results, memory (`q` is required). */
  search(params: Params<'GET /v1/search'>): Promise<S.Hits> {
    return this.request('GET /v1/search', {}, undefined, params);
  }

  /** Exports JSONL text: memtape's lossless format (default), or one session as Bub's or nanobot's. */
  export(params?: Params<'GET /v1/export'>): Promise<string> {
    return this.request('GET /v1/export', {}, undefined, params);
  }

  /**
   * Imports JSONL (`application/x-ndjson`): all of it or nothing. `data` is the text, or
   * the lines as values (each sent as one line of JSON).
   */
  import(data: string | readonly unknown[], params?: Params<'POST /v1/import'>): Promise<S.ImportWire> {
    const text = typeof data === 'string' ? data : data.map((line) => `${JSON.stringify(line)}\n`).join('');
    return this.request('POST /v1/import', {}, text, params);
  }

  /** Erases a user, a session, entries or a piece of text, with a receipt (admin keys only). */
  erase(body: S.EraseBody, params?: Params<'POST /v1/erase'>): Promise<S.ErasedWire> {
    return this.request('POST /v1/erase', {}, body, params);
  }

  /**
   * Sends one operation: `path` fills the path's `{names}`, `body` is the request body
   * (JSON, or the text of an `application/x-ndjson` body), `params` holds the query
   * parameters and the request options. Every method goes through here.
   */
  async request<K extends OperationKey>(
    key: K,
    path: Record<string, string | number>,
    body: unknown,
    params?: Params<K> | RequestOptions,
  ): Promise<Answer<K>> {
    const op: OperationInfo = operations[key];
    const all = { ...(params ?? {}) } as Record<string, unknown>;
    const options: RequestOptions = {};
    for (const name of REQUEST_OPTIONS) {
      if (all[name] !== undefined) (options as Record<string, unknown>)[name] = all[name];
      delete all[name];
    }

    let url = this.baseURL;
    url += op.path.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = path[name];
      if (value === undefined || value === null || value === '') {
        throw new TypeError(`${key}: the path parameter \`${name}\` is required`);
      }
      return encodeURIComponent(String(value));
    });
    const query = new URLSearchParams();
    if (op.scoped) {
      for (const name of ['agent', 'user'] as const) {
        if (!(name in all)) all[name] = this[name];
      }
    }
    for (const [name, value] of Object.entries(all)) {
      if (value === undefined || value === null) continue;
      query.append(name, String(value));
    }
    const search = query.toString();
    if (search) url += `?${search}`;

    const headers: Record<string, string> = { accept: 'application/json' };
    const form = op.body === 'multipart/form-data';
    if (form) {
      // fetch writes the form's content type (with its boundary). The server takes a form
      // only with an Authorization header, which any value satisfies without keys.
      headers.authorization = 'Bearer local';
    } else if (op.method !== 'GET' && op.method !== 'HEAD') {
      // The server takes a write as JSON (or JSONL), also one without a body.
      headers['content-type'] = op.body ?? 'application/json';
    }
    if (typeof (globalThis as { document?: unknown }).document === 'undefined') {
      headers['user-agent'] = `memtape-typescript/${VERSION}`;
    }
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    // One key for every attempt of this call: a retry of a write that did land is answered
    // with the first answer, and stores nothing.
    if (op.idempotencyKey) headers['idempotency-key'] = options.idempotencyKey ?? (await uuid());
    Object.assign(headers, this.options.defaultHeaders, options.headers);

    let payload: string | FormData | undefined;
    if (form) {
      payload = body as FormData;
    } else if (body !== undefined && op.body !== null) {
      payload = op.body === 'application/json' ? JSON.stringify(body) : String(body);
    }

    const retryable = op.method === 'GET' || op.method === 'HEAD' || 'idempotency-key' in headers;
    const maxRetries = retryable ? (options.maxRetries ?? this.maxRetries) : 0;
    const timeout = options.timeout ?? this.timeout;
    const signal = options.signal;

    // Whether an attempt got no answer: then a 409 of the next one is most likely that
    // attempt still running under the same key (or its recorded 409, replayed: harmless).
    let unanswered = false;
    for (let attempt = 0; ; attempt++) {
      if (signal?.aborted) throw new APIUserAbortError();
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeout);
      const onAbort = () => controller.abort();
      signal?.addEventListener('abort', onAbort, { once: true });
      let response: globalThis.Response | undefined;
      let text = '';
      let failure: MemtapeError;
      try {
        response = await this.fetch(url, { method: op.method, headers, body: payload, signal: controller.signal });
        // Read within the timeout too: an export streams.
        text = await response.text();
      } catch (e) {
        if (signal?.aborted) throw new APIUserAbortError();
        failure = timedOut
          ? new APIConnectionTimeoutError(`Request timed out after ${timeout} ms.`)
          : new APIConnectionError(`Connection error: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
        response = undefined;
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
      if (response) {
        if (response.ok) return parse(key, op.response, text) as Answer<K>;
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const error = APIError.from(response.status, json, text, response.headers);
        const inFlight = error.status === 409 && unanswered && op.idempotencyKey;
        if (!retryableStatus(error) && !inFlight) throw error;
        failure = error;
      } else {
        unanswered = true;
      }
      if (attempt >= maxRetries) throw failure!;
      await sleep(retryDelay(attempt, response?.headers), signal);
    }
  }
}

function parse(key: string, kind: 'json' | 'text' | 'none', text: string): unknown {
  if (kind === 'text') return text;
  if (kind === 'none' || text === '') return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new MemtapeError(`${key}: the answer is not JSON: ${(e as Error).message}`);
  }
}

/** A group of methods of the client. */
class Resource {
  constructor(protected readonly client: Memtape) {}
}

/** The tenant's agents. */
export class AgentsResource extends Resource {
  /** The tenant's agents, with their users and how much each holds. */
  list(options?: RequestOptions): Promise<S.Agents> {
    return this.client.request('GET /v1/agents', {}, undefined, options);
  }
}

/** Sessions: the tape of a conversation, its history, and what is built from it. */
export class SessionsResource extends Resource {
  /** The agent's sessions (of every user, or of `user`). */
  list(params?: Params<'GET /v1/sessions'>): Promise<S.Sessions> {
    return this.client.request('GET /v1/sessions', {}, undefined, params);
  }

  /** Starts (or resumes) a session the way Bub does. */
  start(session: string, params?: Params<'POST /v1/sessions/{session}/start'>): Promise<S.Started> {
    return this.client.request('POST /v1/sessions/{session}/start', { session }, undefined, params);
  }

  /** nanobot's `/new`: archives the unconsolidated messages, then starts the conversation again. */
  new(session: string, params?: Params<'POST /v1/sessions/{session}/new'>): Promise<S.NewWire> {
    return this.client.request('POST /v1/sessions/{session}/new', { session }, undefined, params);
  }

  /**
   * Appends one message, or several in order (`{messages: [...]}`, one transaction):
   * OpenAI chat messages, with tool calls, tool results and content parts (images, files).
   */
  append(
    session: string,
    body: S.AppendBody,
    params?: Params<'POST /v1/sessions/{session}/messages'>,
  ): Promise<S.Appended> {
    return this.client.request('POST /v1/sessions/{session}/messages', { session }, body, params);
  }

  /** The history a model would get: the unconsolidated tail of the current thread. */
  history(session: string, params?: Params<'GET /v1/sessions/{session}/history'>): Promise<S.History> {
    return this.client.request('GET /v1/sessions/{session}/history', { session }, undefined, params);
  }

  /** A page of the session's tape entries (`next` is the cursor of the next page). */
  entries(session: string, params?: Params<'GET /v1/sessions/{session}/entries'>): Promise<S.Entries> {
    return this.client.request('GET /v1/sessions/{session}/entries', { session }, undefined, params);
  }

  /** Every entry from `after` on, page by page (`limit` entries a page). */
  async *iterEntries(
    session: string,
    params?: Params<'GET /v1/sessions/{session}/entries'>,
  ): AsyncGenerator<S.EntryWire, void, undefined> {
    let after = params?.after;
    for (;;) {
      const page = await this.entries(session, { ...params, ...(after === undefined ? {} : { after }) });
      yield* page.entries;
      if (page.next === undefined || page.next === null || page.entries.length === 0) return;
      after = page.next;
    }
  }

  /** Writes an anchor (a named boundary, with optional state). */
  anchor(
    session: string,
    body: S.AnchorBody,
    params?: Params<'POST /v1/sessions/{session}/anchors'>,
  ): Promise<S.Written> {
    return this.client.request('POST /v1/sessions/{session}/anchors', { session }, body, params);
  }

  /** The thread that ends at an entry, root first. */
  thread(id: number, params?: Params<'GET /v1/entries/{id}/thread'>): Promise<S.Thread> {
    return this.client.request('GET /v1/entries/{id}/thread', { id }, undefined, params);
  }

  /** Moves the consolidation pointer: entries up to `through` leave the history. */
  consolidate(
    session: string,
    body: S.ConsolidateBody,
    params?: Params<'POST /v1/sessions/{session}/consolidate'>,
  ): Promise<S.Written> {
    return this.client.request('POST /v1/sessions/{session}/consolidate', { session }, body, params);
  }

  /** Builds the prompt for the session within a token budget. */
  context(
    session: string,
    body: S.ContextBody = {},
    params?: Params<'POST /v1/sessions/{session}/context'>,
  ): Promise<S.ContextWire> {
    return this.client.request('POST /v1/sessions/{session}/context', { session }, body, params);
  }

  /** Consolidates with the server's model (503 `no_model` on a server without one). */
  consolidation(
    session: string,
    body: S.ConsolidationBody = {},
    params?: Params<'POST /v1/sessions/{session}/consolidation'>,
  ): Promise<S.ConsolidationWire> {
    return this.client.request('POST /v1/sessions/{session}/consolidation', { session }, body, params);
  }

  /** Extracts memory from the session with the server's model (503 `no_model` without one). */
  extraction(
    session: string,
    params?: Params<'POST /v1/sessions/{session}/extraction'>,
  ): Promise<S.MemoryRunWire> {
    return this.client.request('POST /v1/sessions/{session}/extraction', { session }, undefined, params);
  }
}

/** Memory: long-term facts (MEMORY.md), daily notes, files, versions, diff, undo, blame. */
export class MemoryResource extends Resource {
  /** Every memory file of the scope, and the memory's version (`as_of`: as it stood then). */
  view(params?: Params<'GET /v1/memory'>): Promise<S.MemoryWire> {
    return this.client.request('GET /v1/memory', {}, undefined, params);
  }

  /** The memory as it stood at a moment: an RFC 3339 time or an entry id. */
  asOf(asOf: string | number, params?: Omit<Params<'GET /v1/memory'>, 'as_of'>): Promise<S.MemoryWire> {
    return this.view({ ...params, as_of: String(asOf) });
  }

  /** The memory as text, as a model would be shown it. */
  show(params?: Params<'GET /v1/memory/show'>): Promise<S.TextWire> {
    return this.client.request('GET /v1/memory/show', {}, undefined, params);
  }

  /** Replaces long-term memory (MEMORY.md) whole. */
  save(body: S.SaveBody, params?: Params<'POST /v1/memory/save'>): Promise<S.VersionWire> {
    return this.client.request('POST /v1/memory/save', {}, body, params);
  }

  /** Appends a note to a day's daily notes (default today). */
  daily(body: S.DailyBody, params?: Params<'POST /v1/memory/daily'>): Promise<S.VersionWire> {
    return this.client.request('POST /v1/memory/daily', {}, body, params);
  }

  /** The memory's versions, oldest first (of one file with `path`). */
  versions(params?: Params<'GET /v1/memory/versions'>): Promise<S.Versions> {
    return this.client.request('GET /v1/memory/versions', {}, undefined, params);
  }

  /** What changed between two versions, as a unified diff. */
  diff(params: Params<'GET /v1/memory/diff'>): Promise<S.DiffWire> {
    return this.client.request('GET /v1/memory/diff', {}, undefined, params);
  }

  /** Returns the memory to a version (as a new version). */
  undo(body: S.UndoBody, params?: Params<'POST /v1/memory/undo'>): Promise<S.MaybeRecorded> {
    return this.client.request('POST /v1/memory/undo', {}, body, params);
  }

  /** A memory file line by line, with the version and the tape entries each line came from. */
  blame(params: Params<'GET /v1/memory/blame'>): Promise<S.BlameWire> {
    return this.client.request('GET /v1/memory/blame', {}, undefined, params);
  }

  /** One memory file, and the memory version it was read at (a write's `if_version`). */
  file(params: Params<'GET /v1/memory/file'>): Promise<S.FileWire> {
    return this.client.request('GET /v1/memory/file', {}, undefined, params);
  }

  /** Writes a memory file whole (`if_version`: only if the memory is still there). */
  writeFile(body: S.FileBody, params?: Params<'PUT /v1/memory/file'>): Promise<S.MaybeRecorded> {
    return this.client.request('PUT /v1/memory/file', {}, body, params);
  }

  /** Recalls memory: long-term memory and recent daily notes, or the lines matching `query`. */
  recall(params?: Params<'GET /v1/memory/recall'>): Promise<S.TextWire> {
    return this.client.request('GET /v1/memory/recall', {}, undefined, params);
  }

  /** Searches memory (HISTORY.md too): the lines matching `query`; `file` searches one file. */
  search(params: Params<'GET /v1/memory/search'>): Promise<S.MemoryLineWire[]> {
    return this.client.request('GET /v1/memory/search', {}, undefined, params);
  }

  /** Forgets changes (by the entry ids `versions` lists). */
  forget(body: S.ForgetBody, params?: Params<'POST /v1/memory/forget'>): Promise<S.VersionWire> {
    return this.client.request('POST /v1/memory/forget', {}, body, params);
  }

  /** Removes daily notes older than `days` (default 30). */
  prune(body: S.PruneBody = {}, params?: Params<'POST /v1/memory/prune'>): Promise<S.Pruned> {
    return this.client.request('POST /v1/memory/prune', {}, body, params);
  }

  /** Sets a file's flags (injected into the system prompt or not, and where). */
  flags(body: S.FlagsBody, params?: Params<'PUT /v1/memory/flags'>): Promise<S.VersionWire> {
    return this.client.request('PUT /v1/memory/flags', {}, body, params);
  }

  /** Clears the memory (as a new version: undo brings it back). */
  clear(params?: Params<'POST /v1/memory/clear'>): Promise<S.MaybeRecorded> {
    return this.client.request('POST /v1/memory/clear', {}, undefined, params);
  }

  /** The facts a model's rewrite of a memory file left out, newest first. */
  dropped(params?: Params<'GET /v1/memory/dropped'>): Promise<S.DroppedList> {
    return this.client.request('GET /v1/memory/dropped', {}, undefined, params);
  }

  /** Puts a dropped fact back into its file. */
  restore(id: number, params?: Params<'POST /v1/memory/dropped/{id}/restore'>): Promise<S.MaybeRecorded> {
    return this.client.request('POST /v1/memory/dropped/{id}/restore', { id }, undefined, params);
  }

  /** Runs emergence over the newest daily notes with the server's model (503 `no_model` without one). */
  emergence(body: S.EmergenceBody = {}, params?: Params<'POST /v1/memory/emergence'>): Promise<S.MemoryRunWire> {
    return this.client.request('POST /v1/memory/emergence', {}, body, params);
  }
}

/** Memory files under /memories, as Anthropic's memory tool sees them. */
export class MemoriesResource extends Resource {
  /** Lists a directory or shows a file (`path`; `start`/`end`: a range of lines). */
  view(params?: Params<'GET /v1/memories'>): Promise<S.FileText> {
    return this.client.request('GET /v1/memories', {}, undefined, params);
  }

  /** Creates (or overwrites) a file. */
  create(body: S.CreateBody, params?: Params<'PUT /v1/memories'>): Promise<S.FileText> {
    return this.client.request('PUT /v1/memories', {}, body, params);
  }

  /** Deletes a file or a directory (`path` is required). */
  delete(params: Params<'DELETE /v1/memories'>): Promise<S.FileText> {
    return this.client.request('DELETE /v1/memories', {}, undefined, params);
  }

  /** Edits a file: `str_replace` or `insert`. */
  edit(body: S.EditBody, params?: Params<'PATCH /v1/memories'>): Promise<S.FileText> {
    return this.client.request('PATCH /v1/memories', {}, body, params);
  }

  /** Renames a file or a directory. */
  rename(body: S.RenameBody, params?: Params<'POST /v1/memories/rename'>): Promise<S.FileText> {
    return this.client.request('POST /v1/memories/rename', {}, body, params);
  }
}

/** Workspace files, as MateClaw's tools see them (JSON answers in MateClaw's shape). */
export class WorkspaceResource extends Resource {
  /** Lists the workspace's files (`prefix`: only those under it). */
  list(params?: Params<'GET /v1/workspace/files'>): Promise<S.WorkspaceAnswer> {
    return this.client.request('GET /v1/workspace/files', {}, undefined, params);
  }

  /** Reads a file (`path` is required). */
  read(params: Params<'GET /v1/workspace/file'>): Promise<S.WorkspaceAnswer> {
    return this.client.request('GET /v1/workspace/file', {}, undefined, params);
  }

  /** Writes a file whole. */
  write(body: S.WriteBody, params?: Params<'PUT /v1/workspace/file'>): Promise<S.WorkspaceAnswer> {
    return this.client.request('PUT /v1/workspace/file', {}, body, params);
  }

  /** Replaces text in a file. */
  edit(body: S.WorkspaceEditBody, params?: Params<'PATCH /v1/workspace/file'>): Promise<S.WorkspaceAnswer> {
    return this.client.request('PATCH /v1/workspace/file', {}, body, params);
  }
}

/** The memory tools a model calls, run by the server. */
export class ToolsResource extends Resource {
  /** Every tool, with its input schema. */
  list(options?: RequestOptions): Promise<S.Tools> {
    return this.client.request('GET /v1/tools', {}, undefined, options);
  }

  /** Calls a tool by name (`memory.save`, `memory`, ...). */
  call(name: string, body: S.ToolCallBody, params?: Params<'POST /v1/tools/{name}'>): Promise<S.ToolResult> {
    return this.client.request('POST /v1/tools/{name}', { name }, body, params);
  }
}

/** The WAL scanner. */
export class WalResource extends Resource {
  /** What the WAL scanner finds in a user message (stores nothing). */
  scan(body: S.WalScanBody, options?: RequestOptions): Promise<S.WalScan> {
    return this.client.request('POST /v1/wal/scan', {}, body, options);
  }
}

/** Dify's node memory: a workflow node's turns in a conversation (the app is the agent). */
export class NodesResource extends Resource {
  /** Adds a turn to the node's memory (Dify's `add_messages` then `flush`). */
  add(
    session: string,
    node: string,
    body: S.NodeTurnBody,
    params?: Params<'POST /v1/sessions/{session}/nodes/{node}/turns'>,
  ): Promise<S.NodeAdded> {
    return this.client.request('POST /v1/sessions/{session}/nodes/{node}/turns', { session, node }, body, params);
  }

  /** The node's history before it answers `message_id` (empty for a node that never ran). */
  history(
    session: string,
    node: string,
    params: Params<'GET /v1/sessions/{session}/nodes/{node}/history'>,
  ): Promise<S.NodeHistory> {
    return this.client.request('GET /v1/sessions/{session}/nodes/{node}/history', { session, node }, undefined, params);
  }

  /** Empties the node's memory (its turns stay on the tape). */
  clear(
    session: string,
    node: string,
    params?: Params<'POST /v1/sessions/{session}/nodes/{node}/clear'>,
  ): Promise<S.NodeCleared> {
    return this.client.request('POST /v1/sessions/{session}/nodes/{node}/clear', { session, node }, undefined, params);
  }

  /** The node's memory in Dify's stored form (`{version: 1, messages: [...]}`). */
  export(
    session: string,
    node: string,
    params?: Params<'GET /v1/sessions/{session}/nodes/{node}/export'>,
  ): Promise<S.DifyNodeFile> {
    return this.client.request('GET /v1/sessions/{session}/nodes/{node}/export', { session, node }, undefined, params);
  }

  /** Imports Dify's stored form into a node that has no memory yet (all or nothing). */
  import(
    session: string,
    node: string,
    body: S.DifyNodeFile,
    params?: Params<'POST /v1/sessions/{session}/nodes/{node}/import'>,
  ): Promise<S.NodeImported> {
    return this.client.request('POST /v1/sessions/{session}/nodes/{node}/import', { session, node }, body, params);
  }

  /** Clears every node memory idle for more than `older_than_days` days (`dry_run` reports only). */
  cleanup(body: S.NodeCleanupBody = {}, params?: Params<'POST /v1/nodes/cleanup'>): Promise<S.NodeCleanupWire> {
    return this.client.request('POST /v1/nodes/cleanup', {}, body, params);
  }
}

/** Retention: how long the raw conversation is kept. */
export class RetentionResource extends Resource {
  /** The agent's retention policy, and where it came from. */
  get(params?: Params<'GET /v1/retention'>): Promise<S.AgentRetentionWire> {
    return this.client.request('GET /v1/retention', {}, undefined, params);
  }

  /** Sets the agent's retention policy (admin keys only). */
  set(body: S.RetentionWire, params?: Params<'PUT /v1/retention'>): Promise<S.AgentRetentionWire> {
    return this.client.request('PUT /v1/retention', {}, body, params);
  }

  /** Runs the tenant's retention now (admin keys only; `dry_run` counts and changes nothing). */
  run(body: S.RetentionRunBody = {}, options?: RequestOptions): Promise<S.RetentionRunWire[]> {
    return this.client.request('POST /v1/retention/run', {}, body, options);
  }
}

/** Uploads: files a message attaches by reference (Dify's `local_file`). */
export class FilesResource extends Resource {
  /**
   * Uploads a file (an image, a PDF, UTF-8 text; at most the server's upload limit); the
   * answer holds its id and a reference ready for a message's `files`.
   */
  upload(
    file: Blob | Uint8Array,
    options: RequestOptions & { filename?: string; mediaType?: string } = {},
  ): Promise<S.UploadWire> {
    const { filename = 'upload', mediaType = 'application/octet-stream', ...rest } = options;
    const blob = file instanceof Blob ? file : new Blob([file as BlobPart], { type: mediaType });
    const form = new FormData();
    form.append('file', blob, filename);
    return this.client.request('POST /v1/files', {}, form, rest);
  }

  /** What an upload of the tenant is (404 for another tenant's). */
  get(id: string, options?: RequestOptions): Promise<S.UploadWire> {
    return this.client.request('GET /v1/files/{id}', { id }, undefined, options);
  }
}
