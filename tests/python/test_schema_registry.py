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


def test_normalize_registers_the_normalized_schema(registry):
    """`normalize=true` (register and lookup, as Confluent documents it): the registered
    text is the schema's normalized form, and a differently written copy is found by it."""
    url = registry.schema_registry_url
    spaced = json.dumps(ORDER_V1, indent=4)
    status, got = http(url + "/subjects/n-value/versions?normalize=true", "POST", {"schema": spaced})
    assert status == 200, got
    status, v = http(url + "/subjects/n-value/versions/latest")
    assert status == 200 and v["id"] == got["id"]
    assert v["schema"] != spaced and " " not in v["schema"] and "\n" not in v["schema"], v["schema"]
    assert json.loads(v["schema"])["name"] == ORDER_V1["name"]
    # The same schema under another subject keeps its id (ids follow content), and its text.
    status, again = http(url + "/subjects/p-value/versions", "POST", {"schema": spaced})
    assert status == 200 and again["id"] == got["id"]
    assert http(url + "/subjects/p-value/versions/latest")[1]["schema"] == v["schema"]
    # Without normalize a new schema's text is kept as sent.
    spaced_v2 = json.dumps(ORDER_V2, indent=4)
    status, plain = http(url + "/subjects/q-value/versions", "POST", {"schema": spaced_v2})
    assert status == 200 and plain["id"] != got["id"]
    assert http(url + "/subjects/q-value/versions/latest")[1]["schema"] == spaced_v2
    status, found = http(url + "/subjects/n-value?normalize=true", "POST", {"schema": json.dumps(ORDER_V1, indent=2)})
    assert status == 200 and found["id"] == got["id"] and found["version"] == 1, found
    # A schema that does not parse is 42201 with normalize too.
    assert http(url + "/subjects/n-value/versions?normalize=true", "POST", {"schema": "{not json"})[1]["error_code"] == 42201


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
    loop = {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}}}
    assert http(reg, "POST", {"schemaType": "JSON", "schema": json.dumps(loop)})[1]["error_code"] == 42201
    recursive = 'syntax = "proto3"; message Node { string name = 1; repeated Node children = 2; }'
    assert http(reg.replace("bad-value", "tree-value"), "POST", {"schemaType": "PROTOBUF", "schema": recursive})[0] == 200
    deep_proto = "message M { option (o) = " + "{a: " * 20000 + "1" + "}" * 20000 + "; }"
    assert http(reg, "POST", {"schemaType": "PROTOBUF", "schema": deep_proto})[1]["error_code"] == 42201
    # A flood of registrations: every one answered, ids distinct.
    flood = [http(url + f"/subjects/flood-{i}/versions", "POST", {"schema": json.dumps({"type": "fixed", "name": f"F{i}", "size": i + 1})})
             for i in range(200)]
    assert all(status == 200 for status, _ in flood)
    assert len({body["id"] for _, body in flood}) == 200
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


ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Customer { string name = 1; repeated string tags = 2; }
message Order {
  int64 id = 1;
  Customer customer = 2;
  map<string, int32> lines = 3;
  optional string note = 4;
  google.protobuf.Timestamp placed = 5;
  double total = 6;
  %s
}
"""


def proto_message_class(tmp_path, text: str, name: str = "shop.Order"):
    """The message class of `text`, compiled by protoc to a descriptor set (no generated code)."""
    import subprocess

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    # The well-known import comes from the Python runtime's own descriptor (Debian's
    # protoc ships without google/protobuf/*.proto).
    well_known = descriptor_pb2.FileDescriptorSet()
    well_known.file.add().MergeFromString(timestamp_pb2.DESCRIPTOR.serialized_pb)
    (tmp_path / "wkt.desc").write_bytes(well_known.SerializeToString())
    (tmp_path / "order.proto").write_text(text)
    out = tmp_path / "order.desc"
    done = subprocess.run(["protoc", f"-I{tmp_path}", f"--descriptor_set_in={tmp_path / 'wkt.desc'}",
                           f"--descriptor_set_out={out}", "order.proto"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pool = descriptor_pool.DescriptorPool()
    pool.Add(well_known.file[0])
    for f in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def proto_order(Order, i: int):
    """Order `i` of ORDER_PROTO: a nested message, a repeated field, a map, `note` set on odd i only."""
    o = Order(id=i, total=i * 1.5)
    o.customer.name = f"c{i}"
    o.customer.tags.extend(["a", "b"][: i % 3])
    o.lines["sku"] = i
    if i % 2:
        o.note = f"n{i}"
    o.placed.FromSeconds(1_764_000_000 + i)
    return o


def test_protobuf_serializer_round_trips_and_evolves(registry, tmp_path):
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    (tmp_path / "v1").mkdir()
    Order = proto_message_class(tmp_path / "v1", ORDER_PROTO % "")
    serializer = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(Order, {"use.deprecated.format": False})
    topic = "proto-orders"
    sent = [proto_order(Order, i) for i in range(20)]
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    for o in sent:
        producer.produce(topic, value=serializer(o, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0

    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF" and latest.version == 1
    consumer = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "proto", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and not m.error():
            assert int.from_bytes(m.value()[1:5], "big") == latest.schema_id
            got.append(deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
    consumer.close()
    assert got == sent
    assert [o.HasField("note") for o in got] == [bool(i % 2) for i in range(20)], "optional presence survives"

    # A new field is compatible; a field's type changed across wire groups is not (409).
    (tmp_path / "v2").mkdir()
    V2 = proto_message_class(tmp_path / "v2", ORDER_PROTO % "string channel = 7;")
    v2_serializer = ProtobufSerializer(V2, client, {"use.deprecated.format": False})
    v2_serializer(V2(id=1, channel="web"), SerializationContext(topic, MessageField.VALUE))
    assert client.get_versions(f"{topic}-value") == [1, 2]
    (tmp_path / "bad").mkdir()
    Bad = proto_message_class(tmp_path / "bad", ORDER_PROTO.replace("double total = 6;", "string total = 6;") % "")
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(Bad, client, {"use.deprecated.format": False})(Bad(id=1), SerializationContext(topic, MessageField.VALUE))
    assert refused.value.http_status_code == 409

    # .proto text registers too, and a syntax error is a 42201.
    status, body = http(registry.schema_registry_url + "/subjects/text-proto/versions", "POST",
                        {"schemaType": "PROTOBUF", "schema": ORDER_PROTO % ""})
    assert status == 200 and body["id"] >= 1
    status, body = http(registry.schema_registry_url + "/subjects/text-proto/versions", "POST",
                        {"schemaType": "PROTOBUF", "schema": "message { nope"})
    assert (status, body["error_code"]) == (422, 42201)


ORDER_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order", "type": "object", "additionalProperties": False,
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}},
        "lines": {"type": "object", "additionalProperties": {"type": "integer"}},
        "note": {"type": ["string", "null"]},
        "total": {"type": "number"},
    },
    "required": ["id", "customer"],
}


def test_json_schema_serializer_round_trips_and_evolves(registry):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

    client = SchemaRegistryClient({"url": registry.schema_registry_url})
    serializer = JSONSerializer(json.dumps(ORDER_JSON), client)
    deserializer = JSONDeserializer(json.dumps(ORDER_JSON))
    topic = "json-orders"
    sent = [{"id": i, "customer": {"name": f"c{i}", "tags": ["x"] * (i % 3)}, "lines": {"sku": i},
             "note": None if i % 2 else f"n{i}", "total": i * 0.25} for i in range(20)]
    producer = Producer({"bootstrap.servers": registry.bootstrap})
    for o in sent:
        producer.produce(topic, value=serializer(o, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "JSON"
    consumer = Consumer({"bootstrap.servers": registry.bootstrap, "group.id": "json", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = consumer.poll(1.0)
        if m is not None and not m.error():
            got.append(deserializer(m.value(), SerializationContext(topic, MessageField.VALUE)))
    consumer.close()
    assert got == sent

    # Closed content model: an optional new property is compatible; a type change is not.
    v2 = json.loads(json.dumps(ORDER_JSON))
    v2["properties"]["channel"] = {"type": "string"}
    assert client.register_schema(f"{topic}-value", Schema(json.dumps(v2), "JSON")) != latest.schema_id
    bad = json.loads(json.dumps(ORDER_JSON))
    bad["properties"]["id"] = {"type": "string"}
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(json.dumps(bad), "JSON"))
    assert refused.value.http_status_code == 409
    status, body = http(registry.schema_registry_url + "/subjects/j/versions", "POST",
                        {"schemaType": "JSON", "schema": json.dumps({"type": 5})})
    assert (status, body["error_code"]) == (422, 42201)


def test_basic_auth_acls_and_tls_follow_the_brokers_users_and_acls(floe_factory, tmp_path):
    """SASL_PLAINTEXT broker, PLAIN users, the authorizer on (admin a super user),
    the registry on https:// with the broker's certificate."""
    import base64
    import ssl

    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType

    from tls_certs import make_pki

    pki = make_pki(tmp_path / "pki")
    users = {"admin": "admin-pw", "alice": "alice-pw"}
    (tmp_path / "users").write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
    broker = floe_factory("floe-sr-secure", start=False)
    broker.schema_registry_port = free_port()
    listener = f"SASL_PLAINTEXT://127.0.0.1:{broker.port}"
    broker.overrides = {
        "listeners": listener, "advertised.listeners": listener,
        "floe.sasl.plain.users.file": str(tmp_path / "users"), "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false",
        "ssl.certificate.location": str(pki.server.cert), "ssl.key.location": str(pki.server.key),
    }
    broker.schema_registry_scheme = "https"
    broker.start()
    url = broker.schema_registry_url
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))

    def call(path, user=None, password=None, method="GET", body=None):
        headers = {"Content-Type": CONTENT_TYPE}
        if user:
            token = base64.b64encode(f"{user}:{password or users[user]}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        req = urllib.request.Request(url + path, method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=20) as resp:
                return resp.status, json.loads(resp.read()), resp.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    deadline = time.monotonic() + 20
    while True:
        try:
            call("/")
            break
        except OSError:
            assert time.monotonic() < deadline, "the registry did not answer over TLS"
            time.sleep(0.1)

    status, body, headers = call("/subjects")
    assert (status, body["error_code"]) == (401, 40101) and headers["WWW-Authenticate"].startswith("Basic")
    assert call("/subjects", "alice", "wrong")[0] == 401
    schema = {"schema": '"string"'}
    status, body, _ = call("/subjects/orders-value/versions", "admin", method="POST", body=schema)
    assert status == 200, body
    schema_id = body["id"]

    # alice, without ACLs: sees no subject, may not read or register it, may read schemas by id.
    assert call("/subjects", "alice")[:2] == (200, [])
    status, body, _ = call("/subjects/orders-value/versions", "alice")
    assert (status, body["error_code"]) == (403, 40301), body
    assert call("/subjects/orders-value/versions", "alice", method="POST", body=schema)[0] == 403
    assert call(f"/schemas/ids/{schema_id}", "alice")[:2] == (200, {"schema": '"string"'})
    assert call("/config", "alice", method="PUT", body={"compatibility": "NONE"})[0] == 403

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": users["admin"]})
    grant = lambda op: AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", op,  # noqa: E731
                                  AclPermissionType.ALLOW)
    for f in admin.create_acls([grant(AclOperation.READ)]).values():
        f.result(20)
    assert call("/subjects", "alice")[:2] == (200, ["orders-value"])
    assert call("/subjects/orders-value/versions", "alice")[:2] == (200, [1])
    assert call("/subjects/orders-value/versions", "alice", method="POST", body={"schema": '"bytes"'})[0] == 403
    for f in admin.create_acls([grant(AclOperation.WRITE)]).values():
        f.result(20)

    # confluent-kafka's client with basic auth over TLS, as alice.
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": f"alice:{users['alice']}",
                                   "ssl.ca.location": str(pki.ca.cert)})
    assert client.register_schema("orders-value", Schema('"bytes"', "AVRO")) > schema_id
    assert client.get_versions("orders-value") == [1, 2]
