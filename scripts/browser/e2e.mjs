// memtape's memory browser end to end (run by scripts/browser/run): real `memtape serve`
// processes on loopback, seeded through the REST API, and the page driven in headless
// Chromium (playwright-core) as a person would: sessions and a paged timeline with branches
// and the consolidation marker, search into the timeline, a memory file's time slider,
// compare, blame into the conversation, edit, a conflict, undo, phone width, and an API key
// login. Screenshots go to $MEMTAPE_BROWSER_ARTIFACTS on failure (after every step too with
// MEMTAPE_BROWSER_SHOTS=1); any failure exits 1.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { memtape, work, cleanup, serverLogs, serve, client, launch } from "./common.mjs";

const artifacts = process.env.MEMTAPE_BROWSER_ARTIFACTS || "target/browser-artifacts";
let browser = null;
let passed = 0;

/**
 * Seeds a session long enough to page (about 260 entries), with a tool call and its result,
 * an anchor, a regenerated answer and a consolidation pointer; and MEMORY.md with several
 * versions: a line the WAL captured from a user message, then "lives in Oslo", then Bergen.
 */
async function seed(api) {
  const S = "/v1/sessions/garden";
  const first = await api("POST", `${S}/messages`, { role: "user", content: "I prefer green tea in the morning." });
  const wal = first.ids[0];
  await api("POST", `${S}/messages`, { role: "assistant", content: "Green tea it is." });
  let quokka = 0;
  for (let batch = 0; batch < 6; batch++) {
    const messages = [];
    for (let i = 0; i < 10; i++) {
      const n = batch * 10 + i;
      const special = n === 44;
      messages.push({ role: "user", content: special ? "Did you know the quokka smiles all day long?" : `Garden question number ${n}: how deep should bulbs go?` });
      messages.push({ role: "assistant", content: `Answer ${n}: about three times their height.` });
    }
    const r = await api("POST", `${S}/messages`, { messages });
    if (batch === 4) quokka = r.ids[8];
  }
  await api("POST", `${S}/anchors`, { name: "handoff", state: { summary: "bulbs discussed" } });
  await api("POST", `${S}/messages`, { messages: [
    { role: "user", content: "What is the weather today?" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{\"city\":\"Oslo\"}" } }] },
    { role: "tool", tool_call_id: "call_1", name: "weather", content: "Sunny, 21 degrees." },
    { role: "assistant", content: "It is sunny and 21 degrees." },
  ] });
  const middle = await api("POST", `${S}/messages`, { messages: Array.from({ length: 60 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `Small talk ${i}.` })) });
  const through = middle.ids[10];
  await api("POST", `${S}/consolidate`, { through });
  const q = await api("POST", `${S}/messages`, { role: "user", content: "Suggest a flower for shade." });
  const a1 = await api("POST", `${S}/messages`, { role: "assistant", content: "Try hostas." });
  const a2 = await api("POST", `${S}/messages`, { role: "assistant", content: "Try ferns, they love shade.", parent: q.ids[0] });
  await api("POST", `${S}/messages`, { role: "user", content: "Ferns sound good." });
  // MEMORY.md: the WAL's line, then Oslo, then Bergen.
  const mem = await api("GET", "/v1/memory");
  const base = (mem.files["MEMORY.md"] || { content: "" }).content;
  if (!base.includes("green tea")) throw new Error(`the WAL did not capture the preference: ${JSON.stringify(mem)}`);
  const oslo = `${base}\n## Home\n\n- lives in Oslo\n`;
  await api("POST", "/v1/memory/save", { content: oslo });
  const bergen = await api("POST", "/v1/memory/save", { content: oslo.replace("Oslo", "Bergen") });
  // A fact a model's rewrite dropped (no model here: the event comes in through import).
  const dropped = { id: bergen.id + 1, scope: { tenant: "default", agent: "default" }, kind: "event", created_at: new Date().toISOString(), payload: { name: "memory.dropped", data: { path: "MEMORY.md", text: "- has a cat named Miso", section: "## Home", version: bergen.version, by: "consolidation" } }, meta: {} };
  const imported = await fetch(`${api.base}/v1/import`, { method: "POST", headers: { "Content-Type": "application/x-ndjson" }, body: `${JSON.stringify(dropped)}\n` });
  if (!imported.ok) throw new Error(`importing the dropped fact: ${imported.status} ${await imported.text()}`);
  // Another agent, with a user of its own.
  await api("POST", "/v1/sessions/jazz-chat/messages?agent=helper&user=alice", { messages: [{ role: "user", content: "Play something mellow." }, { role: "assistant", content: "Here is some Chet Baker." }] });
  await api("POST", "/v1/memory/save?agent=helper&user=alice", { content: "# Alice\n\n- likes mellow jazz\n" });
  return { session: "garden", wal, quokka, through, question: q.ids[0], a1: a1.ids[0], a2: a2.ids[0] };
}

