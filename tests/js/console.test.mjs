// The web console in a real browser (Debian's chromium driven by playwright-core), used as a
// person would: forms, links and tables only; every effect is checked with an independent
// Kafka client (kafkajs). Screenshots of each step go to tests/js/artifacts/console/.
//
// Flow: overview shows the broker → create topics through the form (one with Iceberg tiering) →
// produce a record with a header through the form → the message browser shows it (and an Avro
// decimal as a decimal, every partition by default) → a kafkajs
// consumer group commits part of the topic → the group page shows the lag per partition → the
// iceberg page shows the tiered topic's committed offset and the catalog's exact snapshot ids → on a second broker with SASL/SCRAM and
// an authorizer, alice logs in, is refused a topic she has no ACL for, and a write is refused.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import kafkajs from 'kafkajs';
import registryPkg from '@kafkajs/confluent-schema-registry';
import { chromium } from 'playwright-core';
import { floeBin, freePort, startFloe } from './floe.mjs';

const { Kafka, logLevel } = kafkajs;
const { SchemaRegistry, SchemaType } = registryPkg;
const here = path.dirname(fileURLToPath(import.meta.url));
const artifacts = path.join(here, 'artifacts', 'console');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
// Tiering in seconds rather than minutes (as tests/python/test_tiering.py).
const TIERING = { 'floe.iceberg.tick-ms': '200', 'floe.iceberg.target-lag-ms': '2000' };
const suffix = Math.random().toString(16).slice(2, 8);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` until it returns a truthy value; fail naming `what` and the last value seen. */
async function eventually(what, fn, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    await sleep(250);
  }
}

let shotNo = 0;
async function shot(page, name) {
  const file = path.join(artifacts, `${String(++shotNo).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}

const testid = (id) => `[data-testid="${id}"]`;
const cells = async (row) => (await row.locator('td').allInnerTexts()).map((t) => t.trim());

async function newPage(browser, pageErrors) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  page.on('pageerror', (e) => pageErrors.push(e.message));
  return page;
}

