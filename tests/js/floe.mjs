// Starts a real `floe` broker for the kafkajs tests: free ports, temp data dir,
// stderr captured to a file that is appended to the error of a failing test.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export function floeBin() {
  if (process.env.FLOE_BIN) return process.env.FLOE_BIN;
  const target = process.env.CARGO_TARGET_DIR || path.join(repoRoot, 'target');
  return path.join(target, 'debug', 'floe');
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Start floe; resolves once its Kafka port accepts TCP connections.
 * `port` fixes the PLAINTEXT port (for tests that list more listeners in `overrides`).
 * `console: true` serves the web console on a free port (`consoleUrl`); off by default, so
 * brokers started side by side never race for its default 127.0.0.1:8080. */
export async function startFloe({ overrides = {}, env = {}, port: fixedPort, schemaRegistry = false, console: withConsole = false } = {}) {
  const bin = floeBin();
  if (!fs.existsSync(bin)) throw new Error(`floe binary not found: ${bin} (cargo build --workspace, or set FLOE_BIN)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'floe-js-'));
  const port = fixedPort ?? await freePort();
  const metricsPort = await freePort();
  // The built-in Schema Registry only when asked for: brokers run side by side.
  const registryPort = schemaRegistry ? await freePort() : null;
  const consolePort = withConsole ? await freePort() : null;
  const bootstrap = `127.0.0.1:${port}`;
  const args = ['--data-dir', path.join(dir, 'data'), '--listen', bootstrap, '--advertised-listener', bootstrap,
    '--metrics-listen', `127.0.0.1:${metricsPort}`, '--iceberg-rest-listen', '',
    '--schema-registry-listen', registryPort ? `127.0.0.1:${registryPort}` : '',
    '--console-listen', consolePort ? `127.0.0.1:${consolePort}` : ''];
  for (const [k, v] of Object.entries(overrides)) args.push('--override', `${k}=${v}`);
  const logPath = path.join(dir, 'floe-stderr.log');
  const log = fs.openSync(logPath, 'a');
  const child = spawn(bin, args, { stdio: ['ignore', log, log], env: { RUST_LOG: 'info', ...process.env, ...env } });
  let exited = null;
  child.on('exit', (code, signal) => { exited = { code, signal }; });
  const stderr = () => { try { return fs.readFileSync(logPath, 'utf8').slice(-30000); } catch { return ''; } };
  const deadline = Date.now() + 30000;
  for (;;) {
    if (exited) throw new Error(`floe exited during startup (${JSON.stringify(exited)})\n--- floe stderr ---\n${stderr()}`);
    if (await canConnect(port) && (!registryPort || await canConnect(registryPort))
      && (!consolePort || await canConnect(consolePort))) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`floe did not listen on ${bootstrap} within 30s\n--- floe stderr ---\n${stderr()}`);
    }
    await sleep(50);
  }
  return {
    bootstrap, port, metricsPort, dir, stderr,
    registryUrl: registryPort ? `http://127.0.0.1:${registryPort}` : null,
    consoleUrl: consolePort ? `http://127.0.0.1:${consolePort}` : null,
    async stop() {
      if (exited) return exited;
      const done = new Promise((r) => child.once('exit', (code, signal) => r({ code, signal })));
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 20000);
      const res = await done;
      clearTimeout(t);
      fs.closeSync(log);
      return res;
    },
  };
}

/** Run `fn(floe)` against a fresh broker; on failure, the broker's stderr joins the error. */
export async function withFloe(opts, fn) {
  const floe = await startFloe(opts);
  try {
    await fn(floe);
  } catch (e) {
    e.message += `\n--- floe stderr (${floe.dir}) ---\n${floe.stderr()}`;
    throw e;
  } finally {
    await floe.stop();
    fs.rmSync(floe.dir, { recursive: true, force: true });
  }
}
