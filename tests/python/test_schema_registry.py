"""The built-in Schema Registry (`floe.schema.registry.listen`) end to end.

- confluent-kafka's own `SchemaRegistryClient` and `AvroSerializer` /
  `AvroDeserializer` register, produce and consume through Floe's registry and
  broker; the values read back equal what was produced, field by field.
- The REST semantics of Confluent's documented API, over raw HTTP: status codes
  and error codes (40401, 40402, 40403, 40404-40407, 409, 42201, 42202, 42203),
  soft then permanent deletion, `deleted=true` listings, `latest`, lookups,
  compatibility checks, subject configs and modes.
- Durability: schemas live in the compacted `_schemas` topic, survive restarts,
  keep their ids, and ids are not handed out twice; a kill -9 between the
  append and its fsync (failpoint `schema.registry.append`) leaves a write that
  a retry finds done, never a second version or a second id.
- Bad input: bodies that are not JSON, empty and malformed schemas, deep nesting,
  a 10 MB schema, a body over the size limit: 4xx answers, the broker still up.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from decimal import Decimal
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from failpoints import assert_failpoints_armed
from floe_process import free_port

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": {"type": "record", "name": "Customer",
                                      "fields": [{"name": "name", "type": "string"},
                                                 {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
        {"name": "lines", "type": {"type": "map", "values": "int"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def with_field(schema: dict, field: dict) -> dict:
    return {**schema, "fields": schema["fields"] + [field]}


ORDER_V2 = with_field(ORDER_V1, {"name": "channel", "type": "string", "default": "web"})
ORDER_BAD = with_field(ORDER_V1, {"name": "warehouse", "type": "string"})  # no default: not BACKWARD


def http(url: str, method: str = "GET", body=None, raw: bytes | None = None, timeout: float = 30):
    """(status, parsed JSON or text) of one request; errors are answers, not exceptions."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, payload = e.code, e.read()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def wait_registry(url: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            if http(url + "/subjects", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"schema registry at {url} did not answer"
        time.sleep(0.1)


@pytest.fixture
def registry(floe_factory):
    """A broker with its Schema Registry on; `.schema_registry_url`."""
    broker = floe_factory("floe", start=False)
    broker.schema_registry_port = free_port()
    broker.start()
    wait_registry(broker.schema_registry_url)
    return broker


def test_avro_serializer_round_trips_through_floe(registry):
    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    serializer = AvroSerializer(client, json.dumps(ORDER_V1))
    deserializer = AvroDeserializer(client)
    topic = "orders"
    orders = [
        {"id": i, "customer": {"name": f"c{i}", "tags": ["a", "b"][: i % 3]}, "lines": {"sku-1": i, "sku-2": 2 * i},
         "note": None if i % 2 else f"note {i}", "total": Decimal(f"{i}.{i % 100:02d}"),
         "placed": datetime(2026, 12, 3, 12, i % 60, tzinfo=timezone.utc)}
        for i in range(50)
    ]
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    for o in orders:
        producer.produce(topic, value=serializer(o, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0

    # Registered under the TopicNameStrategy subject, as the serializer names it.
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and latest.schema_id >= 1
    assert json.loads(latest.schema.schema_str)["name"] == "Order"

    consumer = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "sr", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(orders) and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is None or m.error():
            continue
        assert m.value()[0] == 0 and int.from_bytes(m.value()[1:5], "big") == latest.schema_id, "Confluent wire format"
        got.append(deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
    consumer.close()
    assert got == orders

    # A compatible evolution registers version 2 with a new id; an incompatible one is refused with 409.
    v2_id = client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_V2), "AVRO"))
    assert v2_id != latest.schema_id
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(ORDER_BAD), "AVRO"))
    assert refused.value.http_status_code == 409 and refused.value.error_code == 409
    assert client.get_versions(f"{topic}-value") == [1, 2]