// ---- the browser -----------------------------------------------------------------------------

/** A page that fails the run on a script error or a request to another origin. */
async function newPage(base, viewport = { width: 1280, height: 800 }) {
  const page = await browser.newPage();
  await page.setViewportSize(viewport);
  page.errors = [];
  page.requests = [];
  page.on("pageerror", (e) => page.errors.push(`script error: ${e.message}`));
  page.on("request", (r) => {
    page.requests.push(r.url());
    if (!r.url().startsWith(base) && !r.url().startsWith("data:")) page.errors.push(`request beyond the server: ${r.url()}`);
  });
  page.on("dialog", (d) => d.accept());
  page.setDefaultTimeout(10000);
  return page;
}

let current = null;
async function step(name, page, f) {
  current = name;
  try {
    await f();
    if (page.errors.length) throw new Error(page.errors.join("\n"));
    if (process.env.MEMTAPE_BROWSER_SHOTS) {
      fs.mkdirSync(artifacts, { recursive: true });
      await page.screenshot({ path: path.join(artifacts, `ok-${passed + 1}.png`), fullPage: false });
    }
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    const file = path.join(artifacts, `${name.replace(/[^a-z0-9]+/gi, "-")}.png`);
    try {
      fs.mkdirSync(artifacts, { recursive: true });
      await page.screenshot({ path: file, fullPage: true });
      console.error(`FAIL ${name} (screenshot: ${file})`);
    } catch {
      console.error(`FAIL ${name}`);
    }
    throw e;
  }
}

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

/** Waits until `locator`'s text matches `re`. */
async function textMatches(page, selector, re, message) {
  try {
    await page.waitForFunction(
      ([s, src, flags]) => [...document.querySelectorAll(s)].some((e) => new RegExp(src, flags).test(e.textContent)),
      [selector, re.source, re.flags],
      { timeout: 10000 },
    );
  } catch {
    const seen = await page.locator(selector).allTextContents().catch(() => []);
    throw new Error(`${message}: ${selector} never matched ${re} (saw ${JSON.stringify(seen).slice(0, 400)})`);
  }
}

async function noSideScroll(page, where) {
  const w = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  expect(w[0] <= w[1] + 1, `${where}: the page scrolls sideways (${w[0]} px wide in ${w[1]})`);
}

