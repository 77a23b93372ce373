// @kafkajs/confluent-schema-registry against Floe's built-in Schema Registry:
// register an Avro schema, encode with it, produce and consume with kafkajs,
// decode by the schema id each record carries; the values equal what was sent.
// Then an evolution: a compatible version registers, an incompatible one is
// refused with the registry's 409.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import kafkajs from 'kafkajs';
import registryPkg from '@kafkajs/confluent-schema-registry';
import { withFloe } from './floe.mjs';

const { Kafka, logLevel } = kafkajs;
const { SchemaRegistry, SchemaType } = registryPkg;

const order = (extraFields = []) => JSON.stringify({
  type: 'record', name: 'Order', namespace: 'shop',
  fields: [
    { name: 'id', type: 'long' },
    { name: 'items', type: { type: 'array', items: { type: 'record', name: 'Item', fields: [{ name: 'sku', type: 'string' }, { name: 'qty', type: 'int' }] } } },
    { name: 'attributes', type: { type: 'map', values: 'string' } },
    { name: 'note', type: ['null', 'string'], default: null },
    ...extraFields,
  ],
});

test('kafkajs with @kafkajs/confluent-schema-registry registers, produces and decodes Avro', { timeout: 120000 }, async () => {
  await withFloe({ schemaRegistry: true }, async (floe) => {
    const registry = new SchemaRegistry({ host: floe.registryUrl });
    const subject = 'orders-js-value';
    const { id } = await registry.register({ type: SchemaType.AVRO, schema: order() }, { subject });
    assert.ok(id >= 1);
    assert.equal(await registry.getLatestSchemaId(subject), id);
    assert.equal(await registry.getRegistryId(subject, 1), id);

    const kafka = new Kafka({ clientId: 'floe-sr-js', brokers: [floe.bootstrap], logLevel: logLevel.ERROR });
    const producer = kafka.producer();
    await producer.connect();
    const sent = [];
    for (let i = 0; i < 20; i++) {
      sent.push({ id: i, items: [{ sku: `sku-${i}`, qty: i }], attributes: { color: i % 2 ? 'red' : 'blue' }, note: i % 3 ? null : `n${i}` });
    }
    const topic = 'orders-js';
    await producer.send({ topic, messages: await Promise.all(sent.map(async (v) => ({ value: await registry.encode(id, v) }))) });
    await producer.disconnect();

    const consumer = kafka.consumer({ groupId: 'sr-js' });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const got = [];
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`only ${got.length} records decoded`)), 60000);
      consumer.run({
        eachMessage: async ({ message }) => {
          assert.equal(message.value[0], 0, 'Confluent wire format: magic byte 0');
          assert.equal(message.value.readInt32BE(1), id, 'then the schema id');
          got.push(await registry.decode(message.value));
          if (got.length === sent.length) { clearTimeout(timer); resolve(); }
        },
      }).catch(reject);
    });
    await consumer.disconnect();
    // avsc decodes `long` as a number and records as plain objects: compare field by field.
    assert.deepEqual(got.map((v) => JSON.parse(JSON.stringify(v))), sent);

    const v2 = await registry.register({ type: SchemaType.AVRO, schema: order([{ name: 'channel', type: 'string', default: 'web' }]) }, { subject });
    assert.notEqual(v2.id, id);
    await assert.rejects(
      registry.register({ type: SchemaType.AVRO, schema: order([{ name: 'warehouse', type: 'string' }]) }, { subject }),
      (e) => e.status === 409,
    );
  });
});
