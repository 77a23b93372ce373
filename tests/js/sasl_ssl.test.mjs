// kafkajs over SASL_SSL: PLAIN (users file) and SCRAM-SHA-256/512 (users made with
// confluent-kafka's admin client) against a broker with a test-generated CA.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import kafkajs from 'kafkajs';
import { freePort, withFloe } from './floe.mjs';

const { Kafka, logLevel } = kafkajs;
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const python = path.join(repoRoot, '.venv', 'bin', 'python');
const pyDir = path.join(repoRoot, 'tests', 'python');

// The CA and server certificate, and SCRAM users, come from the Python test helpers.
function py(code) {
  return execFileSync(python, ['-c', code], { cwd: pyDir, encoding: 'utf8', timeout: 60000 });
}

test('kafkajs produces and consumes over SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'floe-js-sasl-'));
  py(`import tls_certs, pathlib; tls_certs.make_pki(pathlib.Path(${JSON.stringify(dir)}))`);
  const users = path.join(dir, 'plain-users');
  fs.writeFileSync(users, 'admin:admin-pw\n');
  const port = await freePort();
  const saslPort = await freePort();
  const listeners = `PLAINTEXT://127.0.0.1:${port},SASL_SSL://127.0.0.1:${saslPort}`;
  const overrides = {
    listeners,
    'advertised.listeners': listeners,
    'ssl.certificate.location': path.join(dir, 'server.crt'),
    'ssl.key.location': path.join(dir, 'server.key'),
    'floe.sasl.plain.users.file': users,
  };
  try {
    await withFloe({ overrides, port }, async (floe) => {
      py(`from test_sasl import add_scram_user; add_scram_user(${JSON.stringify(floe.bootstrap)}, "js-user", "js-pw")`);
      const ca = [fs.readFileSync(path.join(dir, 'ca.crt'), 'utf8')];
      const topic = `kjs-sasl-${Math.random().toString(16).slice(2, 10)}`;
      const logins = [['plain', 'admin', 'admin-pw'], ['scram-sha-256', 'js-user', 'js-pw'], ['scram-sha-512', 'js-user', 'js-pw']];
      const kafkaAs = (mechanism, username, password) => new Kafka({
        clientId: 'floe-kafkajs-sasl',
        brokers: [`127.0.0.1:${saslPort}`],
        ssl: { ca },
        sasl: { mechanism, username, password },
        logLevel: logLevel.NOTHING,
        retry: { retries: 2, initialRetryTime: 100 },
      });
      const admin = kafkaAs('scram-sha-512', 'js-user', 'js-pw').admin();
      await admin.connect();
      assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true }), true);
      await admin.disconnect();
      for (const [mechanism, user, password] of logins) {
        const producer = kafkaAs(mechanism, user, password).producer();
        await producer.connect();
        await producer.send({ topic, messages: [0, 1, 2].map((i) => ({ value: `${mechanism}-${i}` })) });
        await producer.disconnect();
      }
      const consumer = kafkaAs('plain', 'js-user', 'js-pw').consumer({ groupId: `g-${topic}` });
      const seen = [];
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`timed out; saw ${seen.length}`)), 60000);
        consumer.run({
          eachMessage: async ({ message }) => {
            seen.push(message.value.toString());
            if (seen.length === 9) { clearTimeout(timer); resolve(); }
          },
        }).catch(reject);
      });
      await consumer.disconnect();
      assert.deepEqual(seen, logins.flatMap(([m]) => [0, 1, 2].map((i) => `${m}-${i}`)));

      // A wrong password is refused with an authentication error.
      const bad = kafkaAs('scram-sha-256', 'js-user', 'nope').producer();
      await assert.rejects(bad.connect(), (e) => /auth/i.test(`${e.name} ${e.message}`));
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
