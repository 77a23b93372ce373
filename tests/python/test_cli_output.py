"""What the CLI and the console show people (issue #33 item 5), on real
processes and real clients:

- Avro logical types written by confluent-kafka's AvroSerializer (decimal on
  bytes and fixed, timestamp-millis/micros, local-timestamp, date,
  time-millis/micros, uuid) print as values in `floe topic consume
  --schema-registry` and in the console's message browser API.
- A bad `-X` value or an unknown `-X` key is a usage error (exit 2) naming
  the key and value typed, the allowed values or the nearest known key.
- The console API's snapshot ids are strings equal to the catalog's ids
  (read with pyiceberg), never numbers rounded by a JavaScript client.
"""

from __future__ import annotations

import datetime
import decimal
import json
import time
import urllib.request
import uuid

import pyiceberg.catalog.sql as pyiceberg_sql
import requests

from cli import floe_cli, floe_ok
from clients import create_topic, produce_all, unique_topic
from floe_process import free_port

TIMEOUT_S = 30

PAYMENT = {"type": "record", "name": "Payment", "namespace": "floe.test", "fields": [
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "fee", "type": {"type": "fixed", "name": "Fee", "size": 6, "logicalType": "decimal", "precision": 12, "scale": 4}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "clock_us", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "refund", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}], "default": None},
    {"name": "count", "type": "long"},
]}

UTC = datetime.timezone.utc
PAYMENTS = [
    {"id": "550e8400-e29b-41d4-a716-446655440000", "amount": decimal.Decimal("12.34"), "fee": decimal.Decimal("-0.0500"),
     "at": datetime.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC),
     "at_us": datetime.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC),
     "local": datetime.datetime(2024, 5, 1, 8, 30, 0, 0),
     "day": datetime.date(2024, 5, 1), "clock": datetime.time(12, 34, 56, 789000), "clock_us": datetime.time(12, 34, 56, 789012),
     "refund": decimal.Decimal("-1.50"), "count": 2780273657115940031},
    {"id": str(uuid.UUID(int=1)), "amount": decimal.Decimal("0.05"), "fee": decimal.Decimal("123456.7890"),
     "at": datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
     "at_us": datetime.datetime(2000, 2, 29, 0, 0, 0, 1, tzinfo=UTC),
     "local": datetime.datetime(1970, 1, 1, 0, 0, 0, 0),
     "day": datetime.date(1969, 12, 31), "clock": datetime.time(0, 0, 0, 0), "clock_us": datetime.time(23, 59, 59, 999999),
     "refund": None, "count": -1},
]
SHOWN = [
    {"id": "550e8400-e29b-41d4-a716-446655440000", "amount": "12.34", "fee": "-0.0500", "at": "2024-05-01T12:00:00.123Z",
     "at_us": "2024-05-01T12:00:00.123456Z", "local": "2024-05-01T08:30:00.000", "day": "2024-05-01", "clock": "12:34:56.789",
     "clock_us": "12:34:56.789012", "refund": "-1.50", "count": 2780273657115940031},
    {"id": "00000000-0000-0000-0000-000000000001", "amount": "0.05", "fee": "123456.7890", "at": "1969-12-31T23:59:59.999Z",
     "at_us": "2000-02-29T00:00:00.000001Z", "local": "1970-01-01T00:00:00.000", "day": "1969-12-31", "clock": "00:00:00.000",
     "clock_us": "23:59:59.999999", "refund": None, "count": -1},
]


def wait_for_http(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer"
        time.sleep(0.1)


def test_avro_logical_types_print_as_values_in_the_cli_and_the_console(floe_factory):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker = floe_factory("floe", start=False)
    broker.schema_registry_port = free_port()
    broker.console_port = free_port()
    broker.start()
    url = broker.schema_registry_url
    wait_for_http(url + "/subjects")

    topic = create_topic(broker.bootstrap, unique_topic("avro-logical"), partitions=2)
    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(PAYMENT))
    values = [serializer(p, SerializationContext(topic, MessageField.VALUE)) for p in PAYMENTS]
    produce_all(broker.bootstrap, topic, [{"value": v} for v in values])

    # The CLI: one JSON document per record, each logical type as its value; the long exact.
    out = floe_ok(broker.bootstrap, "topic", "consume", topic, "-e", "--schema-registry", url, "--partition", "0")
    lines = out.splitlines()
    assert [json.loads(line) for line in lines] == SHOWN, out
    assert "2780273657115940031" in lines[0] and '"12.34"' in lines[0]
    as_json = floe_ok(broker.bootstrap, "topic", "consume", topic, "-e", "--schema-registry", url, "--format", "json")
    assert [json.loads(json.loads(line)["value"]) for line in as_json.splitlines()] == SHOWN

    # The console's message browser (every partition by default: no `partition=`).
    console = requests.Session()
    console.get(broker.console_url + "/api/session", timeout=TIMEOUT_S)
    page = console.get(f"{broker.console_url}/api/topics/{topic}/messages", params={"offset": "beginning"}, timeout=TIMEOUT_S).json()
    assert [json.loads(m["value"]) for m in page["messages"]] == SHOWN, page
    assert [m["partition"] for m in page["messages"]] == [0, 0]
    assert page["next_offsets"] == {"0": 2, "1": 0}
    # Paging on from next_offsets: nothing more.
    more = console.get(f"{broker.console_url}/api/topics/{topic}/messages", params={"offsets": "0:2,1:0"}, timeout=TIMEOUT_S).json()
    assert more["messages"] == [], more
    bad = console.get(f"{broker.console_url}/api/topics/{topic}/messages", params={"offsets": "zero"}, timeout=TIMEOUT_S)
    assert bad.status_code == 400 and "zero" in bad.json()["error"]


