// kafkajs 2.2.4 (a strict decoder) against a real floe broker.
// Producer and admin tests read data back with admin offset lookups and with kcat
// (librdkafka); the consumer test uses a kafkajs consumer group.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import kafkajs from 'kafkajs';
import { withFloe } from './floe.mjs';

const { CompressionTypes, ConfigResourceTypes, Kafka, logLevel } = kafkajs;

const kafkaFor = (floe) => new Kafka({
  clientId: 'floe-kafkajs-tests',
  brokers: [floe.bootstrap],
  logLevel: logLevel.ERROR,
  retry: { retries: 3, initialRetryTime: 100 },
});

const uniqueTopic = (p) => `${p}-${Math.random().toString(16).slice(2, 12)}`;

function messages(n, baseTs) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const m = { key: i % 4 === 1 ? null : `key-${i}`, value: `value-${i}-`.repeat(1 + (i % 6)), timestamp: String(baseTs + i * 1000) };
    if (i % 3 === 0) m.headers = { idx: String(i), kind: 'kafkajs' };
    if (i % 11 === 10) m.value = null;
    out.push(m);
  }
  return out;
}

// Read a partition back with kcat (JSON lines).
function kcatRead(bootstrap, topic, partition = 0) {
  const out = execFileSync('kcat', ['-b', bootstrap, '-C', '-t', topic, '-p', String(partition), '-o', 'beginning', '-e', '-J'],
    { encoding: 'utf8', timeout: 60000, stdio: ['ignore', 'pipe', 'pipe'] });
  return out.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

function kcatHeaders(row) {
  if (!row.headers) return undefined;
  const h = {};
  for (let i = 0; i < row.headers.length; i += 2) h[row.headers[i]] = row.headers[i + 1];
  return h;
}

for (const [name, compression] of [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP]]) {
  test(`kafkajs producer (${name}) with keys, null keys/values and headers; offsets via admin`, async () => {
    await withFloe({}, async (floe) => {
      const kafka = kafkaFor(floe);
      const admin = kafka.admin();
      await admin.connect();
      const producer = kafka.producer({ allowAutoTopicCreation: false });
      try {
        const topic = uniqueTopic(`kjs-${name}`);
        assert.equal(await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true }), true);
        assert.ok((await admin.listTopics()).includes(topic));
        const md = await admin.fetchTopicMetadata({ topics: [topic] });
        assert.equal(md.topics[0].partitions.length, 1);

        await producer.connect();
        const baseTs = 1_700_000_000_000;
        const msgs = messages(200, baseTs);
        let next = 0;
        for (let i = 0; i < msgs.length; i += 50) {
          const res = await producer.send({ topic, acks: -1, compression, messages: msgs.slice(i, i + 50) });
          assert.equal(res.length, 1);
          assert.equal(res[0].errorCode, 0);
          assert.equal(res[0].baseOffset, String(next), `batch at ${i}`);
          next += 50;
        }

        const offsets = await admin.fetchTopicOffsets(topic);
        assert.deepEqual(offsets.map((o) => [o.partition, o.low, o.high]), [[0, '0', '200']]);
        const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, baseTs + 42_500);
        assert.deepEqual(byTime.map((o) => [o.partition, o.offset]), [[0, '43']]);

        const rows = kcatRead(floe.bootstrap, topic);
        assert.deepEqual(rows.map((r) => r.offset), [...Array(200).keys()]);
        rows.forEach((r, i) => {
          const m = msgs[i];
          assert.equal(r.key, m.key, `key of ${i}`);
          assert.equal(r.payload, m.value, `value of ${i}`);
          assert.deepEqual(kcatHeaders(r), m.headers, `headers of ${i}`);
          assert.equal(String(r.ts), m.timestamp, `timestamp of ${i}`);
        });
      } finally {
        await producer.disconnect();
        await admin.disconnect();
      }
    });
  });
}

