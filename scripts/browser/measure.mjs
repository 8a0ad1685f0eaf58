// memtape's memory browser, measured (run by scripts/browser/measure): a real `memtape serve`
// seeded through the REST API with a session of 10,000 entries and a MEMORY.md of 1,000
// versions; headless Chromium times the first render of each and two moves of the time
// slider (medians of MEMTAPE_MEASURE_RUNS runs, 5 by default, on fresh pages), and sums what
// the page itself weighs. Prints numbers; exits 1 if something fails.
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

const RUNS = Number(process.env.MEMTAPE_MEASURE_RUNS || 5);

/** One run on fresh pages: first renders, the page's weight, two slider moves. */
async function measureOnce(browser, server) {
  const page = await browser.newPage();
  await page.setViewportSize({ width: 1280, height: 800 });
  page.setDefaultTimeout(60000);
  const bytes = [];
  page.on("response", async (r) => {
    if (r.url().includes("/v1/")) bytes.push((await r.body().catch(() => Buffer.alloc(0))).length);
  });
  await page.goto(`${server.base}/#/sessions?session=big`);
  await page.waitForSelector("#entries .entry");
  const [session, shown] = await page.evaluate(() => [performance.now(), document.querySelectorAll("#entries .entry").length]);
  const sessionApi = bytes.reduce((a, b) => a + b, 0);
  // What the page itself weighs: the document and every script and style it loaded.
  const w = await page.evaluate(() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const own = performance.getEntriesByType("resource").filter((r) => r.name.includes("/ui/"));
    return { html: nav.encodedBodySize, assets: own.map((r) => [r.name.replace(/^.*\/ui\//, ""), r.encodedBodySize]) };
  });
  const total = w.html + w.assets.reduce((a, [, n]) => a + n, 0);
  const weight = `${total} bytes (index.html ${w.html}, ${w.assets.map(([n, b]) => `${n} ${b}`).join(", ")}); no images, no fonts`;
  await page.close();

  const page2 = await browser.newPage();
  await page2.setViewportSize({ width: 1280, height: 800 });
  page2.setDefaultTimeout(60000);
  const bytes2 = [];
  page2.on("response", async (r) => {
    if (r.url().includes("/v1/")) bytes2.push((await r.body().catch(() => Buffer.alloc(0))).length);
  });
  await page2.goto(`${server.base}/#/memory?path=MEMORY.md`);
  await page2.waitForSelector("article.md li");
  const file = await page2.evaluate(() => performance.now());
  const fileApi = bytes2.reduce((a, b) => a + b, 0);
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
  await page2.close();
  return { session, shown, sessionApi, weight, file, fileApi, step, far };
}

let browser = null;
try {
  // Seeding is not what is measured: a debug build may take long over big appends.
  const server = await serve(path.join(work, "measure"), ["--request-timeout", "600"]);
  await seed(client(server.base));
  browser = await launch();
  const runs = [];
  for (let run = 0; run < RUNS; run++) runs.push(await measureOnce(browser, server));
  const median = (key) => {
    const xs = runs.map((r) => r[key]).sort((a, b) => a - b);
    return `${xs[Math.floor(xs.length / 2)].toFixed(0)} ms (of ${RUNS} runs: ${xs[0].toFixed(0)}–${xs[xs.length - 1].toFixed(0)})`;
  };
  const last = runs[runs.length - 1];
  console.log(`session of ${ENTRIES} entries: first render ${median("session")} after navigation; ${last.shown} entries in the page, ${last.sessionApi} bytes of API answers`);
  console.log(`page transfer: ${last.weight}`);
  console.log(`MEMORY.md with ${VERSIONS} versions: first render ${median("file")} after navigation; ${last.fileApi} bytes of API answers`);
  console.log(`time slider, one version back: ${median("step")} to the older text`);
  console.log(`time slider, to the first version: ${median("far")} (150 ms of it the slider's debounce)`);
} catch (e) {
  console.error(`measure: failed: ${e.message}`);
  console.error(serverLogs());
  process.exitCode = 1;
} finally {
  if (browser) await browser.close().catch(() => {});
  cleanup();
}

