"""Shared mode's read path (issue #16): once a shared topic's segments have left
local disk, a consumer reading from offset 0 is served batches rebuilt from the
Iceberg table, then the local log, and cannot tell: the same workload on a copy
topic and a shared topic drains identically (offset, timestamp, key, value,
headers with a repeated key, null vs empty) with confluent-kafka, kcat,
kafka-python and kafkajs, and read_committed hides the same aborted records.

The workload covers the five codecs, an idempotent producer, a committed and an
aborted transaction. The table is the only copy of what is compared: the test
waits for the shared topic's local log start offset (ListOffsets -4) to pass the
transactions, and checks the fetch bytes counted on the table-rebuild path."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

import kwire
from clients import CLIENT_TIMEOUT_S, admin, create_topic, produce_all, unique_topic

BROKER = {
    "floe.iceberg.tick-ms": "200",
    "floe.iceberg.target-lag-ms": "1000",
    "log.retention.check.interval.ms": "500",
}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_780_000_000_000
JS_DIR = Path(__file__).resolve().parent.parent / "js"


def messages(c: int, n: int) -> list[dict]:
    out = []
    for i in range(n):
        m = {"timestamp": BASE_TS + c * 10_000 + i,
             "value": None if i % 13 == 5 else (b"" if i % 17 == 3 else f"c{c}-v{i}-".encode() * (1 + i % 5))}
        if i % 4:
            m["key"] = f"k{i}".encode()
        if i % 3 == 0:
            m["headers"] = [("h", f"{i}".encode()), ("x", b""), ("h", b"again")]
        out.append(m)
    return out


def workload(bootstrap: str, topic: str, txn_id: str) -> None:
    """The same records, in the same order, so both topics get the same offsets."""
    for c, codec in enumerate(CODECS):
        produce_all(bootstrap, topic, messages(c, 120), **{"compression.type": codec, "enable.idempotence": True, "linger.ms": 5})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "compression.type": "lz4", "linger.ms": 0})
    p.init_transactions(30)
    for commit in (True, False):
        p.begin_transaction()
        for i in range(4):
            p.produce(topic, key=b"t", value=f"{'commit' if commit else 'abort'}-{i}".encode(), partition=0,
                      timestamp=BASE_TS + 900_000 + i, headers=[("txn", b"1")])
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    # An uncompressed tail, last: it keeps the transactions' segment sealed (and readable by anyone).
    tail = [{"key": f"tail{i}".encode(), "value": f"t{i}".encode() * 30, "timestamp": BASE_TS + 950_000 + i} for i in range(150)]
    produce_all(bootstrap, topic, tail, **{"compression.type": "none", "batch.size": 4096})


def list_offset(floe, topic: str, timestamp: int) -> int:
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        r = kwire.parse_list_offsets_v8(conn.call_flexible(kwire.API_LIST_OFFSETS, 8, kwire.list_offsets_v8(topic, 0, timestamp)))
    err, _ts, off = r[(topic, 0)]
    assert err == 0, r
    return off


def confluent_drain(bootstrap: str, topic: str, isolation: str, count: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple] = []
        deadline = time.monotonic() + 90
        while len(out) < count:
            assert time.monotonic() < deadline, f"drained {len(out)}/{count} of {topic} ({isolation}); last {out[-1:]}"
            for m in c.consume(num_messages=500, timeout=0.5):
                assert not m.error(), m.error()
                out.append((m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers() or []))
        return out
    finally:
        c.close()


def set_topic_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    a = admin(bootstrap)
    fs = a.incremental_alter_configs(
        [ConfigResource("topic", topic, incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])],
        request_timeout=CLIENT_TIMEOUT_S)
    for f in fs.values():
        f.result(timeout=CLIENT_TIMEOUT_S)


@pytest.fixture
def topics(floe_factory):
    floe = floe_factory("floe", overrides=BROKER)
    # retention.ms -1: the records carry fixed timestamps months old, which time retention would expire.
    common = {"floe.iceberg.enabled": "true", "segment.bytes": "16384", "retention.ms": "-1"}
    copy = create_topic(floe.bootstrap, unique_topic("copy"), config=common)
    shared = create_topic(floe.bootstrap, unique_topic("shared"), config={
        **common, "floe.iceberg.storage": "shared", "local.retention.ms": "0"})
    workload(floe.bootstrap, copy, unique_topic("txn-copy"))
    workload(floe.bootstrap, shared, unique_topic("txn-shared"))
    end = list_offset(floe, shared, -1)
    assert end == list_offset(floe, copy, -1), "both topics got the same offsets"
    # The transactions end 150 records before the log end: wait until they are table-only.
    deadline = time.monotonic() + 90
    while list_offset(floe, shared, -4) < end - 150:
        assert time.monotonic() < deadline, f"local log start {list_offset(floe, shared, -4)}, want >= {end - 150}"
        time.sleep(0.5)
    assert list_offset(floe, shared, -2) == 0
    return floe, copy, shared, end


def test_every_client_reads_the_same_records_from_the_table_as_from_the_log(topics):
    floe, copy, shared, end = topics
    markers, aborted = 2, 4
    for isolation, count in (("read_uncommitted", end - markers), ("read_committed", end - markers - aborted)):
        want = confluent_drain(floe.bootstrap, copy, isolation, count)
        got = confluent_drain(floe.bootstrap, shared, isolation, count)
        assert got == want, isolation
    committed_values = {r[3] for r in want}
    assert b"abort-0" not in committed_values and b"commit-0" in committed_values
    assert floe.metric("floe_fetch_bytes_total", path="table-rebuild") > 0, "nothing was served from the table"
    local_start = list_offset(floe, shared, -4)

    # ListOffsets by time and MAX_TIMESTAMP answer across the boundary as over a whole log.
    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": unique_topic("times")})
    try:
        for ts in (BASE_TS - 1, BASE_TS + 2 * 10_000 + 7, BASE_TS + 900_002, BASE_TS + 950_010, BASE_TS + 10**9):
            got_t = c.offsets_for_times([TopicPartition(shared, 0, ts)], timeout=30)[0].offset
            want_t = c.offsets_for_times([TopicPartition(copy, 0, ts)], timeout=30)[0].offset
            assert got_t == want_t, (ts, got_t, want_t)
            assert ts > BASE_TS + 10**8 or got_t >= 0, ts
    finally:
        c.close()
    assert list_offset(floe, shared, -3) == list_offset(floe, copy, -3)

    # kcat (librdkafka 2.0): text fields, so compare what it prints.
    if shutil.which("kcat"):
        def kcat_rows(topic: str) -> list[tuple]:
            out = subprocess.run(["kcat", "-b", floe.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J",
                                  "-X", "isolation.level=read_committed"], capture_output=True, timeout=120)
            assert out.returncode == 0, out.stderr.decode()
            rows = [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip()]
            return [(r["offset"], r["ts"], r["key"], r["payload"], r.get("headers")) for r in rows]
        assert kcat_rows(shared) == kcat_rows(copy)

    # kafka-python and kafkajs decode gzip alone without extra packages: the table serves them uncompressed.
    set_topic_config(floe.bootstrap, shared, "floe.iceberg.shared.fetch-compression", "none")
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTp
    kc = KafkaConsumer(bootstrap_servers=floe.bootstrap, enable_auto_commit=False, isolation_level="read_uncommitted",
                       consumer_timeout_ms=20_000)
    try:
        kc.assign([KTp(shared, 0)])
        kc.seek(KTp(shared, 0), 0)
        got_kp = []
        for m in kc:
            got_kp.append((m.offset, m.timestamp, m.key, m.value, [(k, v) for k, v in m.headers]))
            if len(got_kp) >= local_start - markers:
                break
    finally:
        kc.close()
    want_uncommitted = confluent_drain(floe.bootstrap, copy, "read_uncommitted", end - markers)
    below = [r for r in want_uncommitted if r[0] < got_kp[-1][0] + 1]
    assert got_kp == [(o, t, k, v, list(h)) for o, t, k, v, h in below]

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (tests/run-all.sh installs it)")
    out = subprocess.run([node, str(JS_DIR / "drain.mjs"), floe.bootstrap, shared, str(end - markers), "read_uncommitted"],
                         capture_output=True, timeout=150)
    assert out.returncode == 0, out.stderr.decode()
    js = [json.loads(line) for line in out.stdout.decode().splitlines() if line.strip()]
    dec = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731

    def grouped(headers) -> list:
        by_key: dict[str, list] = {}
        for k, v in headers:
            by_key.setdefault(k, []).append(v)
        return sorted(by_key.items())
    assert [(r["offset"], r["timestamp"], dec(r["key"]), dec(r["value"]), sorted((k, [dec(v) for v in vs]) for k, vs in r["headers"]))
            for r in js] == [(o, t, k, v, grouped(h)) for o, t, k, v, h in want_uncommitted]
