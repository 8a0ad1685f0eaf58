// memtape's memory browser scripts (scripts/browser): what e2e.mjs and measure.mjs share:
// `memtape serve` on a free loopback port over a temporary data directory, a REST client,
// and headless Chromium on a fresh profile.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

export const memtape = process.argv[2];
export const work = fs.mkdtempSync(path.join(os.tmpdir(), "memtape-browser-"));
const servers = [];

/** Stops the servers started and removes the temporary directory. */
export function cleanup() {
  for (const s of servers) s.child.kill("SIGTERM");
  fs.rmSync(work, { recursive: true, force: true });
}

/** The last lines each server printed (for a failure report). */
export function serverLogs() {
  return servers.filter((s) => s.log.trim()).map((s) => `--- server log (${s.base}):\n${s.log.slice(-3000)}`).join("\n");
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** `memtape serve` on a free loopback port over the data directory `dir` (BM25 only),
 * with `extra` arguments. */
export async function serve(dir, extra = []) {
  const port = await freePort();
  const env = { ...process.env, MEMTAPE_DATA_DIR: dir, MEMTAPE_MODEL: "none" };
  const child = spawn(memtape, ["serve", "--addr", `127.0.0.1:${port}`, "--model", "none", ...extra], { env, stdio: ["ignore", "pipe", "pipe"] });
  const server = { child, base: `http://127.0.0.1:${port}`, log: "" };
  child.stdout.on("data", (d) => (server.log += d));
  child.stderr.on("data", (d) => (server.log += d));
  servers.push(server);
  for (let i = 0; i < 150; i++) {
    try {
      if ((await fetch(`${server.base}/healthz`)).ok) return server;
    } catch {
      // not up yet
    }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`memtape serve did not start:\n${server.log}`);
}

/** A REST client of `base` with `key`: `(method, path, body?) => JSON`, throwing on errors. */
export function client(base, key) {
  const call = async (method, p, body, ok = [200, 201]) => {
    const headers = { "Content-Type": "application/json" };
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (!ok.includes(res.status)) throw new Error(`${method} ${p}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : {};
  };
  call.base = base;
  return call;
}

/** Chromium on a fresh profile (playwright passes it as --user-data-dir). Without the
 * background-networking flags Chromium hangs on a closed network. */
export async function launch() {
  const profile = fs.mkdtempSync(path.join(work, "profile-"));
  return chromium.launchPersistentContext(profile, {
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}
