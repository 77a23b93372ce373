"""Typed Iceberg tables (`floe.iceberg.value.format=schema-registry`) end to end.

- confluent-kafka's `AvroSerializer` and `ProtobufSerializer` register with Floe's
  Schema Registry and produce; the tiered table has typed columns (nested records,
  arrays, maps, nullable fields, decimals, timestamps) whose values pyiceberg and
  DuckDB read back equal to what was produced, field by field.
- Evolution: a second, compatible version adds a column; rows of the first read
  null there; nothing goes to the dead-letter table for them. An incompatible
  register is refused with 409.
- Records that cannot be typed (no magic byte, a bogus schema id, bytes that are
  not the schema's) land in `<topic>__dlq` with their offset, raw bytes and error,
  and the typed table still gets every other record, once.
- A kill -9 between the dead letters' commit and the typed rows' (failpoint
  `tiering.dlq.committed`) leaves every offset in exactly one table, once.
- JSON Schema values (`JSONSerializer`) too.
- kafkajs with `@kafkajs/confluent-schema-registry` (tests/js/typed_table_producer.mjs,
  run with node) registers an Avro schema and produces; pyiceberg and DuckDB read the
  typed columns equal to what it sent, field by field.
- Typed keys (`floe.iceberg.key.format=schema-registry`): an `AvroSerializer` key
  becomes one `key` struct column whose fields pyiceberg reads back as produced; a
  key that cannot be typed is a dead letter saying so. A bad key format is
  refused by CreateTopics (INVALID_CONFIG).
- Schemaless JSON (`floe.iceberg.value.format=json`, no registry): columns inferred
  from plain JSON bytes, a field that appears later becomes a column, a field that
  changes family is a dead letter; pyiceberg and DuckDB read it column by column.
- Shared mode (`floe.iceberg.storage=shared`, issue #16) with Avro keys and values and
  keep-raw: once the segments have left local disk, a consumer from offset 0 gets every
  record (a dead letter and headers among them) equal to what a copy topic with the
  same bytes serves, `AvroDeserializer` decodes them, and pyiceberg and DuckDB still
  read the typed columns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from clients import create_topic
from failpoints import assert_failpoints_armed
from floe_process import free_port
from test_schema_registry import ORDER_PROTO, ORDER_V1, proto_message_class, proto_order, wait_registry, with_field
from test_tiering import catalog

BROKER = {"floe.iceberg.tick-ms": "100"}
TYPED = {"floe.iceberg.enabled": "true", "floe.iceberg.target-lag-ms": "0",
         "floe.iceberg.value.format": "schema-registry"}
# Version 2: a new top-level field, and a new field inside the `customer` record.
ORDER_V2 = with_field({**ORDER_V1, "fields": [
    {**f, "type": {**f["type"], "fields": f["type"]["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}}
    if f["name"] == "customer" else f for f in ORDER_V1["fields"]]},
    {"name": "channel", "type": ["null", "string"], "default": None})
ORDER_BAD = with_field(ORDER_V1, {"name": "warehouse", "type": "string"})  # no default: not BACKWARD


@pytest.fixture
def registry(floe_factory):
    broker = floe_factory("floe", start=False, overrides=BROKER)
    broker.schema_registry_port = free_port()
    broker.start()
    wait_registry(broker.schema_registry_url)
    return broker


def rows_of(data_dir, table: str, expected: int, timeout: float = 60.0) -> list[dict]:
    """The rows of `kafka.<table>` once it has `expected` of them, by offset; never more."""
    deadline = time.monotonic() + timeout
    rows: list[dict] = []
    while time.monotonic() < deadline:
        if (data_dir / "iceberg" / "catalog.db").exists():
            try:
                rows = catalog(data_dir).load_table(("kafka", table)).scan().to_arrow().to_pylist()
            except Exception:  # noqa: BLE001 - not created yet
                rows = []
        assert len(rows) <= expected, f"{table}: {len(rows)} rows, expected {expected}"
        if len(rows) == expected:
            return sorted(rows, key=lambda r: (r["partition"], r["offset"]))
        time.sleep(0.3)
    raise AssertionError(f"{table}: {len(rows)} rows after {timeout}s, expected {expected}")


def order(i: int, v2: bool = False) -> dict:
    o = {"id": i, "customer": {"name": f"c{i % 4}", "tags": ["a", "b", "c"][: i % 4]},
         "lines": {"sku-1": i, "sku-2": 2 * i}, "note": None if i % 2 else f"note {i}",
         "total": Decimal(f"{i}.{i % 100:02d}"), "placed": datetime(2026, 12, 3, 12, i % 60, tzinfo=timezone.utc)}
    if v2:
        o["channel"] = None if i % 3 == 0 else f"ch{i % 3}"
        o["customer"]["email"] = f"c{i}@example.com"
    return o


def test_avro_values_become_typed_columns_that_evolve_with_dead_letters(registry, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension

    topic = create_topic(registry.bootstrap, "orders", partitions=1, config=TYPED)
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, json.dumps(ORDER_V1))
    producer = Producer({"bootstrap.servers": registry.bootstrap, "linger.ms": 5})
    sent: list[tuple[dict | None, bytes | None]] = []  # by offset: (order, raw bytes for dead letters)

    def send(value: bytes | None, expect: dict | None):
        producer.produce(topic, value=value, key=f"k{len(sent)}".encode())
        sent.append((expect, value))

    for i in range(30):
        send(v1(order(i), ctx), order(i))
    assert producer.flush(30) == 0
    # Version 2 adds an optional field: compatible, a new column.
    v2 = AvroSerializer(client, json.dumps(ORDER_V2))
    for i in range(30, 50):
        send(v2(order(i, v2=True), ctx), order(i, v2=True))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409
    # Dead letters: not framed, a bogus schema id, bytes that are not an Order.
    v1_id = client.get_version(f"{topic}-value", 1).schema_id
    dead = [b"plain text, no magic byte", b"\x00\x00\x01\x86\xa0garbage", b"\x00" + v1_id.to_bytes(4, "big") + b"\xff\xff"]
    for raw in dead:
        send(raw, None)
    send(None, {})  # a tombstone: a typed row, all value columns null
    for i in range(50, 55):
        send(v1(order(i), ctx), order(i))  # version 1 again, after version 2
    assert producer.flush(30) == 0

    typed_expected = [(o, e) for o, (e, _) in enumerate(sent) if e is not None]
    dead_expected = [(o, raw) for o, (e, raw) in enumerate(sent) if e is None]
    rows = rows_of(registry.data_dir, topic, len(typed_expected))
    letters = rows_of(registry.data_dir, f"{topic}__dlq", len(dead_expected))

    assert [r["offset"] for r in rows] == [o for o, _ in typed_expected]
    assert "value" not in rows[0], "typed columns replace the binary value"
    for r, (offset, want) in zip(rows, typed_expected):
        assert r["key"] == f"k{offset}".encode()
        if not want:
            assert all(r[c] is None for c in ("id", "customer", "lines", "total", "channel")), r
            continue
        got = {"id": r["id"], "customer": dict(r["customer"]), "lines": dict(r["lines"]), "note": r["note"],
               "total": r["total"], "placed": r["placed"]}
        if "channel" in want:
            got["channel"] = r["channel"]
        else:
            assert r["channel"] is None and got["customer"].pop("email") is None, "a version-1 row has no channel, no email"
        assert got == want, offset

    assert [r["offset"] for r in letters] == [o for o, _ in dead_expected]
    assert [r["value"] for r in letters] == [raw for _, raw in dead_expected], "dead letters keep their bytes"
    errors = [r["error"] for r in letters]
    assert "magic byte" in errors[0], errors
    assert "100000" in errors[1], errors
    assert errors[2].startswith(f"schema id {v1_id}:"), errors
    assert registry.metric("floe_iceberg_dead_letters_total", topic=topic) == len(dead_expected)

    # The table's schema: v2's column after v1's, as Iceberg schema evolution.
    table = catalog(registry.data_dir).load_table(("kafka", topic))
    names = [f.name for f in table.schema().fields]
    assert names.index("placed") < names.index("channel")
    assert len(table.schemas()) >= 2, "evolved, not re-created"

    # DuckDB reads the same table through Floe's REST catalog: an aggregate over typed columns.
    con = duckdb.connect()
    for ext in ("iceberg", "avro", "httpfs"):
        import_extension(ext, con=con)
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH 'floe' AS f (TYPE iceberg, ENDPOINT '{registry.iceberg_rest_url}', AUTHORIZATION_TYPE 'none')")
    got = dict(con.execute(
        f"select customer.name, sum(total) from f.kafka.{topic} where id is not null group by 1").fetchall())
    want: dict[str, Decimal] = {}
    for _, o in typed_expected:
        if o:
            want[o["customer"]["name"]] = want.get(o["customer"]["name"], Decimal(0)) + o["total"]
    assert got == want


def test_protobuf_values_become_typed_columns(registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    Order = proto_message_class(tmp_path, ORDER_PROTO % "")
    topic = create_topic(registry.bootstrap, "proto-orders", partitions=2, config=TYPED)
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    serializer = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    sent = {}
    for i in range(40):
        o = proto_order(Order, i)
        producer.produce(topic, value=serializer(o, ctx), partition=i % 2, key=str(i).encode())
        sent[str(i).encode()] = o
    assert producer.flush(30) == 0
    rows = rows_of(registry.data_dir, topic, len(sent))
    for r in rows:
        o = sent[r["key"]]
        assert (r["id"], r["total"], r["customer"]["name"], r["customer"]["tags"]) == (o.id, o.total, o.customer.name, list(o.customer.tags))
        assert dict(r["lines"]) == dict(o.lines)
        assert r["note"] == (o.note if o.HasField("note") else None), "optional presence: null when absent"
        assert r["placed"] == datetime.fromtimestamp(o.placed.seconds, tz=timezone.utc)
    assert rows_of(registry.data_dir, f"{topic}__dlq", 0) == []


def test_a_kill_between_the_dead_letter_and_the_typed_commit_keeps_each_record_once(floe_factory):
    """Failpoint `tiering.dlq.committed` aborts the broker after the dead letters'
    commit, before the typed rows'; after the restart every offset is in exactly
    one of the two tables, once."""
    broker = floe_factory("floe", start=False, overrides=BROKER,
                          env={"FAILPOINTS": "tiering.dlq.committed=return(abort)"})
    broker.schema_registry_port = free_port()
    broker.start()
    wait_registry(broker.schema_registry_url)
    assert_failpoints_armed(broker)
    topic = create_topic(broker.bootstrap, "kill-orders", partitions=1, config=TYPED)
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    ser = AvroSerializer(client, json.dumps(ORDER_V1))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    values = [ser(order(i), SerializationContext(topic, MessageField.VALUE)) for i in range(10)]
    values[4] = b"not framed"
    for v in values:
        producer.produce(topic, value=v)
    assert producer.flush(30) == 0
    broker.proc.wait(timeout=60)
    assert broker.proc.returncode != 0, "the failpoint aborted the broker"
    assert rows_of(broker.data_dir, f"{topic}__dlq", 1)[0]["offset"] == 4, "the dead letters were committed"
    broker.start(env={})
    wait_registry(broker.schema_registry_url)
    rows = rows_of(broker.data_dir, topic, 9)
    assert [r["offset"] for r in rows] == [o for o in range(10) if o != 4]
    assert [r["id"] for r in rows] == [o for o in range(10) if o != 4]
    time.sleep(1.0)  # a few more passes: still one dead letter, not two
    assert [r["offset"] for r in rows_of(broker.data_dir, f"{topic}__dlq", 1)] == [4]


ORDER_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"},
                                                      "tags": {"type": "array", "items": {"type": "string"}}}},
        "note": {"type": ["string", "null"]},
        "total": {"type": "number"},
        "placed": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "customer"],
}


def test_json_schema_values_become_typed_columns(registry):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    topic = create_topic(registry.bootstrap, "json-orders", partitions=1, config=TYPED)
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    ser = JSONSerializer(json.dumps(ORDER_JSON), client)
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    sent = [{"id": i, "customer": {"name": f"c{i}", "tags": ["x"] * (i % 3)}, "note": None if i % 2 else f"n{i}",
             "total": i * 0.25, "placed": f"2026-12-03T12:{i:02d}:00Z"} for i in range(20)]
    for o in sent:
        producer.produce(topic, value=ser(o, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    rows = rows_of(registry.data_dir, topic, len(sent))
    for r, o in zip(rows, sent):
        assert (r["id"], r["customer"], r["note"], r["total"]) == (o["id"], o["customer"], o["note"], o["total"])
        assert r["placed"] == datetime.fromisoformat(o["placed"].replace("Z", "+00:00"))


LINE_V1 = {"type": "record", "name": "Line", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "float"}]}
LINE_V2 = {"type": "record", "name": "Line", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "long"}, {"name": "price", "type": "double"}]}


def test_a_widened_field_is_promoted_in_place(registry):
    """int → long and float → double between two registered versions (Avro's
    BACKWARD allows both) are Iceberg type promotions: same columns, same field
    ids, wider types; rows written before read widened."""
    topic = create_topic(registry.bootstrap, "lines", partitions=1, config=TYPED)
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    narrow = [{"sku": f"s{i}", "qty": i, "price": 0.5 * i} for i in range(5)]
    ser = AvroSerializer(client, json.dumps(LINE_V1))
    for line in narrow:
        producer.produce(topic, value=ser(line, ctx))
    assert producer.flush(30) == 0
    rows_of(registry.data_dir, topic, 5)
    ids = {f.name: f.field_id for f in catalog(registry.data_dir).load_table(("kafka", topic)).schema().fields}
    wide = [{"sku": f"w{i}", "qty": 2**40 + i, "price": 1e300} for i in range(5)]
    ser = AvroSerializer(client, json.dumps(LINE_V2))
    for line in wide:
        producer.produce(topic, value=ser(line, ctx))
    assert producer.flush(30) == 0
    rows = rows_of(registry.data_dir, topic, 10)
    assert [{k: r[k] for k in ("sku", "qty", "price")} for r in rows] == narrow + wide
    schema = catalog(registry.data_dir).load_table(("kafka", topic)).schema()
    assert str(schema.find_field("qty").field_type) == "long" and str(schema.find_field("price").field_type) == "double"
    assert {f.name: f.field_id for f in schema.fields} == ids, "promoted in place: no new columns, the same ids"
    assert rows_of(registry.data_dir, f"{topic}__dlq", 0) == []


JS_DIR = Path(__file__).resolve().parents[1] / "js"


def test_kafkajs_avro_values_become_typed_columns(registry):
    """kafkajs + @kafkajs/confluent-schema-registry (avsc, with decimal and timestamp-millis
    logical types) register an Avro schema in Floe's registry and produce; the typed table's
    columns read back equal, field by field: a nested record with an array and a boolean,
    an array of records, a map, a nullable string, a decimal (negative ones too), a
    timestamp, an enum and a double."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (tests/run-all.sh installs it)")
    for module in ("kafkajs", "@kafkajs/confluent-schema-registry", "avsc"):
        if not (JS_DIR / "node_modules" / module).is_dir():
            pytest.skip(f"tests/js/node_modules/{module} is absent (cd tests/js && npm ci)")
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension

    topic = create_topic(registry.bootstrap, "js-orders", partitions=1, config=TYPED)
    out = subprocess.run([node, str(JS_DIR / "typed_table_producer.mjs"), registry.bootstrap,
                          registry.schema_registry_url, topic, "24"],
                         cwd=JS_DIR, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout.strip().splitlines()[-1])["sent"]
    assert len(sent) == 24

    def expected(o: dict) -> dict:
        return {**o, "total": Decimal(o["total"]),
                "placed": datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=o["placed"])}

    rows = rows_of(registry.data_dir, topic, len(sent))
    assert [r["key"] for r in rows] == [f"k{i}".encode() for i in range(len(sent))]
    for r, o in zip(rows, sent):
        got = {"id": r["id"], "customer": r["customer"], "items": r["items"], "attributes": dict(r["attributes"]),
               "note": r["note"], "total": r["total"], "placed": r["placed"], "kind": r["kind"], "score": r["score"]}
        assert got == expected(o), r["key"]
    assert rows_of(registry.data_dir, f"{topic}__dlq", 0) == []
    schema = catalog(registry.data_dir).load_table(("kafka", topic)).schema()
    assert str(schema.find_field("total").field_type) == "decimal(10, 2)"

    # DuckDB over the same table's metadata, the same values.
    metadata = catalog(registry.data_dir).load_table(("kafka", topic)).metadata_location.removeprefix("file://")
    con = duckdb.connect()
    for ext in ("iceberg", "avro"):
        import_extension(ext, con=con)
    con.execute("LOAD iceberg")
    got = con.execute(
        "select id, customer, items, map_entries(attributes), note, total, epoch_ms(placed), kind, score "
        "from iceberg_scan(?) order by \"offset\"", [metadata]).fetchall()
    assert len(got) == len(sent)
    for (id_, customer, items, attributes, note, total, placed_ms, kind, score), o in zip(got, sent):
        want = expected(o)
        assert (id_, customer, items, note, total, kind, score) == (
            want["id"], want["customer"], want["items"], want["note"], want["total"], want["kind"], want["score"]), id_
        assert {e["key"]: e["value"] for e in attributes} == want["attributes"], id_
        assert placed_ms == o["placed"], id_
