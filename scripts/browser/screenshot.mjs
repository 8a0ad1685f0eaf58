// The README's picture of the memory browser (run by scripts/browser/screenshot): a real
// `memtape serve` seeded through the REST API with a short conversation whose memory the
// WAL and two saves wrote, and MEMORY.md shown with blame on the line the WAL captured.
import { cleanup, serverLogs, serve, client, launch, work } from "./common.mjs";
import path from "node:path";

const out = process.env.MEMTAPE_SCREENSHOT;
if (!out) throw new Error("set MEMTAPE_SCREENSHOT to the file to write");

try {
  const server = await serve(path.join(work, "data"));
  const api = client(server.base);
  const S = "/v1/sessions/onboarding";
  await api("POST", `${S}/messages`, { role: "user", content: "Hi! I'm Ada. I prefer dark mode and short answers." });
  await api("POST", `${S}/messages`, { role: "assistant", content: "Nice to meet you, Ada. Dark mode it is." });
  await api("POST", `${S}/messages`, { role: "user", content: "We are moving the team offsite to Lisbon in May." });
  await api("POST", `${S}/messages`, { role: "assistant", content: "Noted: the offsite is in Lisbon in May." });
  const mem = await api("GET", "/v1/memory/file?path=MEMORY.md");
  const v2 = `${mem.content}\n## Plans\n\n- Team offsite in Lisbon, May\n`;
  await api("PUT", "/v1/memory/file", { path: "MEMORY.md", content: v2, if_version: mem.memory_version });
  const now = await api("GET", "/v1/memory/file?path=MEMORY.md");
  await api("PUT", "/v1/memory/file", { path: "MEMORY.md", content: `${now.content}- Budget approved: 12,000 EUR\n`, if_version: now.memory_version });

  const browser = await launch();
  const page = await browser.newPage();
  await page.setViewportSize({ width: 1100, height: 560 });
  await page.goto(`${server.base}/#/memory?path=MEMORY.md&mode=blame`);
  const line = page.locator(".blame .line", { hasText: "dark mode" }).first();
  await line.waitFor();
  await line.hover();
  await page.locator("#blame-detail", { hasText: "onboarding" }).waitFor();
  // Let the status line's transient message fade before the picture.
  await page.evaluate(() => { const s = document.getElementById("status"); if (s) s.textContent = ""; });
  await page.screenshot({ path: out });
  await browser.close();
  console.log(`screenshot: ${out}`);
} catch (e) {
  console.error(`${e.stack || e}\n${serverLogs()}`);
  process.exitCode = 1;
} finally {
  cleanup();
}