test('kafkajs keyed produce across partitions and topic deletion', async () => {
  await withFloe({}, async (floe) => {
    const kafka = kafkaFor(floe);
    const admin = kafka.admin();
    await admin.connect();
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    try {
      const topic = uniqueTopic('kjs-parts');
      await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true });
      await producer.connect();
      const msgs = Array.from({ length: 300 }, (_, i) => ({ key: `user-${i % 17}`, value: `event-${i}` }));
      const res = await producer.send({ topic, acks: -1, messages: msgs });
      assert.ok(res.every((r) => r.errorCode === 0), JSON.stringify(res));
      const offsets = await admin.fetchTopicOffsets(topic);
      assert.equal(offsets.length, 3);
      assert.equal(offsets.reduce((s, o) => s + Number(o.high), 0), 300);
      // The same key always lands in the same partition, and each partition holds its records in order.
      const seen = new Map();
      let total = 0;
      for (const o of offsets) {
        const rows = kcatRead(floe.bootstrap, topic, o.partition);
        assert.equal(rows.length, Number(o.high));
        total += rows.length;
        const idx = rows.map((r) => Number(r.payload.split('-')[1]));
        assert.deepEqual(idx, [...idx].sort((a, b) => a - b));
        for (const r of rows) {
          assert.ok(!seen.has(r.key) || seen.get(r.key) === o.partition, `key ${r.key} in two partitions`);
          seen.set(r.key, o.partition);
        }
      }
      assert.equal(total, 300);

      await admin.deleteTopics({ topics: [topic] });
      assert.ok(!(await admin.listTopics()).includes(topic));
    } finally {
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});

test('kafkajs admin: configs, partitions, records deletion, cluster', async () => {
  await withFloe({}, async (floe) => {
    const kafka = kafkaFor(floe);
    const admin = kafka.admin();
    await admin.connect();
    const producer = kafka.producer({ allowAutoTopicCreation: false });
    try {
      const topic = uniqueTopic('kjs-admin');
      await admin.createTopics({
        topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'retention.ms', value: '123456' }] }],
        waitForLeaders: true,
      });
      const retention = async () => {
        const res = await admin.describeConfigs({
          includeSynonyms: false,
          resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
        });
        assert.equal(res.resources.length, 1);
        assert.equal(res.resources[0].errorCode, 0);
        const entry = res.resources[0].configEntries.find((e) => e.configName === 'retention.ms');
        return entry && entry.configValue;
      };
      assert.equal(await retention(), '123456');
      await admin.alterConfigs({
        validateOnly: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: 'retention.ms', value: '654321' }] }],
      });
      assert.equal(await retention(), '654321');

      await admin.createPartitions({ topicPartitions: [{ topic, count: 2 }] });
      const md = await admin.fetchTopicMetadata({ topics: [topic] });
      assert.deepEqual(md.topics[0].partitions.map((p) => p.partitionId).sort(), [0, 1]);

      await producer.connect();
      await producer.send({ topic, acks: -1, messages: Array.from({ length: 20 }, (_, i) => ({ value: `r${i}`, partition: 0 })) });
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '15' }] });
      const offsets = await admin.fetchTopicOffsets(topic);
      const p0 = offsets.find((o) => o.partition === 0);
      assert.deepEqual([p0.low, p0.high], ['15', '20']);
      const rows = kcatRead(floe.bootstrap, topic, 0);
      assert.deepEqual(rows.map((r) => [r.offset, r.payload]), [15, 16, 17, 18, 19].map((i) => [i, `r${i}`]));

      const cluster = await admin.describeCluster();
      assert.equal(cluster.brokers.length, 1);
      assert.equal(cluster.brokers[0].port, floe.port);
      assert.ok(cluster.clusterId);
    } finally {
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});

async function consumeN(consumer, topic, n, fromBeginning) {
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${got.length}/${n}`)), 60000);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: message.offset, key: message.key.toString(), value: message.value.toString(), i: message.headers.i.toString() });
        if (got.length === n) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  return got;
}

test('kafkajs consumer group reads back what it produced and resumes from committed offsets', async () => {
  await withFloe({}, async (floe) => {
    const kafka = kafkaFor(floe);
    const admin = kafka.admin();
    await admin.connect();
    const producer = kafka.producer();
    const groupId = uniqueTopic('kjs-group');
    let consumer = kafka.consumer({ groupId });
    try {
      const topic = uniqueTopic('kjs-consume');
      await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
      await producer.connect();
      const msgs = Array.from({ length: 150 }, (_, i) => ({ key: `k${i}`, value: `v${i}`, headers: { i: String(i) } }));
      await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages: msgs.slice(0, 100) });

      const first = await consumeN(consumer, topic, 100, true);
      const byI = (a, b) => Number(a.i) - Number(b.i);
      assert.deepEqual(first.sort(byI).map(({ key, value, i }) => ({ key, value, i })),
        msgs.slice(0, 100).map((m) => ({ key: m.key, value: m.value, i: m.headers.i })));
      await consumer.disconnect(); // commits what it consumed

      const committed = await admin.fetchOffsets({ groupId, topics: [topic] });
      const total = committed[0].partitions.reduce((s, p) => s + Number(p.offset), 0);
      assert.equal(total, 100, `committed offsets ${JSON.stringify(committed)}`);

      // A new member of the same group starts from the committed offsets, not the beginning.
      await producer.send({ topic, acks: -1, messages: msgs.slice(100) });
      consumer = kafka.consumer({ groupId });
      const second = await consumeN(consumer, topic, 50, true);
      assert.deepEqual(second.map((m) => Number(m.i)).sort((a, b) => a - b), [...Array(50).keys()].map((i) => i + 100));
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});