async function withoutKeys() {
  const server = await serve(path.join(work, "open"));
  const api = client(server.base);
  const seeded = await seed(api);
  const page = await newPage(server.base);
  const base = server.base;

  await step("the session list and a paged timeline", page, async () => {
    await page.goto(`${base}/`);
    await page.getByRole("link", { name: /garden/ }).click();
    await textMatches(page, "#entries .entry", /green tea in the morning/, "the first entry");
    const first = await page.locator("#entries .entry").count();
    expect(first > 0 && first <= 100, `the first page holds ${first} entries`);
    const paged = page.requests.filter((u) => u.includes("/entries?") && /[?&]after=/.test(u));
    for (let i = 0; i < 10 && !(await page.locator("#more", { hasText: "Check for newer" }).count()); i++) {
      await page.locator("#more").scrollIntoViewIfNeeded();
      await page.waitForTimeout(300);
    }
    const all = await page.locator("#entries .entry").count();
    expect(all > first, `scrolling loaded more (${first} then ${all})`);
    expect(page.requests.filter((u) => u.includes("/entries?") && /[?&]after=/.test(u)).length > paged.length, "pages were fetched with after=");
  });

  await step("the timeline shows tools, anchors, events, the pointer and branches", page, async () => {
    await textMatches(page, ".entry.k-tool_call code", /weather/, "the tool call");
    await textMatches(page, ".entry.k-tool_result", /Sunny, 21 degrees/, "the tool result");
    await textMatches(page, ".entry.k-anchor .kind", /anchor handoff/, "the anchor");
    await textMatches(page, ".entry.k-event", /consolidation pointer moved to #\d+/, "the consolidation event");
    await textMatches(page, ".marker", new RegExp(`consolidated through #${seeded.through}`), "the consolidation marker");
    const after = await page.evaluate((t) => {
      const m = document.querySelector(".marker");
      const prev = m.previousElementSibling;
      const next = m.nextElementSibling;
      return [Number(prev.dataset.id), Number(next.dataset.id)];
    }, seeded.through);
    expect(after[0] <= seeded.through && after[1] > seeded.through, `the marker sits after #${seeded.through}: ${after}`);
    await textMatches(page, `#e-${seeded.question} .alts`, /2 branches/, "the regenerated question lists its branches");
    await textMatches(page, `#e-${seeded.a2} .tag.cur`, /branch 2 of 2 · current/, "the newer answer is the current branch");
    await textMatches(page, `#e-${seeded.a1} .tag`, /branch 1 of 2/, "the older answer is the other branch");
    expect(await page.locator(`#e-${seeded.a1}.off`).count() === 1, "the older answer is off the current thread");
  });

  await step("search, and a result opens the timeline at its entry", page, async () => {
    // A fresh load: the timeline is not in the page yet, so the jump loads from the entry.
    await page.goto(`${base}/`);
    await page.getByRole("link", { name: "Search" }).click();
    await page.getByLabel("Query").fill("quokka");
    await page.getByRole("button", { name: "Search" }).click();
    const link = page.locator(".hit a", { hasText: `#${seeded.quokka} in garden` });
    await link.waitFor();
    await link.click();
    await page.locator(`#e-${seeded.quokka}.hl`).waitFor();
    await textMatches(page, ".entry.hl", /quokka smiles/, "the highlighted entry");
    // The jump loaded from the entry on: earlier entries come on request.
    expect(!(await page.locator("#earlier").isHidden()), "a jump offers the earlier entries");
    const before = await page.locator("#entries .entry").count();
    await page.locator("#earlier").click();
    await page.waitForFunction((n) => document.querySelectorAll("#entries .entry").length > n, before);
  });

  await step("a memory file rendered, and the time slider shows an older version", page, async () => {
    await page.getByRole("link", { name: "Memory" }).click();
    await textMatches(page, "article.md li", /lives in Bergen/, "MEMORY.md now");
    await textMatches(page, "article.md h2", /^Home$/, "markdown headings");
    await page.getByRole("button", { name: "Older version" }).click();
    await textMatches(page, "article.md li", /lives in Oslo/, "MEMORY.md one version back");
    expect(!(await page.locator("article.md").textContent()).includes("Bergen"), "the older version has no Bergen");
    await textMatches(page, "#version-label", /memory\.save/, "the version label");
    // The slider is a real range input: the keyboard moves it too.
    await page.locator("#slider").focus();
    await page.keyboard.press("End");
    await textMatches(page, "article.md li", /lives in Bergen/, "the newest version again");
  });

  await step("compare two versions", page, async () => {
    await page.getByRole("link", { name: "Compare" }).click();
    await textMatches(page, ".diff-lines .del", /lives in Oslo/, "the removed line");
    await textMatches(page, ".diff-lines .add", /lives in Bergen/, "the added line");
  });

  await step("blame a line, and land on the message that caused it", page, async () => {
    await page.getByRole("link", { name: "Blame" }).click();
    const line = page.locator(".blame .line", { hasText: "green tea" });
    await line.hover();
    await textMatches(page, "#blame-detail", new RegExp(`#${seeded.wal} in garden`), "the blame detail names the message");
    await line.click();
    await page.locator(`#e-${seeded.wal}.hl`).waitFor();
    await textMatches(page, ".entry.hl", /I prefer green tea/, "the entry that caused the line");
  });

  await step("edit a memory file: a new version", page, async () => {
    await page.getByRole("link", { name: "Memory" }).click();
    await page.getByRole("link", { name: "Edit" }).click();
    const area = page.locator("#editor");
    await area.waitFor();
    await area.fill(`${await area.inputValue()}- enjoys hiking\n`);
    await page.getByRole("button", { name: "Save as a new version" }).click();
    await textMatches(page, "#status", /Saved: version \d+/, "the save");
    await textMatches(page, "article.md li", /enjoys hiking/, "the new content");
    await textMatches(page, "#version-label", /newest/, "the slider at the new version");
  });

  await step("a conflict when the file changed meanwhile, then re-applied", page, async () => {
    await page.getByRole("link", { name: "Edit" }).click();
    const area = page.locator("#editor");
    await area.waitFor();
    await area.fill("# Memory\n\n- my edit in the page\n");
    const now = (await api("GET", "/v1/memory")).files["MEMORY.md"].content;
    await api("POST", "/v1/memory/save", { content: `${now}- changed behind the page\n` });
    await page.getByRole("button", { name: "Save as a new version" }).click();
    await textMatches(page, "#conflict h3", /Conflict/, "the conflict");
    await textMatches(page, "#conflict pre", /changed behind the page/, "the current content");
    await page.getByRole("button", { name: "Save my text over it" }).click();
    await textMatches(page, "article.md li", /my edit in the page/, "the re-applied edit");
  });

  await step("undo to an earlier version from the history", page, async () => {
    await page.getByRole("link", { name: "History" }).click();
    const oslo = page.locator(".versions li", { hasText: "memory.save" }).last();
    await oslo.getByRole("button", { name: "Undo to this version" }).click();
    await textMatches(page, "#status", /Back to version/, "the undo");
    await textMatches(page, "article.md li", /lives in Oslo/, "the memory as it was");
  });

  await step("restore a dropped fact", page, async () => {
    await textMatches(page, "#dropped li", /has a cat named Miso/, "the dropped fact is listed");
    await page.locator("#dropped li", { hasText: "Miso" }).getByRole("button", { name: "Restore" }).click();
    await textMatches(page, "#status", /Restored into MEMORY\.md/, "the restore");
    await textMatches(page, "article.md li", /has a cat named Miso/, "the fact back in the file");
    await textMatches(page, "#dropped li", /stated again/, "the dropped fact is marked as stated again");
  });

  await step("forget a change", page, async () => {
    await page.getByRole("link", { name: "History" }).click();
    await page.locator(".versions li").first().getByRole("button", { name: "Forget this change" }).click();
    await textMatches(page, "#status", /Forgotten: now version \d+/, "the forget");
    await page.waitForFunction(() => {
      const a = document.querySelector("article.md li");
      return a && !document.querySelector("article.md").textContent.includes("Miso");
    });
  });

  await step("pick another agent and its user", page, async () => {
    await page.getByLabel("Agent", { exact: true }).selectOption("helper");
    await page.getByLabel("User", { exact: true }).selectOption("alice");
    await textMatches(page, "article.md li", /likes mellow jazz/, "alice's memory with the helper agent");
    await page.getByRole("link", { name: "Sessions" }).click();
    await page.getByRole("link", { name: /jazz-chat/ }).click();
    await textMatches(page, "#entries .entry", /Chet Baker/, "alice's session");
    await page.getByLabel("Agent", { exact: true }).selectOption("default");
    await page.getByRole("link", { name: /garden/ }).waitFor();
  });

  await step("phone width (390 px)", page, async () => {
    const phone = await newPage(base, { width: 390, height: 844 });
    try {
      await phone.goto(`${base}/`);
      await phone.getByRole("link", { name: /garden/ }).click();
      await textMatches(phone, "#entries .entry", /green tea/, "the timeline on a phone");
      await noSideScroll(phone, "timeline");
      await phone.getByRole("link", { name: "Memory" }).click();
      await textMatches(phone, "article.md li", /lives in Oslo/, "memory on a phone");
      await noSideScroll(phone, "memory");
      await phone.getByRole("link", { name: "Blame" }).click();
      await phone.locator(".blame .line").first().waitFor();
      await noSideScroll(phone, "blame");
      await phone.getByRole("link", { name: "Search" }).click();
      await phone.getByLabel("Query").fill("ferns");
      await phone.keyboard.press("Enter");
      await phone.locator(".hit a").first().waitFor();
      await noSideScroll(phone, "search");
      if (phone.errors.length) throw new Error(phone.errors.join("\n"));
    } finally {
      await phone.close();
    }
  });

  await step("keyboard: the views are reachable with Tab", page, async () => {
    await page.goto(`${base}/#/sessions`);
    await page.locator("#session-list a").first().waitFor();
    const seen = new Set();
    for (let i = 0; i < 12; i++) {
      await page.keyboard.press("Tab");
      seen.add(await page.evaluate(() => document.activeElement && (document.activeElement.textContent || document.activeElement.id).trim()));
    }
    for (const want of ["Sessions", "Memory", "Search"]) expect(seen.has(want), `Tab reaches ${want}: ${[...seen]}`);
  });
  await page.close();
}

async function withKeys() {
  const dir = path.join(work, "keys");
  fs.mkdirSync(dir);
  const key = execFileSync(memtape, ["keys", "create", "--tenant", "acme", "--data-dir", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
  expect(/^\S+$/.test(key), `keys create printed ${key}`);
  const server = await serve(dir);
  const api = client(server.base, key);
  await api("POST", "/v1/sessions/acme-chat/messages", { messages: [{ role: "user", content: "Hello from acme." }, { role: "assistant", content: "Hi acme." }] });
  const page = await newPage(server.base);
  // The 401s before the login are the page asking; they are expected here.
  await step("with keys: the page asks for a key, refuses a bad one, accepts a good one", page, async () => {
    await page.goto(`${server.base}/`);
    await page.locator("#login").waitFor();
    await page.getByLabel("API key").fill("mtk_not_a_key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await textMatches(page, "#login-error", /not valid/, "a bad key");
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("link", { name: /acme-chat/ }).click();
    await textMatches(page, "#entries .entry", /Hello from acme/, "the tenant's session");
    expect(await page.evaluate(() => sessionStorage.getItem("memtape.key")) === key, "the key is kept in sessionStorage");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.locator("#login").waitFor();
  });
  await page.close();
}

try {
  browser = await launch();
  await withoutKeys();
  await withKeys();
  console.log(`browser: ${passed} passed, 0 failed`);
} catch (e) {
  console.error(`browser: failed at "${current}": ${e.message}`);
  const logs = serverLogs();
  if (logs) console.error(logs);
  console.log(`browser: ${passed} passed, 1 failed`);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  cleanup();
}
