// A kafkajs application for the cluster failover test (tests/python/test_cluster_clients.py).
//
//   node failover_app.mjs BOOTSTRAP TOPIC GROUP
//
// An idempotent acks=all producer sends unique values one at a time while a group consumer reads
// the topic; every event is one JSON line on stdout:
//   {"ev":"send","v":...}  {"ev":"ack","p":..,"o":..,"v":...}  {"ev":"read","r":reader,"p":..,"o":..,"v":...}
//   {"ev":"error","where":"produce"|"consume","name":..,"message":..,"retriable":bool[,"recovered":bool]}
//   {"ev":"stopped"}  {"ev":"done","acked":n,"read":n}
// The test moves leadership around underneath (kill -9, SIGTERM); what kafkajs cannot hide from
// the application shows up as an "error" line. On "stop" (stdin) the producer ends, the consumer
// reads on until it has seen every acknowledged value (at most 60 s), and the app exits.
import readline from 'node:readline';
import kafkajs from 'kafkajs';

const { Kafka, logLevel } = kafkajs;
const [bootstrap, topic, groupId] = process.argv.slice(2);
const emit = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const describe = (where, e) => ({
  ev: 'error', where, name: e?.name ?? 'Error', message: String(e?.message ?? e),
  retriable: Boolean(e?.retriable), cause: e?.cause ? `${e.cause.name}: ${e.cause.message}` : undefined,
});

const kafka = new Kafka({
  clientId: 'floe-failover-kafkajs',
  brokers: bootstrap.split(','),
  logLevel: logLevel.NOTHING,
  // Enough patience to outlast a leader's lease (the cluster tests use 2 s) and an election.
  retry: { retries: 20, initialRetryTime: 200, maxRetryTime: 3000 },
});

let stopping = false;
readline.createInterface({ input: process.stdin }).on('line', (l) => { if (l.trim() === 'stop') stopping = true; });

const acked = new Set();
const read = new Set();
let session = 0;

const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000 });
// A reader session is the consumer between two joins: within one, offsets only go forward.
consumer.on(consumer.events.GROUP_JOIN, () => { session += 1; });
// A crash kafkajs restarts the consumer after (payload.restart) is recovered by the client
// itself: the application's code sees no exception. It is reported, marked "recovered".
consumer.on(consumer.events.CRASH, ({ payload }) => emit({ ...describe('consume', payload.error), recovered: Boolean(payload.restart) }));
await consumer.connect();
await consumer.subscribe({ topic, fromBeginning: true });
await consumer.run({
  eachMessage: async ({ partition, message }) => {
    const v = message.value.toString();
    read.add(v);
    emit({ ev: 'read', r: `kafkajs/${session}`, p: partition, o: Number(message.offset), v });
  },
});

const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
await producer.connect();
for (let i = 0; !stopping; i++) {
  const v = `kafkajs-${i}`;
  emit({ ev: 'send', v });
  try {
    const [res] = await producer.send({ topic, acks: -1, messages: [{ key: v, value: v }] });
    acked.add(v);
    emit({ ev: 'ack', p: res.partition, o: Number(res.baseOffset), v });
  } catch (e) {
    emit(describe('produce', e));
  }
  await sleep(5);
}
await producer.disconnect();
emit({ ev: 'stopped' });

const deadline = Date.now() + 60000;
while (Date.now() < deadline && [...acked].some((v) => !read.has(v))) await sleep(200);
await consumer.disconnect();
emit({ ev: 'done', acked: acked.size, read: read.size });
process.exit(0);
