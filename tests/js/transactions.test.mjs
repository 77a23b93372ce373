// Transactions (KIP-98) with kafkajs 2.2.4 against a real floe broker: kafkajs's
// transactional producer (InitProducerId with a transactional id, AddPartitionsToTxn,
// AddOffsetsToTxn, TxnOffsetCommit, EndTxn, all at kafkajs's own versions) and its
// consumer at read_committed (Fetch v11 with the aborted-transaction list, which kafkajs
// filters itself) and at read_uncommitted; kcat (librdkafka) reads the same topics
// at read_committed as a second opinion.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import kafkajs from 'kafkajs';
import { withFloe } from './floe.mjs';

const { Kafka, logLevel } = kafkajs;

// As tests/python/test_transactions.py: no initial rebalance delay for the consumer groups.
const OVERRIDES = {
  'group.initial.rebalance.delay.ms': '0',
  'transaction.abort.timed.out.transaction.cleanup.interval.ms': '300',
};

const kafkaFor = (floe, level = logLevel.ERROR) => new Kafka({
  clientId: 'floe-kafkajs-txn-tests',
  brokers: [floe.bootstrap],
  logLevel: level,
  retry: { retries: 3, initialRetryTime: 100 },
});

const unique = (p) => `${p}-${Math.random().toString(16).slice(2, 12)}`;

// An idempotent producer retries forever by default; bounded here so a broker bug
// fails the test instead of hanging it.
const txnProducer = (kafka, transactionalId) => kafka.producer({
  transactionalId,
  idempotent: true,
  maxInFlightRequests: 1,
  allowAutoTopicCreation: false,
  retry: { retries: 5, initialRetryTime: 100 },
});

async function createTopics(kafka, topics) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    assert.equal(await admin.createTopics({ topics, waitForLeaders: true }), true);
  } finally {
    await admin.disconnect();
  }
}

// `n` records labelled `label-i`, alternating over `partitions` partitions.
const labelled = (label, n, partitions) =>
  Array.from({ length: n }, (_, i) => ({ key: `${label}-${i}`, value: `${label}-${i}`, partition: i % partitions }));
const range = (label, n) => Array.from({ length: n }, (_, i) => `${label}-${i}`);

/** Every record of `topic` a fresh kafkajs consumer group sees at the given isolation level,
 * from the beginning: waits for `expect` records, then `settleMs` more to catch extras. */
async function consumeAll(kafka, topic, { readUncommitted, expect, settleMs = 700 }) {
  const consumer = kafka.consumer({ groupId: unique('txn-reader'), readUncommitted, maxWaitTimeInMs: 100 });
  const got = [];
  try {
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`consumed ${got.length}/${expect}: ${JSON.stringify(got)}`)), 20000);
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          got.push({ partition, offset: Number(message.offset), value: message.value.toString() });
          if (got.length === expect) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
    await new Promise((r) => setTimeout(r, settleMs));
  } finally {
    await consumer.disconnect();
  }
  return got;
}