def test_x_properties_refuse_unknown_keys_and_bad_values_with_exit_2(floe_factory):
    floe = floe_factory("floe")
    bad_protocol = floe_cli(floe.bootstrap, "topic", "list", "-X", "security.protocol=FOO")
    assert bad_protocol.returncode == 2, bad_protocol
    assert "security.protocol=FOO" in bad_protocol.stderr and "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL" in bad_protocol.stderr

    bad_mechanism = floe_cli(floe.bootstrap, "cluster", "info", "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=bogus")
    assert bad_mechanism.returncode == 2, bad_mechanism
    assert "sasl.mechanism=bogus" in bad_mechanism.stderr and "SCRAM-SHA-256" in bad_mechanism.stderr

    typo = floe_cli(floe.bootstrap, "topic", "list", "-X", "security.protocl=SSL")
    assert typo.returncode == 2, typo
    assert "security.protocl" in typo.stderr and "did you mean security.protocol?" in typo.stderr

    unknown = floe_cli(floe.bootstrap, "topic", "list", "-X", "frobnicate.level=9")
    assert unknown.returncode == 2 and "unknown property `frobnicate.level`" in unknown.stderr, unknown

    # librdkafka's harmless tuning keys pass (a kcat profile works unchanged), and case does not matter in choices.
    ok = floe_cli(floe.bootstrap, "topic", "list", "-X", "client.id=ops", "-X", "security.protocol=plaintext", "-X", "socket.timeout.ms=5000")
    assert ok.returncode == 0, ok


def test_x_in_a_profile_is_checked_too(floe_factory, tmp_path):
    floe = floe_factory("floe")
    profile = tmp_path / "bad.properties"
    profile.write_text(f"bootstrap.servers={floe.bootstrap}\nsasl.mechanisms=PLAIN\nssl.endpoint.identification.algorithm=maybe\n")
    bad = floe_cli(None, "topic", "list", "--profile", str(profile))
    assert bad.returncode == 2, bad
    assert f"{profile}:3" in bad.stderr and "ssl.endpoint.identification.algorithm=maybe" in bad.stderr and "https, none" in bad.stderr


def test_console_snapshot_ids_are_the_catalogs_exact_ids_as_strings(floe_factory):
    floe = floe_factory("floe", start=False, overrides={"floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "500"})
    floe.console_port = free_port()
    floe.start()
    topic = create_topic(floe.bootstrap, unique_topic("console-ids"), partitions=1,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "4000"})
    http = requests.Session()
    http.get(floe.console_url + "/api/session", timeout=TIMEOUT_S)
    deadline = time.monotonic() + 90
    snaps = []
    while len(snaps) < 2:
        produce_all(floe.bootstrap, topic, [{"key": b"k%d" % i, "value": b"v" * 60} for i in range(40)])
        time.sleep(0.5)
        r = http.get(f"{floe.console_url}/api/iceberg/{topic}/snapshots", timeout=TIMEOUT_S)
        snaps = r.json().get("snapshots", []) if r.status_code == 200 else []
        assert time.monotonic() < deadline, f"fewer than 2 snapshots in time: {r.text}"

    ice = floe.data_dir / "iceberg"
    catalog = pyiceberg_sql.SqlCatalog("floe", uri=f"sqlite:///{ice / 'catalog.db'}", warehouse=f"file://{ice / 'warehouse'}")
    table = catalog.load_table(("kafka", topic))
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    for s in snaps:
        assert isinstance(s["snapshot_id"], str), s
        assert int(s["snapshot_id"]) in by_id, (s, list(by_id))
        parent = by_id[int(s["snapshot_id"])].parent_snapshot_id
        assert s["parent_snapshot_id"] == (None if parent is None else str(parent)), s
    assert any(s["parent_snapshot_id"] is not None for s in snaps)

    tables = http.get(f"{floe.console_url}/api/iceberg", timeout=TIMEOUT_S).json()["tables"]
    [row] = [t for t in tables if t["table"] == topic]
    # The catalog moves on as tiering goes: the id the console named is one the catalog has.
    table = catalog.load_table(("kafka", topic))
    assert isinstance(row["current_snapshot_id"], str)
    assert int(row["current_snapshot_id"]) in {s.snapshot_id for s in table.metadata.snapshots}
    # The raw answer carries the digits as text: a JSON number would lose them in a browser.
    raw = http.get(f"{floe.console_url}/api/iceberg/{topic}/snapshots", timeout=TIMEOUT_S).text
    assert f'"snapshot_id":"{snaps[0]["snapshot_id"]}"' in raw

    # The CLI's JSON keeps exact integers (serde_json; Python reads them exactly).
    cli = json.loads(floe_ok(None, "iceberg", "snapshots", topic, "--data-dir", str(floe.data_dir), "--format", "json"))
    assert {s["snapshot_id"] for s in cli} <= set(by_id) | {s.snapshot_id for s in table.metadata.snapshots}
    assert all(isinstance(s["snapshot_id"], int) for s in cli)
