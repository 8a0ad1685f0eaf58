// A real memtape server for the tests: the binary in MEMTAPE_BIN, serving a fresh data
// directory on a free loopback port with BM25 only (`--model none`: no model files), with
// API keys made before it starts when asked. `stop()` ends it and removes the directory.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** The memtape binary the tests run. */
export function memtapeBin() {
  const bin = process.env.MEMTAPE_BIN;
  if (!bin) throw new Error('set MEMTAPE_BIN to a memtape binary (sdk/typescript/test.sh does)');
  return bin;
}

/** The environment without memtape's own variables (a database URL would change the store). */
function cleanEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('MEMTAPE_')));
}

/**
 * Starts a server. `keys`: `{name: {tenant, role}}`, each created with `memtape keys
 * create` first (the server then needs a key on every request). Answers `{url, keys, dir,
 * stop}`, `keys` by name.
 */
export async function startServer({ keys = {} } = {}) {
  const bin = memtapeBin();
  const env = cleanEnv();
  const dir = mkdtempSync(join(tmpdir(), 'memtape-sdk-ts-'));
  const made = {};
  for (const [name, { tenant, role = 'write' }] of Object.entries(keys)) {
    // The key alone on stdout; what it is for goes to stderr.
    made[name] = execFileSync(bin, ['keys', 'create', '--tenant', tenant, '--role', role, '--data-dir', dir], {
      encoding: 'utf8',
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();
  }
  const child = spawn(bin, ['serve', '--addr', '127.0.0.1:0', '--data-dir', dir, '--model', 'none'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
  // Should the test process end without stopping it (a crash), the server ends with it.
  const orphan = () => child.kill('SIGKILL');
  process.once('exit', orphan);
  const url = await new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    const timer = setTimeout(() => reject(new Error(`memtape serve printed no address in 30 s:\n${stderr}`)), 30_000);
    // Its first line: `memtape serving DIR on http://127.0.0.1:PORT`.
    lines.once('line', (line) => {
      clearTimeout(timer);
      const match = / on (http:\/\/\S+)$/.exec(line);
      if (match) resolve(match[1]);
      else reject(new Error(`unexpected first line from memtape serve: ${line}\n${stderr}`));
      lines.on('line', () => {}); // keep reading, so the pipe never fills
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`memtape serve exited (${code ?? signal}) before serving:\n${stderr}`));
    });
  });
  let stopped;
  const stop = () => {
    stopped ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(kill);
      }
      process.removeListener('exit', orphan);
      rmSync(dir, { recursive: true, force: true });
    })();
    return stopped;
  };
  return { url, keys: made, dir, stop, stderr: () => stderr };
}