ORDER_KEY = {"type": "record", "name": "OrderKey", "fields": [
    {"name": "region", "type": "string"}, {"name": "id", "type": "long"}]}


def test_avro_keys_become_a_key_struct(registry):
    topic = create_topic(registry.bootstrap, "keyed-orders", partitions=1,
                         config={**TYPED, "floe.iceberg.key.format": "schema-registry"})
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    key_ser = AvroSerializer(client, json.dumps(ORDER_KEY))
    value_ser = AvroSerializer(client, json.dumps(ORDER_V1))
    kctx, vctx = SerializationContext(topic, MessageField.KEY), SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": registry.bootstrap, "linger.ms": 5})
    keys = [{"region": f"r{i % 3}", "id": 1000 + i} for i in range(20)]
    for i, k in enumerate(keys):
        producer.produce(topic, key=key_ser(k, kctx), value=value_ser(order(i), vctx))
    producer.produce(topic, value=value_ser(order(20), vctx))  # a null key: a null `key`
    producer.produce(topic, key=b"not framed", value=value_ser(order(21), vctx))  # a dead letter
    assert producer.flush(30) == 0

    rows = rows_of(registry.data_dir, topic, 21)
    assert [dict(r["key"]) for r in rows[:20]] == keys, "the key struct's fields are the produced key's"
    assert [r["id"] for r in rows] == list(range(21)), "values typed beside the key"
    assert rows[20]["key"] is None
    assert "key_raw" not in rows[0], "no raw key bytes without keep-raw"
    key_type = catalog(registry.data_dir).load_table(("kafka", topic)).schema().find_field("key").field_type
    assert [(f.name, str(f.field_type)) for f in key_type.fields] == [("region", "string"), ("id", "long")]
    letters = rows_of(registry.data_dir, f"{topic}__dlq", 1)
    assert letters[0]["offset"] == 21 and letters[0]["key"] == b"not framed"
    assert letters[0]["error"].startswith("key: ") and "magic byte" in letters[0]["error"], letters[0]["error"]