def test_rest_semantics_as_confluent_documents_them(registry):
    url = registry.schema_registry_url
    s = lambda schema: {"schema": json.dumps(schema)}  # noqa: E731

    assert http(url + "/subjects") == (200, [])
    assert http(url + "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert http(url + "/mode") == (200, {"mode": "READWRITE"})
    assert sorted(http(url + "/schemas/types")[1]) == ["AVRO", "JSON", "PROTOBUF"]

    status, v1 = http(url + "/subjects/a-value/versions", "POST", s(ORDER_V1))
    assert status == 200 and set(v1) == {"id"}
    # The same schema, written differently, is the same version and id.
    spaced = json.dumps(ORDER_V1, indent=4, sort_keys=True)
    assert http(url + "/subjects/a-value/versions", "POST", {"schema": spaced}) == (200, v1)
    # ... and under another subject it keeps its id (ids are global), as a new version 1 there.
    assert http(url + "/subjects/b-value/versions", "POST", s(ORDER_V1)) == (200, v1)
    status, v2 = http(url + "/subjects/a-value/versions", "POST", s(ORDER_V2))
    assert status == 200 and v2["id"] > v1["id"]

    status, latest = http(url + "/subjects/a-value/versions/latest")
    assert status == 200 and latest["version"] == 2 and latest["id"] == v2["id"] and latest["subject"] == "a-value"
    assert "schemaType" not in latest, "Avro is the default and Confluent leaves it out"
    assert http(url + "/subjects/a-value/versions/1")[1]["id"] == v1["id"]
    assert http(url + f"/schemas/ids/{v1['id']}")[1] == {"schema": json.dumps(ORDER_V1)}
    assert http(url + f"/schemas/ids/{v1['id']}/schema") == (200, ORDER_V1)
    assert http(url + f"/schemas/ids/{v1['id']}/subjects") == (200, ["a-value", "b-value"])
    assert http(url + f"/schemas/ids/{v1['id']}/versions") == (200, [{"subject": "a-value", "version": 1}, {"subject": "b-value", "version": 1}])

    # Lookup: found, not registered under the subject, subject unknown.
    status, found = http(url + "/subjects/a-value", "POST", s(ORDER_V2))
    assert status == 200 and (found["version"], found["id"]) == (2, v2["id"])
    assert http(url + "/subjects/b-value", "POST", s(ORDER_V2))[1]["error_code"] == 40403
    assert http(url + "/subjects/nope", "POST", s(ORDER_V1)) == (404, {"error_code": 40401, "message": "Subject 'nope' not found."})

    # Errors by code.
    assert http(url + "/subjects/a-value/versions/9")[1]["error_code"] == 40402
    assert http(url + "/subjects/a-value/versions/zero")[1]["error_code"] == 42202
    assert http(url + "/schemas/ids/999") == (404, {"error_code": 40403, "message": "Schema not found"})
    status, refused = http(url + "/subjects/a-value/versions", "POST", s(ORDER_BAD))
    assert (status, refused["error_code"]) == (409, 409)
    status, invalid = http(url + "/subjects/a-value/versions", "POST", {"schema": '{"type": "record"}'})
    assert (status, invalid["error_code"]) == (422, 42201)
    assert http(url + "/config", "PUT", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203

    # Compatibility checks, without registering.
    assert http(url + "/compatibility/subjects/a-value/versions/latest", "POST", s(ORDER_BAD)) == (200, {"is_compatible": False})
    status, verbose = http(url + "/compatibility/subjects/a-value/versions?verbose=true", "POST", s(ORDER_BAD))
    assert status == 200 and verbose["is_compatible"] is False and verbose["messages"]
    assert http(url + "/compatibility/subjects/a-value/versions/1", "POST", s(ORDER_V2)) == (200, {"is_compatible": True})

    # Subject config: NONE lets the incompatible schema in; deleting it restores the global level.
    assert http(url + "/config/a-value")[1]["error_code"] == 40408
    assert http(url + "/config/a-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert http(url + "/config/a-value", "PUT", {"compatibility": "none"}) == (200, {"compatibility": "NONE"})
    status, v3 = http(url + "/subjects/a-value/versions", "POST", s(ORDER_BAD))
    assert status == 200
    assert http(url + "/config/a-value", "DELETE") == (200, {"compatibilityLevel": "NONE"})

    # Modes: READONLY refuses writes with 42205, reads go on.
    assert http(url + "/mode/b-value", "PUT", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert http(url + "/subjects/b-value/versions", "POST", s(ORDER_V2))[1]["error_code"] == 42205
    assert http(url + "/subjects/b-value/versions") == (200, [1])
    assert http(url + "/mode/b-value", "DELETE") == (200, {"mode": "READONLY"})
    assert http(url + "/mode/b-value")[1]["error_code"] == 40409

    # Soft delete, then permanent: listings with and without deleted=true.
    assert http(url + "/subjects/a-value/versions/3", "DELETE") == (200, 3)
    assert http(url + "/subjects/a-value/versions/3", "DELETE")[1]["error_code"] == 40406
    assert http(url + "/subjects/a-value/versions") == (200, [1, 2])
    assert http(url + "/subjects/a-value/versions?deleted=true") == (200, [1, 2, 3])
    assert http(url + f"/schemas/ids/{v3['id']}")[0] == 200, "a soft-deleted version's schema stays readable by id"
    assert http(url + "/subjects/a-value/versions/2?permanent=true", "DELETE")[1]["error_code"] == 40407
    assert http(url + "/subjects/a-value/versions/3?permanent=true", "DELETE") == (200, 3)
    assert http(url + "/subjects/a-value/versions?deleted=true") == (200, [1, 2])
    assert http(url + "/subjects/b-value?permanent=true", "DELETE")[1]["error_code"] == 40405
    assert http(url + "/subjects/b-value", "DELETE") == (200, [1])
    assert http(url + "/subjects") == (200, ["a-value"])
    assert http(url + "/subjects?deleted=true") == (200, ["a-value", "b-value"])
    assert http(url + "/subjects/b-value", "DELETE")[1]["error_code"] == 40404
    assert http(url + "/subjects/b-value?permanent=true", "DELETE") == (200, [1])
    assert http(url + "/subjects?deleted=true") == (200, ["a-value"])

    # Unknown routes and methods, as JAX-RS answers them.
    assert http(url + "/nothing-here")[0] == 404
    assert http(url + "/subjects", "PUT", {})[0] == 405


def test_schemas_survive_restarts_and_ids_are_never_reused(registry):
    url = registry.schema_registry_url
    ids = [http(url + f"/subjects/s{i}-value/versions", "POST", {"schema": json.dumps({"type": "enum", "name": f"E{i}", "symbols": ["A"]})})[1]["id"]
           for i in range(3)]
    assert ids == sorted(set(ids))
    assert http(url + "/config", "PUT", {"compatibility": "FULL"})[0] == 200
    # The last id's only version goes away for good before the restart.
    assert http(url + "/subjects/s2-value", "DELETE")[0] == 200
    assert http(url + "/subjects/s2-value?permanent=true", "DELETE")[0] == 200

    registry.restart()
    wait_registry(url)
    assert http(url + "/subjects") == (200, ["s0-value", "s1-value"])
    assert http(url + "/subjects/s1-value/versions/1")[1]["id"] == ids[1]
    assert http(url + "/config") == (200, {"compatibilityLevel": "FULL"})
    fresh = http(url + "/subjects/t-value/versions", "POST", {"schema": '"string"'})[1]["id"]
    assert fresh > ids[2], "a new schema gets a new id after a restart, not the permanently deleted one's"

    # The registry's topic is an ordinary compacted topic a Kafka client can read.
    consumer = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "peek", "auto.offset.reset": "earliest"})
    consumer.subscribe(["_schemas"])
    keys = []
    deadline = time.monotonic() + 20
    while len(keys) < 6 and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and not m.error():
            keys.append(json.loads(m.key()))
    consumer.close()
    assert {"keytype": "SCHEMA", "subject": "s0-value", "version": 1, "magic": 1} in keys


def test_a_kill_between_append_and_fsync_leaves_a_write_a_retry_finds(floe_factory):
    broker = floe_factory("floe", start=False)
    broker.schema_registry_port = free_port()
    broker.start(env={"FAILPOINTS": "schema.registry.append=1*off->return(abort)"})
    assert_failpoints_armed(broker)
    url = broker.schema_registry_url
    wait_registry(url)
    first = http(url + "/subjects/k-value/versions", "POST", {"schema": '"int"'})
    assert first == (200, {"id": 1})
    with pytest.raises(OSError):
        http(url + "/subjects/k-value/versions", "POST", {"schema": '"long"'}, timeout=10)
    broker.proc.wait(timeout=10)
    broker.start(env={})
    wait_registry(url)
    # The appended record survived the process (not the machine): the retry answers it.
    status, again = http(url + "/subjects/k-value/versions", "POST", {"schema": '"long"'})
    assert status == 200
    assert http(url + "/subjects/k-value/versions") == (200, [1, 2])
    assert http(url + "/subjects/k-value/versions/2")[1]["id"] == again["id"] == 2


def test_bad_input_gets_4xx_and_the_broker_stays_up(registry):
    url = registry.schema_registry_url
    reg = url + "/subjects/bad-value/versions"
    assert http(reg, "POST", raw=b"{not json")[0] == 422
    assert http(reg, "POST", {"schema": ""})[1]["error_code"] == 42201
    assert http(reg, "POST", {"schema": "   "})[1]["error_code"] == 42201
    assert http(reg, "POST", {"schema": '"string"', "schemaType": "XML"})[1]["error_code"] == 42201
    deep = '{"type":"array","items":' * 5000 + '"int"' + "}" * 5000
    assert http(reg, "POST", {"schema": deep})[1]["error_code"] == 42201
    huge = json.dumps({"type": "record", "name": "Big", "doc": "x" * (10 << 20), "fields": [{"name": "a", "type": "int"}]})
    status, body = http(reg, "POST", {"schema": huge}, timeout=120)
    # Valid, but larger than a record of _schemas may be (max.message.bytes, 1 MiB as Kafka's default).
    assert (status, body["error_code"]) == (422, 42201) and "max.message.bytes" in body["message"], body
    status, body = http(reg, "POST", raw=b" " * (17 << 20), timeout=120)
    assert status == 413 and body["error_code"] == 413
    assert http(url + "/subjects")[0] == 200
    assert registry.running


def test_broker_side_schema_validation_refuses_records_the_registry_does_not_know(registry):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": registry.bootstrap})
    topic = "validated"
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"confluent.value.schema.validation": "true"})])
    futures[topic].result(30)
    bad = admin.create_topics([NewTopic("bad-setting", 1, 1, config={"confluent.value.schema.validation": "maybe"})])
    with pytest.raises(Exception) as refused:
        bad["bad-setting"].result(30)
    assert "INVALID_CONFIG" in str(refused.value) or "maybe" in str(refused.value)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries = list(described.values())[0].result(30)
    assert entries["confluent.value.schema.validation"].value == "true"

    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    good = AvroSerializer(client, json.dumps(ORDER_V1))
    other_id = client.register_schema("elsewhere-value", Schema('"string"', "AVRO"))

    def send(value, key=None):
        """The delivery error code (None: acknowledged) of one record, sent alone."""
        p = Producer({"bootstrap.servers": registry.bootstrap, "retries": 0, "linger.ms": 0})
        result = []
        p.produce(topic, value=value, key=key, on_delivery=lambda err, msg: result.append(err))
        p.flush(30)
        assert len(result) == 1
        return None if result[0] is None else result[0].code()

    order = {"id": 1, "customer": {"name": "c", "tags": []}, "lines": {}, "note": None,
             "total": Decimal("1.00"), "placed": datetime(2026, 12, 3, tzinfo=timezone.utc)}
    assert send(good(order, SerializationContext(topic, MessageField.VALUE))) is None
    assert send(b"plain bytes, no schema") == KafkaError.INVALID_RECORD
    assert send(b"\x00" + (99999).to_bytes(4, "big") + b"payload") == KafkaError.INVALID_RECORD
    assert send(b"\x00" + other_id.to_bytes(4, "big") + b"\x02a") == KafkaError.INVALID_RECORD, "registered, but not under validated-value"
    assert send(None, key=b"k") is None, "a tombstone carries no schema"
    assert "is not registered under subject validated-value" in registry.stderr_text()
