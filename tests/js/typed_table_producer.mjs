// kafkajs + @kafkajs/confluent-schema-registry producing Avro into a typed Iceberg table.
// Run by tests/python/test_typed_tables.py (not a node:test file: it needs the pytest
// side to read the table back with pyiceberg and DuckDB):
//
//     node tests/js/typed_table_producer.mjs BOOTSTRAP REGISTRY_URL TOPIC COUNT
//
// Registers ORDER under `<TOPIC>-value` in the broker's Schema Registry, encodes COUNT
// orders with it (record `i` keyed `k<i>`), produces them to TOPIC with kafkajs, and
// prints one JSON line: {"schemaId": N, "sent": [order, ...]}, with decimals as strings
// and timestamps as epoch milliseconds, for the test to compare field by field.
//
// avsc (the library's Avro implementation) has no built-in decimal or timestamp logical
// types; it takes them as `logicalTypes` options, which the registry client passes
// through: Decimal (a decimal string ↔ the unscaled two's-complement bytes) and
// TimestampMillis (Date ↔ long) below.
import kafkajs from 'kafkajs';
import registryPkg from '@kafkajs/confluent-schema-registry';
import avro from 'avsc';

const { Kafka, logLevel } = kafkajs;
const { SchemaRegistry, SchemaType } = registryPkg;

const ORDER = {
  type: 'record', name: 'Order', namespace: 'shop.js',
  fields: [
    { name: 'id', type: 'long' },
    { name: 'customer', type: { type: 'record', name: 'Customer', fields: [
      { name: 'name', type: 'string' },
      { name: 'tags', type: { type: 'array', items: 'string' } },
      { name: 'vip', type: 'boolean' },
    ] } },
    { name: 'items', type: { type: 'array', items: { type: 'record', name: 'Item', fields: [
      { name: 'sku', type: 'string' }, { name: 'qty', type: 'int' },
    ] } } },
    { name: 'attributes', type: { type: 'map', values: 'string' } },
    { name: 'note', type: ['null', 'string'], default: null },
    { name: 'total', type: { type: 'bytes', logicalType: 'decimal', precision: 10, scale: 2 } },
    { name: 'placed', type: { type: 'long', logicalType: 'timestamp-millis' } },
    { name: 'kind', type: { type: 'enum', name: 'Kind', symbols: ['WEB', 'STORE', 'PHONE'] } },
    { name: 'score', type: 'double' },
  ],
};

/** Avro `decimal` on `bytes`: JS values are decimal strings ("-12.34"), exact. */
class Decimal extends avro.types.LogicalType {
  constructor(schema, opts) {
    super(schema, opts);
    this.scale = schema.scale ?? 0;
  }

  _toValue(s) {
    if (typeof s !== 'string' || !/^-?\d+(\.\d+)?$/.test(s)) return undefined;
    const negative = s.startsWith('-');
    const [int, frac = ''] = s.replace('-', '').split('.');
    if (frac.length > this.scale) return undefined;
    let n = BigInt(int + frac.padEnd(this.scale, '0'));
    if (negative) n = -n;
    // The shortest big-endian two's complement that holds n.
    let len = 1;
    while (n < -(1n << BigInt(8 * len - 1)) || n >= (1n << BigInt(8 * len - 1))) len++;
    let v = n < 0n ? (1n << BigInt(8 * len)) + n : n;
    const buf = Buffer.alloc(len);
    for (let i = len - 1; i >= 0; i--) { buf[i] = Number(v & 0xffn); v >>= 8n; }
    return buf;
  }

  _fromValue(buf) {
    let n = 0n;
    for (const b of buf) n = (n << 8n) | BigInt(b);
    if (buf.length && buf[0] & 0x80) n -= 1n << BigInt(8 * buf.length);
    const digits = (n < 0n ? -n : n).toString().padStart(this.scale + 1, '0');
    const s = this.scale ? `${digits.slice(0, -this.scale)}.${digits.slice(-this.scale)}` : digits;
    return n < 0n ? `-${s}` : s;
  }

  _resolve(type) {
    if (avro.Type.isType(type, 'logical:decimal') && type.scale === this.scale) return (v) => v;
    return undefined;
  }
}

/** Avro `timestamp-millis` on `long`: JS values are Dates. */
class TimestampMillis extends avro.types.LogicalType {
  _toValue(d) { return d instanceof Date ? d.getTime() : undefined; }
  _fromValue(ms) { return new Date(ms); }
  _resolve(type) {
    if (avro.Type.isType(type, 'long', 'logical:timestamp-millis')) return this._fromValue;
    return undefined;
  }
}

/** Order `i`: every kind of field, with a negative total, an empty array and a null note among them. */
function order(i) {
  const cents = i % 5 === 0 ? -(i * 101 + 7) : i * 12345 + 1;
  const abs = Math.abs(cents);
  return {
    id: 1_000_000 + i,
    customer: { name: `c${i % 3}`, tags: ['new', 'gold', 'eu'].slice(0, i % 4), vip: i % 2 === 0 },
    items: Array.from({ length: i % 3 }, (_, j) => ({ sku: `sku-${i}-${j}`, qty: j + i })),
    attributes: i % 4 === 0 ? {} : { channel: `ch${i % 4}`, region: i % 2 ? 'eu' : 'us' },
    note: i % 3 === 0 ? null : `note ${i}`,
    total: `${cents < 0 ? '-' : ''}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')}`,
    placed: new Date(Date.UTC(2026, 11, 4, 10, i % 60, i % 60, (i * 7) % 1000)),
    kind: ['WEB', 'STORE', 'PHONE'][i % 3],
    score: i / 8,
  };
}

async function main() {
  const [bootstrap, registryUrl, topic, countArg] = process.argv.slice(2);
  if (!bootstrap || !registryUrl || !topic) {
    throw new Error('usage: node typed_table_producer.mjs BOOTSTRAP REGISTRY_URL TOPIC [COUNT]');
  }
  const count = Number(countArg ?? 20);
  const registry = new SchemaRegistry(
    { host: registryUrl },
    { [SchemaType.AVRO]: { logicalTypes: { decimal: Decimal, 'timestamp-millis': TimestampMillis } } },
  );
  const { id } = await registry.register({ type: SchemaType.AVRO, schema: JSON.stringify(ORDER) }, { subject: `${topic}-value` });
  const kafka = new Kafka({ clientId: 'floe-typed-js', brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer();
  await producer.connect();
  const sent = Array.from({ length: count }, (_, i) => order(i));
  try {
    const messages = await Promise.all(sent.map(async (v, i) => ({ key: `k${i}`, value: await registry.encode(id, v) })));
    await producer.send({ topic, acks: -1, messages });
  } finally {
    await producer.disconnect();
  }
  process.stdout.write(`${JSON.stringify({ schemaId: id, sent: sent.map((o) => ({ ...o, placed: o.placed.getTime() })) })}\n`);
}

main().catch((e) => { console.error(e); process.exit(1); });