def test_a_bad_key_format_is_invalid_config(registry):
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as refused:
        create_topic(registry.bootstrap, "bad-key-format", config={**TYPED, "floe.iceberg.key.format": "avro"})
    assert refused.value.args[0].name() == "INVALID_CONFIG", refused.value
    assert "floe.iceberg.key.format" in refused.value.args[0].str()


JSON_TOPIC = {"floe.iceberg.enabled": "true", "floe.iceberg.target-lag-ms": "0",
              "floe.iceberg.value.format": "json", "floe.iceberg.key.format": "json"}


def test_schemaless_json_gets_inferred_columns_that_widen(floe_factory):
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension

    broker = floe_factory("floe", overrides=BROKER)  # no Schema Registry: json needs none
    topic = create_topic(broker.bootstrap, "clicks", partitions=1, config=JSON_TOPIC)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    first = [{"user": f"u{i}", "n": i, "amount": i + 0.5, "page": {"path": f"/p{i}", "tags": ["a"] * (1 + i % 3)}}
             for i in range(10)]
    for i, v in enumerate(first):
        producer.produce(topic, key=json.dumps({"session": i % 2}).encode(), value=json.dumps(v).encode())
    assert producer.flush(30) == 0
    rows_of(broker.data_dir, topic, 10)
    # Later: a new field, an integer in the double column, a family change and non-JSON (dead letters).
    later = [{"user": f"u{i}", "n": i, "amount": 7, "referrer": f"r{i}"} for i in range(10, 15)]
    for v in later:
        producer.produce(topic, key=b'{"session": 9}', value=json.dumps(v).encode())
    producer.produce(topic, value=json.dumps({"user": {"id": 1}}).encode())  # offset 15: user was a string
    producer.produce(topic, value=b"not json")  # offset 16
    assert producer.flush(30) == 0

    rows = rows_of(broker.data_dir, topic, 15)
    assert [r["user"] for r in rows] == [v["user"] for v in first + later]
    assert [r["n"] for r in rows] == list(range(15))
    assert [r["amount"] for r in rows] == [v["amount"] + 0.0 for v in first + later]
    assert [r["page"] and r["page"]["path"] for r in rows] == [f"/p{i}" for i in range(10)] + [None] * 5
    assert [r["page"]["tags"] for r in rows[:10]] == [v["page"]["tags"] for v in first]
    assert [r["referrer"] for r in rows] == [None] * 10 + [f"r{i}" for i in range(10, 15)], "the field that appeared later"
    assert [r["key"]["session"] for r in rows] == [i % 2 for i in range(10)] + [9] * 5
    schema = catalog(broker.data_dir).load_table(("kafka", topic)).schema()
    assert {n: str(schema.find_field(n).field_type) for n in ("user", "n", "amount", "referrer")} == \
        {"user": "string", "n": "long", "amount": "double", "referrer": "string"}
    letters = rows_of(broker.data_dir, f"{topic}__dlq", 2)
    assert [r["offset"] for r in letters] == [15, 16]
    assert "`user` is a string in the table and an object (struct) in this record" in letters[0]["error"], letters[0]["error"]
    assert "not JSON" in letters[1]["error"], letters[1]["error"]

    con = duckdb.connect()
    for ext in ("iceberg", "avro", "httpfs"):
        import_extension(ext, con=con)
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH 'floe' AS f (TYPE iceberg, ENDPOINT '{broker.iceberg_rest_url}', AUTHORIZATION_TYPE 'none')")
    got = con.execute(f'select n, "user", amount, page.path, referrer from f.kafka.{topic} order by n').fetchall()
    want = [(i, v["user"], v["amount"] + 0.0, v.get("page", {}).get("path"), v.get("referrer")) for i, v in enumerate(first + later)]
    assert got == want


