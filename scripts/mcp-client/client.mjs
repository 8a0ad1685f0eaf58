// memtape's MCP server driven by the official MCP TypeScript SDK, as a host would: initialize,
// list and call every tool with valid input, list and read the memory files, subscribe and
// receive an update notification, get the prompt. On a fresh store, for the default agent.
//
//   node client.mjs --stdio MEMTAPE_BINARY [ARGS...]   launches `MEMTAPE_BINARY mcp ARGS`
//   node client.mjs --url URL [--key KEY]              connects to /mcp over streamable HTTP
//
// Exits 0 when every check holds; otherwise prints what failed and exits 1.

import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
let transport;
let label;
if (argv[0] === "--stdio" && argv[1]) {
  label = "stdio";
  transport = new StdioClientTransport({
    command: argv[1],
    args: ["mcp", ...argv.slice(2)],
    env: { ...process.env },
    stderr: "inherit",
  });
} else if (argv[0] === "--url" && argv[1]) {
  label = "http";
  const keyAt = argv.indexOf("--key");
  const headers = keyAt > 0 ? { Authorization: `Bearer ${argv[keyAt + 1]}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(argv[1]), { requestInit: { headers } });
} else {
  console.error("usage: client.mjs --stdio MEMTAPE [ARGS...] | --url URL [--key KEY]");
  process.exit(2);
}

const updates = [];
let updated = () => {};
const client = new Client({ name: "memtape-ts-client", version: "1.0.0" });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  updates.push(n.params.uri);
  updated();
});

function text(result) {
  return result.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
}

async function ok(name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.notEqual(result.isError, true, `${name} refused: ${text(result)}`);
  return text(result);
}

async function okJson(name, args) {
  return JSON.parse(await ok(name, args));
}

async function read(uri) {
  const result = await client.readResource({ uri });
  assert.equal(result.contents[0].uri, uri);
  return result.contents[0].text;
}

function nextUpdate() {
  if (updates.length) return Promise.resolve(updates.shift());
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no update notification in 30 s")), 30000);
    updated = () => {
      clearTimeout(timer);
      updated = () => {};
      resolve(updates.shift());
    };
  });
}

async function walk() {
  await client.connect(transport);
  assert.equal(client.getServerVersion().name, "memtape");
  assert.match(client.getInstructions() ?? "", /memory_search/);
  assert.equal(client.getServerCapabilities().resources.subscribe, true);

  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  for (const t of tools) {
    assert.match(t.name, /^[a-zA-Z0-9_-]{1,64}$/, `${t.name} is not a host-safe name`);
    assert.equal(t.inputSchema.type, "object", t.name);
  }
  const expected = [
    "edit_workspace_memory_file", "list_workspace_memory_files", "memory", "memory_as_of",
    "memory_blame", "memory_clear",
    "memory_consolidate", "memory_daily", "memory_dropped", "memory_emerge", "memory_extract",
    "memory_forget", "memory_recall", "memory_restore", "memory_save", "memory_search",
    "memory_show", "node_add", "node_cleanup", "node_clear", "node_history",
    "read_workspace_memory_file", "tape_append", "tape_context",
    "tape_history", "tape_search", "write_workspace_memory_file",
  ];
  assert.deepEqual(names, expected);

  const appended = await okJson("tape_append", {
    session: "chat",
    messages: [
      { role: "user", content: "Hi, my name is Ada. I prefer dark mode." },
      { role: "assistant", content: "Hello Ada!" },
    ],
  });
  assert.equal(appended.ids.length, 2);
  assert.ok(appended.captured.some((c) => c.category === "preference"), "the WAL ran");
  const history = await okJson("tape_history", { session: "chat" });
  assert.deepEqual(history.messages.at(-1), { role: "assistant", content: "Hello Ada!" });
  const hits = await okJson("tape_search", { query: "dark mode", mode: "bm25" });
  assert.match(hits.hits[0].entry.payload.content, /dark mode/);
  const context = await okJson("tape_context", { session: "chat", budget: 4000, system: "Be brief." });
  assert.equal(context.messages[0].role, "system");
  assert.ok(context.tokens <= 4000);

  assert.equal(await ok("memory_save", { content: "Ada likes green tea." }), "saved to long-term memory");
  // Time travel and blame: the first version as of its own entry id, then blamed.
  const first = await okJson("memory_as_of", { as_of: "2100-01-01T00:00:00Z", path: "MEMORY.md" });
  assert.equal(first.content, "Ada likes green tea.");
  const blamed = await okJson("memory_blame", { path: "SESSION-STATE.md" });
  assert.ok(
    blamed.lines.some((l) => l.source === "wal" && l.causes.some((c) => c.id === appended.ids[0])),
    "the WAL line leads to the message that caused it",
  );
  const before = await client.callTool({ name: "memory_as_of", arguments: { as_of: "1970-01-01T00:00:00Z", path: "MEMORY.md" } });
  assert.equal(before.isError, true, "no MEMORY.md before any memory");
  assert.match(await ok("memory_show", {}), /MEMORY\.md/);
  assert.match(await ok("memory_recall", { query: "tea" }), /green tea/);
  assert.match(await ok("memory_daily", { content: "Ada visited Lisbon." }), /^appended to daily notes/);
  assert.match(await ok("memory_search", { query: "Lisbon" }), /Ada visited Lisbon\./);
  assert.equal(
    await ok("memory", { command: "create", path: "/memories/notes.md", file_text: "likes chess\n" }),
    "File created successfully at: /memories/notes.md",
  );
  await ok("write_workspace_memory_file", { filename: "PROFILE.md", content: "# Profile\nName: Ada\n" });
  await ok("edit_workspace_memory_file", { filename: "PROFILE.md", oldText: "Name: Ada", newText: "Name: Ada Lovelace" });
  const listed = await okJson("list_workspace_memory_files", {});
  assert.ok(listed.files.some((f) => f.filename === "PROFILE.md"));
  const profile = await okJson("read_workspace_memory_file", { filename: "PROFILE.md" });
  assert.equal(profile.content, "# Profile\nName: Ada Lovelace\n");
  const found = await okJson("tape_search", { query: "Lisbon", mode: "bm25", kind: "event" });
  assert.match(await ok("memory_forget", { ids: [found.hits[0].entry.id] }), /^forgot 1 change/);

  const refused = await client.callTool({ name: "memory_save", arguments: { wrong: 1 } });
  assert.equal(refused.isError, true);

  const { resources } = await client.listResources();
  const uris = resources.map((r) => r.uri);
  for (const uri of ["memtape://memory/MEMORY.md", "memtape://memory/PROFILE.md",
    "memtape://memory/SESSION-STATE.md", "memtape://memory/memories/notes.md"]) {
    assert.ok(uris.includes(uri), `${uri} in ${uris}`);
  }
  assert.equal(await read("memtape://memory/MEMORY.md"), "Ada likes green tea.");
  assert.equal(await read("memtape://memory/PROFILE.md"), "# Profile\nName: Ada Lovelace\n");

  await client.subscribeResource({ uri: "memtape://memory/MEMORY.md" });
  await ok("memory_save", { content: "Ada likes oolong." });
  assert.equal(await nextUpdate(), "memtape://memory/MEMORY.md");
  assert.equal(await read("memtape://memory/MEMORY.md"), "Ada likes oolong.");
  assert.match(await ok("memory_clear", {}), /^memory cleared/);
  assert.equal(await nextUpdate(), "memtape://memory/MEMORY.md");

  const { prompts } = await client.listPrompts();
  assert.equal(prompts[0].name, "memory_skill");
  const prompt = await client.getPrompt({ name: "memory_skill" });
  assert.match(prompt.messages[0].content.text, /When to save/);

  await client.close();
}

try {
  await walk();
  console.log(`mcp-client (${label}): every tool, resource, notification and the prompt: ok`);
  process.exit(0);
} catch (e) {
  console.error(`mcp-client (${label}): ${e.stack ?? e}`);
  await client.close().catch(() => {});
  process.exit(1);
}
