// memtape's memory browser, measured (run by scripts/browser/measure): a real `memtape serve`
// seeded through the REST API with a session of 10,000 entries and a MEMORY.md of 1,000
// versions; headless Chromium times the first render of each and a step of the time slider,
// and sums what the page itself weighs. Prints numbers; exits 1 if something fails.
import { work, cleanup, serverLogs, serve, client, launch } from "./common.mjs";
import path from "node:path";

const ENTRIES = Number(process.env.MEMTAPE_MEASURE_ENTRIES || 10000);
const VERSIONS = Number(process.env.MEMTAPE_MEASURE_VERSIONS || 1000);

async function seed(api) {
  let t = Date.now();
  for (let done = 0; done < ENTRIES; done += 250) {
    const n = Math.min(250, ENTRIES - done);
    // Plain questions and answers: nothing the WAL captures into memory (a number would be).
    const messages = Array.from({ length: n }, (_, i) => (done + i) % 2
      ? { role: "assistant", content: "About three times their height, in loose soil." }
      : { role: "user", content: "How deep should bulbs go in sandy soil?" });
    await api("POST", "/v1/sessions/big/messages", { messages });
  }
  console.log(`seeded ${ENTRIES} entries in ${Date.now() - t} ms`);
  t = Date.now();
  const facts = [];
  for (let v = 0; v < VERSIONS; v++) {
    facts.push(`- fact ${v}: something the agent learned`);
    const content = `# Memory\n\n${facts.slice(-40).join("\n")}\n`;
    await api("PUT", "/v1/memory/file", { path: "MEMORY.md", content });
  }
  console.log(`seeded ${VERSIONS} versions of MEMORY.md in ${Date.now() - t} ms`);
}

let browser = null;
try {
  // Seeding is not what is measured: a debug build may take long over big appends.
  const server = await serve(path.join(work, "measure"), ["--request-timeout", "600"]);
  await seed(client(server.base));
  browser = await launch();
  const page = await browser.newPage();
  await page.setViewportSize({ width: 1280, height: 800 });
  page.setDefaultTimeout(60000);
  const api = [];
  page.on("response", async (r) => {
    if (r.url().includes("/v1/")) api.push((await r.body().catch(() => Buffer.alloc(0))).length);
  });

  await page.goto(`${server.base}/#/sessions?session=big`);
  await page.waitForSelector("#entries .entry");
  const session = await page.evaluate(() => [performance.now(), document.querySelectorAll("#entries .entry").length]);
  const sessionApi = api.reduce((a, b) => a + b, 0);
  console.log(`session of ${ENTRIES} entries: first render ${session[0].toFixed(0)} ms after navigation (${session[1]} entries in the page, ${sessionApi} bytes of API answers)`);

  // What the page itself weighs: the document and every script and style it loaded.
  const weight = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const own = performance.getEntriesByType("resource").filter((r) => r.name.includes("/ui/"));
    return { html: nav.encodedBodySize, assets: own.map((r) => [r.name.replace(/^.*\/ui\//, ""), r.encodedBodySize]) };
  });
  const total = weight.html + weight.assets.reduce((a, [, n]) => a + n, 0);
  console.log(`page transfer: ${total} bytes (index.html ${weight.html}, ${weight.assets.map(([n, b]) => `${n} ${b}`).join(", ")}); no images, no fonts`);

  const page2 = await browser.newPage();
  await page2.setViewportSize({ width: 1280, height: 800 });
  page2.setDefaultTimeout(60000);
  await page2.goto(`${server.base}/#/memory?path=MEMORY.md`);
  await page2.waitForSelector("article.md li");
  const file = await page2.evaluate(() => performance.now());
  console.log(`MEMORY.md with ${VERSIONS} versions: first render ${file.toFixed(0)} ms after navigation`);
  const step = await page2.evaluate(async () => {
    const before = document.querySelector("article.md").textContent;
    const t0 = performance.now();
    document.querySelector('button[aria-label="Older version"]').click();
    for (;;) {
      await new Promise((r) => setTimeout(r, 5));
      const a = document.querySelector("article.md");
      if (a && a.textContent !== before) return performance.now() - t0;
    }
  });
  console.log(`time slider, one version back: ${step.toFixed(0)} ms to the older text`);
  const far = await page2.evaluate(async () => {
    const s = document.getElementById("slider");
    const before = document.querySelector("article.md").textContent;
    const t0 = performance.now();
    s.value = "0";
    s.dispatchEvent(new Event("input"));
    for (;;) {
      await new Promise((r) => setTimeout(r, 5));
      const a = document.querySelector("article.md");
      if (a && a.textContent !== before) return performance.now() - t0;
    }
  });
  console.log(`time slider, to the first version: ${far.toFixed(0)} ms (150 ms of it the slider's debounce)`);
} catch (e) {
  console.error(`measure: failed: ${e.message}`);
  console.error(serverLogs());
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  cleanup();
}