SHARED_BROKER = {**BROKER, "floe.iceberg.target-lag-ms": "1000",
                 "log.retention.check.interval.ms": "500"}
SHARED_BASE_TS = 1_780_000_000_000


def test_a_shared_avro_topic_serves_its_records_from_the_typed_table(floe_factory):
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    from clients import unique_topic
    from test_shared_reads import confluent_drain, list_offset

    broker = floe_factory("floe", start=False, overrides=SHARED_BROKER)
    broker.schema_registry_port = free_port()
    broker.start()
    wait_registry(broker.schema_registry_url)
    # retention.ms -1: the records carry fixed timestamps months old.
    common = {"segment.bytes": "16384", "retention.ms": "-1"}
    copy = create_topic(broker.bootstrap, unique_topic("avro-copy"), partitions=1, config=common)
    shared = create_topic(broker.bootstrap, unique_topic("avro-shared"), partitions=1, config={
        **common, **TYPED, "floe.iceberg.target-lag-ms": "1000", "floe.iceberg.key.format": "schema-registry",
        "floe.iceberg.keep-raw": "true", "floe.iceberg.storage": "shared", "local.retention.ms": "0"})
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    key_ser = AvroSerializer(client, json.dumps("string"))
    value_ser = AvroSerializer(client, json.dumps(ORDER_V1))
    kctx, vctx = SerializationContext(shared, MessageField.KEY), SerializationContext(shared, MessageField.VALUE)
    # The same bytes to both topics, in the same order: the same offsets.
    sent: list[tuple[bytes | None, bytes | None, list, int]] = []
    for i in range(300):
        key = key_ser(f"user-{i % 7}", kctx)
        value = None if i == 40 else value_ser(order(i), vctx)
        headers = [("h", f"{i}".encode()), ("h", b"again")] if i % 5 == 0 else []
        sent.append((key, value, headers, SHARED_BASE_TS + i))
    dead_at = 77
    sent[dead_at] = (sent[dead_at][0], b"not avro at all", [("why", b"dead letter")], sent[dead_at][3])
    tail = [(key_ser(f"tail-{i}", kctx), value_ser(order(1000 + i), vctx), [], SHARED_BASE_TS + 10_000 + i) for i in range(150)]
    for topic in (copy, shared):
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "compression.type": "lz4"})
        for key, value, headers, ts in sent:
            p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0)
        assert p.flush(30) == 0
        # An uncompressed tail, last: it keeps the interesting segments sealed.
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "compression.type": "none", "batch.size": 4096})
        for key, value, headers, ts in tail:
            p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0)
        assert p.flush(30) == 0
    end = list_offset(broker, shared, -1)
    assert end == list_offset(broker, copy, -1) == len(sent) + len(tail)
    # Wait until the workload's records are in the table only.
    deadline = time.monotonic() + 90
    while list_offset(broker, shared, -4) < len(sent):
        assert time.monotonic() < deadline, f"local log start {list_offset(broker, shared, -4)}, want >= {len(sent)}"
        time.sleep(0.5)
    assert list_offset(broker, shared, -2) == 0

    want = confluent_drain(broker.bootstrap, copy, "read_uncommitted", end)
    got = confluent_drain(broker.bootstrap, shared, "read_uncommitted", end)
    assert got == want, "the table serves what the log served"
    assert broker.metric("floe_fetch_bytes_total", path="table-rebuild") > 0, "nothing was served from the table"
    assert got[dead_at][3] == b"not avro at all" and got[dead_at][4] == [("why", b"dead letter")]
    assert got[40][3] is None and got[5][4] == [("h", b"5"), ("h", b"again")]
    key_de, value_de = AvroDeserializer(client), AvroDeserializer(client)
    for offset, _ts, key, value, _h in got[: len(sent)]:
        assert key_de(key, kctx) == f"user-{offset % 7}"
        if offset not in (40, dead_at):
            assert value_de(value, vctx) == order(offset), offset

    # SQL readers still get the typed columns (and the dead letter in __dlq).
    table = catalog(broker.data_dir).load_table(("kafka", shared))
    rows = sorted(table.scan(row_filter=f"offset < {len(sent)}").to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == [o for o in range(len(sent)) if o != dead_at]
    assert rows[3]["key"] == "user-3" and rows[3]["id"] == 3 and rows[3]["total"] == order(3)["total"]
    assert rows[3]["key_raw"] == sent[3][0] and rows[3]["value"] == sent[3][1], "keep-raw keeps the bytes"
    letters = catalog(broker.data_dir).load_table(("kafka", f"{shared}__dlq")).scan().to_arrow().to_pylist()
    assert [(r["offset"], r["value"]) for r in letters] == [(dead_at, b"not avro at all")]
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension
    con = duckdb.connect()
    for ext in ("iceberg", "avro", "httpfs"):
        import_extension(ext, con=con)
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH 'floe' AS f (TYPE iceberg, ENDPOINT '{broker.iceberg_rest_url}', AUTHORIZATION_TYPE 'none')")
    got_sum = con.execute(f'select count(*), sum(id) from f.kafka."{shared}" where "offset" < {len(sent)} and id is not null').fetchone()
    typed_ids = [o for o in range(len(sent)) if o not in (40, dead_at)]
    assert got_sum == (len(typed_ids), sum(typed_ids))