// One partition read with kcat at read_committed (JSON lines).
function kcatReadCommitted(bootstrap, topic, partition) {
  const out = execFileSync('kcat', ['-b', bootstrap, '-X', 'isolation.level=read_committed', '-C', '-t', topic,
    '-p', String(partition), '-o', 'beginning', '-e', '-J'],
  { encoding: 'utf8', timeout: 20000, stdio: ['ignore', 'pipe', 'pipe'] });
  return out.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

// The Kafka error names (KafkaJSProtocolError.type) along an error's cause chain:
// kafkajs's retrier wraps the protocol error in a KafkaJSNonRetriableError.
function kafkaErrorTypes(e) {
  const types = [];
  for (let cur = e, depth = 0; cur && depth < 10; cur = cur.cause, depth++) {
    if (cur.type) types.push(cur.type);
    for (const inner of cur.errors || []) types.push(...kafkaErrorTypes(inner));
  }
  return types;
}

const FENCED = ['PRODUCER_FENCED', 'INVALID_PRODUCER_EPOCH'];
const assertFenced = (what) => (e) => {
  const types = kafkaErrorTypes(e);
  assert.ok(types.some((t) => FENCED.includes(t)),
    `${what}: expected a ${FENCED.join('/')} error, got ${e.name}: ${e.message} (types ${JSON.stringify(types)})`);
  return true;
};

test('kafkajs transactions: commit and abort; read_committed sees committed records only, read_uncommitted sees all', async () => {
  await withFloe({ overrides: OVERRIDES }, async (floe) => {
    const kafka = kafkaFor(floe);
    const topic = unique('kjs-txn');
    await createTopics(kafka, [{ topic, numPartitions: 2 }]);
    const admin = kafka.admin();
    const producer = txnProducer(kafka, unique('kjs-vis'));
    try {
      await admin.connect();
      await producer.connect();

      let txn = await producer.transaction();
      await txn.send({ topic, acks: -1, messages: labelled('c1', 10, 2) });
      await txn.commit();
      assert.equal(txn.isActive(), false);
      // c1 is 5 records + a commit marker on each partition; admin's ListOffsets asks at
      // READ_COMMITTED, so `high` is the last stable offset.
      const lso = async () => (await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, o.high]).sort();
      assert.deepEqual(await lso(), [[0, '6'], [1, '6']]);

      txn = await producer.transaction();
      await txn.send({ topic, acks: -1, messages: labelled('a1', 5, 2) });
      // Open: the LSO stays at the open transaction's first record.
      assert.deepEqual(await lso(), [[0, '6'], [1, '6']]);
      await txn.abort();
      assert.equal(txn.isActive(), false);
      assert.deepEqual(await lso(), [[0, '10'], [1, '9']]);

      txn = await producer.transaction();
      await txn.send({ topic, acks: -1, messages: labelled('c2', 3, 2) });
      await txn.commit();
      // Per partition: records and three markers (c1: 5+5, a1: 3+2, c2: 2+1).
      assert.deepEqual(await lso(), [[0, '13'], [1, '11']]);

      const committedValues = [...range('c1', 10), ...range('c2', 3)].sort();
      // c2 follows a1 in both partitions: reading all of c2 means a1 was skipped, not missed.
      const rc = await consumeAll(kafka, topic, { readUncommitted: false, expect: 13 });
      assert.deepEqual(rc.map((m) => m.value).sort(), committedValues);
      const ru = await consumeAll(kafka, topic, { readUncommitted: true, expect: 18 });
      assert.deepEqual(ru.map((m) => m.value).sort(), [...committedValues, ...range('a1', 5)].sort());
      // Markers are not records: offsets in each partition skip them.
      assert.deepEqual(ru.filter((m) => m.partition === 0).map((m) => m.offset).sort((a, b) => a - b),
        [0, 1, 2, 3, 4, 6, 7, 8, 10, 11]);

      // librdkafka's read_committed agrees.
      const kcat = [0, 1].flatMap((p) => kcatReadCommitted(floe.bootstrap, topic, p));
      assert.deepEqual(kcat.map((r) => r.payload).sort(), committedValues);
    } finally {
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});

test('kafkajs transactions: a second producer with the same transactionalId fences the first and aborts its open transaction', async () => {
  await withFloe({ overrides: OVERRIDES }, async (floe) => {
    const kafka = kafkaFor(floe);
    const topic = unique('kjs-fence');
    await createTopics(kafka, [{ topic, numPartitions: 2 }]);
    const transactionalId = unique('kjs-fence-id');
    // The zombie's refused requests are expected: kafkajs would log each at ERROR.
    const zombie = txnProducer(kafkaFor(floe, logLevel.NOTHING), transactionalId);
    const successor = txnProducer(kafka, transactionalId);
    try {
      await zombie.connect();
      const zt = await zombie.transaction();
      await zt.send({ topic, acks: -1, messages: labelled('zombie', 3, 1) }); // partition 0 only

      // The successor's InitProducerId bumps the epoch and aborts the zombie's open transaction.
      await successor.connect();
      const st = await successor.transaction();

      // The zombie is fenced on every path: Produce to a partition already in its
      // transaction, AddPartitionsToTxn for a new one, and EndTxn.
      await assert.rejects(zt.send({ topic, acks: -1, messages: [{ value: 'zombie-late', partition: 0 }] }),
        assertFenced('zombie Produce'));
      await assert.rejects(zt.send({ topic, acks: -1, messages: [{ value: 'zombie-new-partition', partition: 1 }] }),
        assertFenced('zombie AddPartitionsToTxn'));
      await assert.rejects(zt.commit(), assertFenced('zombie EndTxn(commit)'));

      await st.send({ topic, acks: -1, messages: labelled('successor', 2, 2) });
      await st.commit();

      const rc = await consumeAll(kafka, topic, { readUncommitted: false, expect: 2 });
      assert.deepEqual(rc.map((m) => m.value).sort(), range('successor', 2));
      // The zombie's three records are in the log (aborted); its fenced sends wrote nothing.
      const ru = await consumeAll(kafka, topic, { readUncommitted: true, expect: 5 });
      assert.deepEqual(ru.map((m) => m.value).sort(), [...range('successor', 2), ...range('zombie', 3)].sort());

      const kcat = [0, 1].flatMap((p) => kcatReadCommitted(floe.bootstrap, topic, p));
      assert.deepEqual(kcat.map((r) => r.payload).sort(), range('successor', 2));
    } finally {
      await zombie.disconnect();
      await successor.disconnect();
    }
  });
});

// Offsets sent to a group that has no members (TxnOffsetCommit v1 carries no member id or
// generation): pending while the transaction is open, applied at its commit, dropped at its abort.
test('kafkajs transactions: sendOffsets to a group without members: offsets apply at commit and vanish at abort', async () => {
  await withFloe({ overrides: OVERRIDES }, async (floe) => {
    const kafka = kafkaFor(floe);
    const input = unique('kjs-offs-in');
    const output = unique('kjs-offs-out');
    await createTopics(kafka, [{ topic: input, numPartitions: 1 }, { topic: output, numPartitions: 1 }]);
    const groupId = unique('kjs-offs-group');
    const admin = kafka.admin();
    const producer = txnProducer(kafka, unique('kjs-offs-id'));
    const committed = async () => (await admin.fetchOffsets({ groupId, topics: [input] }))[0].partitions.map((p) => p.offset);
    const offsetsAt = (offset) => ({ consumerGroupId: groupId, topics: [{ topic: input, partitions: [{ partition: 0, offset }] }] });
    try {
      await admin.connect();
      await producer.connect();

      let txn = await producer.transaction();
      await txn.send({ topic: output, acks: -1, messages: [{ value: 'aborted' }] });
      await txn.sendOffsets(offsetsAt('5'));
      await txn.abort();
      assert.deepEqual(await committed(), ['-1'], 'aborted offsets are dropped');

      txn = await producer.transaction();
      await txn.send({ topic: output, acks: -1, messages: [{ value: 'committed' }] });
      await txn.sendOffsets(offsetsAt('7'));
      assert.deepEqual(await committed(), ['-1'], 'pending while the transaction is open');
      await txn.commit();
      assert.deepEqual(await committed(), ['7'], 'applied at the commit');

      const out = await consumeAll(kafka, output, { readUncommitted: false, expect: 1 });
      assert.deepEqual(out.map((m) => m.value), ['committed']);
    } finally {
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});

// kafkajs 2.2.4 sends TxnOffsetCommit v1 (its highest), which names no member or generation:
// accepted for a group with members, as Kafka's validateOffsetCommit accepts it.
test('kafkajs transactions: consume-transform-produce commits the group offsets with the output (sendOffsets)', async () => {
  await withFloe({ overrides: OVERRIDES }, async (floe) => {
    const kafka = kafkaFor(floe);
    const input = unique('kjs-ctp-in');
    const output = unique('kjs-ctp-out');
    await createTopics(kafka, [{ topic: input, numPartitions: 2 }, { topic: output, numPartitions: 1 }]);
    const N = 40;
    const plain = kafka.producer({ allowAutoTopicCreation: false });
    await plain.connect();
    await plain.send({ topic: input, acks: -1, messages: labelled('in', N, 2) });
    await plain.disconnect();

    const groupId = unique('kjs-ctp-group');
    const admin = kafka.admin();
    const producer = txnProducer(kafka, unique('kjs-ctp-id'));
    const consumer = kafka.consumer({ groupId, readUncommitted: false, maxWaitTimeInMs: 100 });
    try {
      await admin.connect();
      await producer.connect();

      // An aborted transaction's offsets are discarded: the group still has no offsets after it.
      const doomed = await producer.transaction();
      await doomed.send({ topic: output, acks: -1, messages: [{ value: 'doomed' }] });
      await doomed.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: input, partitions: [
        { partition: 0, offset: String(N / 2) }, { partition: 1, offset: String(N / 2) }] }] });
      await doomed.abort();
      const before = await admin.fetchOffsets({ groupId, topics: [input] });
      assert.deepEqual(before[0].partitions.map((p) => p.offset), ['-1', '-1'], JSON.stringify(before));

      // One transaction per fetched batch: the transformed records and the batch's next offset.
      let copied = 0;
      let transactions = 0;
      await consumer.connect();
      await consumer.subscribe({ topic: input, fromBeginning: true });
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`copied ${copied}/${N}`)), 20000);
        consumer.run({
          autoCommit: false,
          eachBatchAutoResolve: false,
          eachBatch: async ({ batch, resolveOffset }) => {
            if (batch.isEmpty()) return;
            const txn = await producer.transaction();
            try {
              await txn.send({ topic: output, acks: -1,
                messages: batch.messages.map((m) => ({ key: m.key, value: `out(${m.value.toString()})` })) });
              await txn.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: batch.topic, partitions: [
                { partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) }] }] });
              await txn.commit();
            } catch (e) {
              if (txn.isActive()) await txn.abort();
              reject(e);
              throw e;
            }
            resolveOffset(batch.lastOffset());
            transactions++;
            copied += batch.messages.length;
            if (copied >= N) { clearTimeout(timer); resolve(); }
          },
        }).catch(reject);
      });
      await consumer.disconnect();
      assert.equal(copied, N);
      assert.ok(transactions >= 2, `one transaction per partition at least, got ${transactions}`);

      const committed = await admin.fetchOffsets({ groupId, topics: [input] });
      const offsets = committed[0].partitions.map((p) => [p.partition, p.offset]).sort();
      assert.deepEqual(offsets, [[0, String(N / 2)], [1, String(N / 2)]], JSON.stringify(committed));
      assert.equal(offsets.reduce((s, [, o]) => s + Number(o), 0), N);

      const out = await consumeAll(kafka, output, { readUncommitted: false, expect: N });
      assert.deepEqual(out.map((m) => m.value).sort(), range('in', N).map((v) => `out(${v})`).sort(),
        'every input exactly once, nothing of the aborted transaction');
      const kcat = kcatReadCommitted(floe.bootstrap, output, 0);
      assert.equal(kcat.length, N);
      assert.ok(!kcat.some((r) => r.payload === 'doomed'));
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
      await admin.disconnect();
    }
  });
});
