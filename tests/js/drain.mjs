// kafkajs draining one partition from offset 0, for the Python tests that compare
// what different clients read (tests/python/test_shared_reads.py):
//
//     node tests/js/drain.mjs BOOTSTRAP TOPIC COUNT [read_committed|read_uncommitted]
//
// Prints one JSON line per record: {offset, timestamp, key, value, headers}, with
// key and value base64 (null stays null) and headers as [key, [base64 values…]]
// pairs: kafkajs hands headers out as an object, a repeated key's values as an
// array, so the order between different keys is not known to it.
import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;
const [bootstrap, topic, countArg, isolation = 'read_uncommitted'] = process.argv.slice(2);
const count = Number(countArg);

const kafka = new Kafka({ clientId: 'floe-drain', brokers: [bootstrap], logLevel: logLevel.NOTHING });
const consumer = kafka.consumer({
  groupId: `drain-${process.pid}-${Date.now()}`,
  readUncommitted: isolation === 'read_uncommitted',
  maxWaitTimeInMs: 200,
});
const b64 = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString('base64'));

const seen = [];
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
const done = new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`drained ${seen.length}/${count} in 90 s`)), 90_000);
  consumer.run({
    eachMessage: async ({ message }) => {
      const headers = Object.entries(message.headers || {}).map(([k, v]) => [k, (Array.isArray(v) ? v : [v]).map(b64)]);
      seen.push({ offset: Number(message.offset), timestamp: Number(message.timestamp), key: b64(message.key), value: b64(message.value), headers });
      if (seen.length >= count) {
        clearTimeout(timer);
        resolve();
      }
    },
  });
});
try {
  await done;
} finally {
  await consumer.disconnect();
}
for (const r of seen.slice(0, count)) console.log(JSON.stringify(r));