test('web console in chromium: topics, produce, browse, group lag, iceberg, ACL denial', { timeout: 150000 }, async () => {
  assert.ok(fs.existsSync(CHROMIUM),
    `${CHROMIUM} not found: the console suite drives Debian's chromium; bash tests/run-all.sh installs it (apt-get install chromium), or set CHROMIUM to a chromium binary`);
  fs.rmSync(artifacts, { recursive: true, force: true });
  fs.mkdirSync(artifacts, { recursive: true });
  const started = Date.now();
  const pageErrors = [];
  // chromium.launch runs the browser on a fresh temporary profile (user data dir) of its own.
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  const cleanups = [() => browser.close()];
  let current = null; // the page a failure screenshot shows
  try {
    // ------------------------------------------------------------ broker A: no security
    const floe = await startFloe({ console: true, schemaRegistry: true, overrides: TIERING });
    cleanups.push(async () => { await floe.stop(); fs.rmSync(floe.dir, { recursive: true, force: true }); });
    const kafka = new Kafka({ clientId: 'console-test', brokers: [floe.bootstrap], logLevel: logLevel.NOTHING, retry: { retries: 3, initialRetryTime: 100 } });
    const admin = kafka.admin();
    await admin.connect();
    cleanups.push(() => admin.disconnect());
    const page = await newPage(browser, pageErrors);
    current = page;

    // Overview: the broker this console belongs to, healthy.
    await page.goto(`${floe.consoleUrl}/#/`);
    await page.locator(testid('brokers-table')).getByText(floe.bootstrap).waitFor();
    assert.equal((await page.locator(testid('health')).innerText()).trim(), 'healthy');
    assert.equal((await page.locator(testid('session-user')).innerText()).trim(), 'anonymous');
    await shot(page, 'overview');

    // Create two topics through the form: orders (3 partitions), and one tiered into Iceberg.
    const orders = `orders-${suffix}`;
    const tiered = `tiered-${suffix}`;
    await page.click(testid('nav-topics'));
    await page.locator(testid('create-topic-form')).waitFor();
    await page.fill(testid('create-topic-name'), orders);
    await page.fill(testid('create-topic-partitions'), '3');
    await page.click(testid('create-topic-submit'));
    await page.locator(testid('notice')).getByText(orders).waitFor();
    await page.locator(testid('topics-table')).getByRole('link', { name: orders }).waitFor();
    await page.fill(testid('create-topic-name'), tiered);
    await page.fill(testid('create-topic-configs'), 'floe.iceberg.enabled=true\nretention.ms=3600000');
    await page.click(testid('create-topic-submit'));
    await page.locator(testid('topics-table')).getByRole('link', { name: tiered }).waitFor();
    await shot(page, 'topics-created');
    const md = await admin.fetchTopicMetadata({ topics: [orders, tiered] });
    assert.deepEqual(md.topics.map((t) => [t.name, t.partitions.length]).sort(), [[orders, 3], [tiered, 1]].sort());
    const tieredConfigs = await admin.describeConfigs({ resources: [{ type: 2, name: tiered, configNames: ['floe.iceberg.enabled', 'retention.ms'] }], includeSynonyms: false });
    const setNow = Object.fromEntries(tieredConfigs.resources[0].configEntries.map((c) => [c.configName, c.configValue]));
    assert.equal(setNow['floe.iceberg.enabled'], 'true');
    assert.equal(setNow['retention.ms'], '3600000');

    // Records for the tiered topic now, so tiering runs while the rest of the flow does.
    const producer = kafka.producer();
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    const tieredCount = 40;
    await producer.send({ topic: tiered, acks: -1, messages: Array.from({ length: tieredCount }, (_, i) => ({ key: `k${i}`, value: `tiered-${i}` })) });

    // Produce a record with a header through the form; the message browser shows it.
    await page.getByRole('link', { name: orders }).click();
    await page.locator(testid('partitions-table')).waitFor();
    await page.fill(testid('produce-key'), 'order-1');
    await page.fill(testid('produce-value'), '{"item":"tea","qty":2}');
    await page.fill(testid('produce-headers'), 'source=playwright');
    await page.selectOption(testid('produce-partition'), '0');
    await page.click(testid('produce-submit'));
    await page.locator(testid('notice')).getByText('Produced to partition 0 at offset 0').waitFor();
    await page.selectOption(testid('browse-partition'), '0');
    await page.click(testid('browse-submit'));
    const row = page.locator(testid('message-row')).first();
    await row.getByText('order-1').waitFor();
    const [, offset, , key, value, headers] = await cells(row);
    assert.deepEqual([offset, key, value, headers], ['0', 'order-1', '{"item":"tea","qty":2}', 'source=playwright']);
    await shot(page, 'topic-produced-and-browsed');

    // An Avro record with a decimal (bytes, scale 2), written with @kafkajs/confluent-schema-registry
    // (avsc passes the unscaled bytes through): the browser, on every partition by default, shows 12.34.
    const prices = `prices-${suffix}`;
    await admin.createTopics({ topics: [{ topic: prices, numPartitions: 2 }], waitForLeaders: true });
    const registry = new SchemaRegistry({ host: floe.registryUrl });
    const { id: priceSchema } = await registry.register({ type: SchemaType.AVRO, schema: JSON.stringify({
      type: 'record', name: 'Price', fields: [{ name: 'sku', type: 'string' },
        { name: 'price', type: { type: 'bytes', logicalType: 'decimal', precision: 9, scale: 2 } }] }) }, { subject: `${prices}-value` });
    await producer.send({ topic: prices, acks: -1, messages: [{ partition: 1, value: await registry.encode(priceSchema, { sku: 'tea', price: Buffer.from([0x04, 0xd2]) }) }] });
    await page.goto(`${floe.consoleUrl}/#/topics/${prices}`);
    const priceRow = page.locator(`${testid('message-row')}[data-offset="1/0"]`);
    await priceRow.waitFor();
    assert.equal(await page.locator(testid('browse-partition')).inputValue(), '', 'every partition by default');
    const [pricePartition, , , , priceValue] = await cells(priceRow);
    assert.equal(pricePartition, '1');
    assert.deepEqual(JSON.parse(priceValue), { price: '12.34', sku: 'tea' });
    await shot(page, 'avro-decimal-browsed');
    await page.goto(`${floe.consoleUrl}/#/topics/${orders}`);
    await page.locator(testid('partitions-table')).waitFor();
    // The record as an independent client sees it: the kafkajs consumer below checks key, value, header.

    // Inline config edit: retention.ms becomes a dynamic topic config, as kafkajs describes it.
    await page.click(testid('edit-config-retention.ms'));
    await page.fill(testid('config-input-retention.ms'), '7200000');
    await page.click(testid('save-config-retention.ms'));
    const retentionRow = page.locator(`${testid('configs-table')} tbody tr`, { has: page.getByText('retention.ms', { exact: true }) });
    await eventually('retention.ms shown as 7200000 (DYNAMIC_TOPIC_CONFIG)', async () => {
      const [, shown, source] = await cells(retentionRow);
      return shown.startsWith('7200000') && source === 'DYNAMIC_TOPIC_CONFIG';
    });
    const ordersConfigs = await admin.describeConfigs({ resources: [{ type: 2, name: orders, configNames: ['retention.ms'] }], includeSynonyms: false });
    assert.equal(ordersConfigs.resources[0].configEntries[0].configValue, '7200000');

    // A kafkajs consumer group reads everything, then commits only part of it.
    const perPartition = [10, 10, 10];
    for (let p = 0; p < 3; p++) {
      await producer.send({ topic: orders, acks: -1, messages: Array.from({ length: perPartition[p] }, (_, i) => ({ partition: p, value: `o-${p}-${i}` })) });
    }
    const total = perPartition.reduce((a, b) => a + b, 0) + 1;
    const group = `console-group-${suffix}`;
    const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000 });
    await consumer.connect();
    cleanups.push(() => consumer.disconnect());
    await consumer.subscribe({ topic: orders, fromBeginning: true });
    const seen = [];
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`consumer saw ${seen.length} of ${total} records`)), 30000);
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          seen.push({ partition, offset: Number(message.offset), key: message.key?.toString(), value: message.value?.toString(),
            headers: Object.fromEntries(Object.entries(message.headers || {}).map(([k, v]) => [k, v?.toString()])) });
          if (seen.length === total) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
    const first = seen.find((m) => m.partition === 0 && m.offset === 0);
    assert.deepEqual(first, { partition: 0, offset: 0, key: 'order-1', value: '{"item":"tea","qty":2}', headers: { source: 'playwright' } });
    const committed = { 0: 11, 1: 4, 2: 0 };
    await consumer.commitOffsets(Object.entries(committed).map(([p, o]) => ({ topic: orders, partition: Number(p), offset: String(o) })));
    const ends = Object.fromEntries((await admin.fetchTopicOffsets(orders)).map((o) => [o.partition, Number(o.high)]));
    assert.deepEqual(ends, { 0: 11, 1: 10, 2: 10 });

    // The group page: the lag of each partition, as the committed offsets and high watermarks say.
    await page.click(testid('nav-groups'));
    await page.locator(testid('groups-table')).getByRole('link', { name: group }).click();
    for (const [p, c] of Object.entries(committed)) {
      const lagRow = page.locator(`${testid('lag-row')}[data-partition="${orders}/${p}"]`);
      await eventually(`the lag row of ${orders}/${p}`, async () => {
        const [topic, partition, shownCommitted, logEnd, lag] = await cells(lagRow);
        return topic === orders && partition === p && shownCommitted === String(c) && logEnd === String(ends[p]) && lag === String(ends[p] - c);
      });
    }
    assert.equal((await page.locator(testid('group-total-lag')).innerText()).trim(), String(Object.entries(committed).reduce((s, [p, c]) => s + ends[p] - c, 0)));
    await page.locator(testid('members-table')).waitFor();
    // The backend samples lag every 10 s; the page refreshes every 5 s and draws the history.
    await eventually('a lag-over-time line', () => page.locator(`${testid('lag-chart')} svg polyline, ${testid('lag-chart')} svg circle`).count(), 30000);
    await shot(page, 'group-lag');

    // Iceberg: the tiered topic's committed offset reaches its high watermark.
    const [{ high: tieredEnd }] = await admin.fetchTopicOffsets(tiered);
    assert.equal(Number(tieredEnd), tieredCount);
    await page.click(testid('nav-iceberg'));
    const icebergRow = page.locator(`${testid('iceberg-status-row')}[data-partition="${tiered}/0"]`);
    await eventually(`${tiered}/0 committed to Iceberg up to offset ${tieredCount}`, async () => {
      if (!(await icebergRow.count())) { await page.reload(); return false; }
      const [, , committedOffset, , lag] = await cells(icebergRow);
      if (committedOffset !== String(tieredCount)) { await page.reload(); return false; }
      return lag === '0';
    }, 40000);
    await page.locator(testid('iceberg-table')).getByText(tiered).waitFor();
    await page.click(testid(`snapshots-${tiered}`));
    await page.locator(testid('snapshots-table')).waitFor();
    const queries = await page.locator('pre').allInnerTexts();
    assert.ok(queries.some((q) => q.includes(tiered)), `a query snippet names table ${tiered}: ${JSON.stringify(queries)}`);
    // The snapshot ids shown are the catalog's, every digit (64-bit ids: a JSON number would be rounded
    // past 2^53). The catalog's own words: the table's metadata files, read as text.
    const shownIds = (await page.locator(testid('snapshot-id')).allInnerTexts()).map((t) => t.trim());
    assert.ok(shownIds.length >= 1 && shownIds.every((id) => /^-?\d+$/.test(id)), `snapshot ids shown: ${JSON.stringify(shownIds)}`);
    const location = await page.evaluate(async (t) => (await (await fetch('/api/iceberg')).json()).tables.find((x) => x.table === t).metadata_location, tiered);
    const metadataDir = path.dirname(location.replace(/^file:\/\//, ''));
    const catalogIds = new Set(fs.readdirSync(metadataDir).filter((f) => f.endsWith('.metadata.json'))
      .flatMap((f) => [...fs.readFileSync(path.join(metadataDir, f), 'utf8').matchAll(/"snapshot-id"\s*:\s*(-?\d+)/g)].map((m) => m[1])));
    for (const id of shownIds) assert.ok(catalogIds.has(id), `snapshot id ${id} shown on the page is in the catalog's metadata (${[...catalogIds].join(', ')})`);
    const currentId = (await page.locator(testid('current-snapshot-id')).first().innerText()).trim();
    assert.ok(catalogIds.has(currentId), `current snapshot ${currentId} is the catalog's`);
    await shot(page, 'iceberg');

    // Security on a broker without an authorizer (the default): a note that ACLs are off, not an error.
    await page.click(testid('nav-security'));
    await page.locator(testid('acls-off')).getByText('ACLs are off').waitFor();
    assert.equal(await page.locator(`${testid('error')}`).count(), 0, 'no error box on the Security page of a default install');
    await page.locator(testid('users-table')).or(page.getByText('no SCRAM users')).first().waitFor();
    await shot(page, 'security-acls-off');

    // Overview again: the console's scrapes of the broker's metrics draw the charts.
    await page.click(testid('nav-overview'));
    await eventually('a throughput line', () => page.locator(`${testid('throughput-chart')} svg polyline, ${testid('throughput-chart')} svg circle`).count(), 20000);
    await shot(page, 'overview-charts');

    // A write without the CSRF token is refused, whatever page code would do.
    const forged = await page.evaluate(async () => (await fetch('/api/topics', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{"name":"forged"}' })).status);
    assert.equal(forged, 403);
    assert.ok(!(await admin.listTopics()).includes('forged'));

    // ------------------------------------------------------------ broker B: SCRAM and an authorizer
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'floe-js-console-'));
    cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
    const usersFile = path.join(dir, 'plain-users');
    fs.writeFileSync(usersFile, 'admin:admin-pw\n');
    const port = await freePort();
    const listener = `SASL_PLAINTEXT://127.0.0.1:${port}`;
    const secure = await startFloe({ port, console: true, overrides: {
      listeners: listener, 'advertised.listeners': listener, 'floe.sasl.plain.users.file': usersFile,
      'sasl.enabled.mechanisms': 'SCRAM-SHA-256,PLAIN',
      'authorizer.class.name': 'org.apache.kafka.metadata.authorizer.StandardAuthorizer',
      'super.users': 'User:admin', 'allow.everyone.if.no.acl.found': 'false',
    } });
    cleanups.push(async () => { await secure.stop(); fs.rmSync(secure.dir, { recursive: true, force: true }); });
    const asAdmin = ['-b', secure.bootstrap, '-X', 'security.protocol=SASL_PLAINTEXT', '-X', 'sasl.mechanism=PLAIN', '-X', 'sasl.username=admin', '-X', 'sasl.password=admin-pw'];
    execFileSync(floeBin(), ['user', 'create', 'alice', '--password-stdin', ...asAdmin], { input: 'alice-pw\n', encoding: 'utf8', timeout: 30000 });
    const secureKafka = (sasl) => new Kafka({ clientId: 'console-test-sasl', brokers: [secure.bootstrap], sasl, logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 100 } });
    const superAdmin = secureKafka({ mechanism: 'plain', username: 'admin', password: 'admin-pw' }).admin();
    await superAdmin.connect();
    cleanups.push(() => superAdmin.disconnect());
    const [open, secret] = [`open-${suffix}`, `secret-${suffix}`];
    await superAdmin.createTopics({ topics: [{ topic: open, numPartitions: 1 }, { topic: secret, numPartitions: 1 }], waitForLeaders: true });
    // alice may read and describe `open`, nothing else.
    await superAdmin.createAcls({ acl: ['READ', 'DESCRIBE'].map((op) => ({
      resourceType: kafkajs.AclResourceTypes.TOPIC, resourceName: open, resourcePatternType: kafkajs.ResourcePatternTypes.LITERAL,
      principal: 'User:alice', host: '*', operation: kafkajs.AclOperationTypes[op], permissionType: kafkajs.AclPermissionTypes.ALLOW })) });

    const alice = await newPage(browser, pageErrors);
    current = alice;
    await alice.goto(`${secure.consoleUrl}/#/topics`);
    await alice.locator(testid('login-form')).waitFor();
    await alice.fill(testid('login-user'), 'alice');
    await alice.fill(testid('login-password'), 'wrong');
    await alice.click(testid('login-submit'));
    await alice.locator(testid('error')).waitFor();
    await shot(alice, 'login-refused');
    await alice.fill(testid('login-password'), 'alice-pw');
    await alice.click(testid('login-submit'));
    await alice.locator(testid('topics-table')).waitFor();
    assert.equal((await alice.locator(testid('session-user')).innerText()).trim(), 'alice');
    // Metadata lists only the topics alice may describe.
    const listed = await alice.locator(`${testid('topics-table')} tbody tr td:first-child`).allInnerTexts();
    assert.deepEqual(listed.map((t) => t.trim()), [open]);
    await shot(alice, 'alice-topics');

    await alice.goto(`${secure.consoleUrl}/#/topics/${secret}`);
    const denied = (await alice.locator(testid('error')).first().innerText()).trim();
    assert.match(denied, /TOPIC_AUTHORIZATION_FAILED/);
    await shot(alice, 'alice-secret-denied');

    // The topic she may read: its records show (none yet), but producing is refused (no WRITE ACL).
    // (Without DESCRIBE_CONFIGS the page also says its settings were refused, above the forms.)
    await alice.goto(`${secure.consoleUrl}/#/topics/${open}`);
    await alice.locator(testid('messages')).getByText('no records at this offset').waitFor();
    await alice.fill(testid('produce-value'), 'not allowed');
    await alice.click(testid('produce-submit'));
    const refused = (await alice.locator(`${testid('produce-form')} ${testid('error')}`).innerText()).trim();
    assert.match(refused, /TOPIC_AUTHORIZATION_FAILED/);
    const [{ high: openEnd }] = await superAdmin.fetchTopicOffsets(open);
    assert.equal(openEnd, '0', 'the refused record was not written');
    await shot(alice, 'alice-write-refused');

    await alice.click(testid('logout'));
    await alice.locator(testid('login-form')).waitFor();

    assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
    console.log(`console suite: ${((Date.now() - started) / 1000).toFixed(1)} s; screenshots in ${artifacts}`);
  } catch (e) {
    if (current) e.message += `\n(screenshot of the page: ${await shot(current, 'FAILED').catch((err) => err.message)})`;
    throw e;
  } finally {
    for (const c of cleanups.reverse()) await Promise.resolve().then(c).catch(() => {});
  }
});
