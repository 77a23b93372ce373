"""confluent-kafka (librdkafka 2.16) against floe: admin, produce, assign/seek/offsets_for_times."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic)
from confluent_kafka.error import KafkaError

from clients import (CLIENT_TIMEOUT_S, admin, assert_contiguous, consume_range, consumer, create_topic,
                     produce_all, unique_topic, watermarks)


def topic_config(a, topic: str) -> dict:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = a.describe_configs([res], request_timeout=CLIENT_TIMEOUT_S)[res].result(timeout=CLIENT_TIMEOUT_S)
    return {name: e.value for name, e in entries.items()}


def test_admin_create_describe_alter_delete(floe):
    a = admin(floe.bootstrap)
    topic = unique_topic("admin")
    fs = a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                   config={"retention.ms": "123456"})], request_timeout=CLIENT_TIMEOUT_S)
    fs[topic].result(timeout=CLIENT_TIMEOUT_S)

    md = a.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic in md.topics, f"created topic missing from metadata: {sorted(md.topics)}"
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    assert md.topics[topic].error is None
    for p in md.topics[topic].partitions.values():
        assert p.leader in md.brokers, f"partition {p.id} leader {p.leader} not a known broker"

    # Creating it again is TOPIC_ALREADY_EXISTS.
    again = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                            request_timeout=CLIENT_TIMEOUT_S)[topic]
    with pytest.raises(Exception) as ei:
        again.result(timeout=CLIENT_TIMEOUT_S)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, ei.value

    assert topic_config(a, topic).get("retention.ms") == "123456"

    # Legacy AlterConfigs (replaces the topic's set of overrides).
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "200000"})
    a.alter_configs([res], request_timeout=CLIENT_TIMEOUT_S)[res].result(timeout=CLIENT_TIMEOUT_S)
    assert topic_config(a, topic).get("retention.ms") == "200000"

    # IncrementalAlterConfigs.
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "300000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=CLIENT_TIMEOUT_S)[res].result(timeout=CLIENT_TIMEOUT_S)
    assert topic_config(a, topic).get("retention.ms") == "300000"

    # The change survives a restart.
    floe.restart()
    a = admin(floe.bootstrap)
    assert topic_config(a, topic).get("retention.ms") == "300000"

    a.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(timeout=CLIENT_TIMEOUT_S)
    md = a.list_topics(timeout=CLIENT_TIMEOUT_S)  # all topics: does not auto-create
    assert topic not in md.topics, "deleted topic still listed"


def make_messages(n: int, base_ts: int) -> list[dict]:
    msgs = []
    for i in range(n):
        m: dict = {"timestamp": base_ts + i * 1000}
        kind = i % 5
        if kind == 0:
            m.update(key=f"key-{i}".encode(), value=f"value-{i}-".encode() * (1 + i % 7))
        elif kind == 1:
            m.update(key=None, value=f"no-key-{i}".encode())
        elif kind == 2:
            m.update(key=f"tombstone-{i}".encode(), value=None)
        elif kind == 3:
            m.update(key=f"k{i}".encode(), value=bytes(range(256)) * 3,
                     headers=[("h1", f"v{i}".encode()), ("dup", b"a"), ("dup", b"b"), ("empty", b"")])
        else:
            m.update(key=b"", value=b"", headers=[("only-header", b"\x00\xff")])
        msgs.append(m)
    return msgs


def check_message(got, want: dict, i: int):
    assert got.key() == want.get("key"), f"message {i}: key {got.key()!r} != {want.get('key')!r}"
    assert got.value() == want.get("value"), f"message {i}: value mismatch"
    want_headers = want.get("headers") or None
    got_headers = got.headers() or None
    assert got_headers == want_headers, f"message {i}: headers {got_headers!r} != {want_headers!r}"
    ts_type, ts = got.timestamp()
    assert ts == want["timestamp"], f"message {i}: timestamp {ts} != {want['timestamp']}"


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_roundtrip(floe, compression):
    topic = create_topic(floe.bootstrap, unique_topic(f"rt-{compression}"))
    base_ts = 1_700_000_000_000
    msgs = make_messages(500, base_ts)
    offsets = produce_all(floe.bootstrap, topic, msgs, **{"compression.type": compression,
                                                         "batch.num.messages": 37})
    assert offsets == list(range(len(msgs))), f"acked offsets not 0..{len(msgs) - 1}: {offsets[:10]}…"
    assert watermarks(floe.bootstrap, topic) == (0, len(msgs))

    got = consume_range(floe.bootstrap, topic, 0, len(msgs))
    assert_contiguous(got)
    for i, (g, w) in enumerate(zip(got, msgs)):
        check_message(g, w, i)

    # A second produce appends after the first.
    more = produce_all(floe.bootstrap, topic, [{"key": b"x", "value": b"y", "timestamp": base_ts}],
                       **{"compression.type": compression})
    assert more == [len(msgs)]


def test_assign_seek_and_offsets_for_times(floe):
    topic = create_topic(floe.bootstrap, unique_topic("seek"))
    base_ts = 1_710_000_000_000
    msgs = [{"key": f"k{i}".encode(), "value": f"v{i}".encode(), "timestamp": base_ts + i * 1000}
            for i in range(50)]
    # Small batches so lookups land inside and across batches.
    produce_all(floe.bootstrap, topic, msgs, **{"batch.num.messages": 7, "linger.ms": 50})

    c = consumer(floe.bootstrap)
    try:
        found = c.offsets_for_times([TopicPartition(topic, 0, base_ts + 5500)], timeout=CLIENT_TIMEOUT_S)
        assert found[0].error is None
        assert found[0].offset == 6, f"offsets_for_times(ts of #5 + 0.5 s) = {found[0].offset}, want 6"
        found = c.offsets_for_times([TopicPartition(topic, 0, base_ts + 20_000)], timeout=CLIENT_TIMEOUT_S)
        assert found[0].offset == 20
        found = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=CLIENT_TIMEOUT_S)
        assert found[0].offset == 0
        found = c.offsets_for_times([TopicPartition(topic, 0, base_ts + 10_000_000)], timeout=CLIENT_TIMEOUT_S)
        assert found[0].offset == -1, f"timestamp after the last record: got {found[0].offset}, want -1"

        c.assign([TopicPartition(topic, 0, 30)])
        first = _next_message(c)
        assert first.offset() == 30 and first.value() == b"v30"
        c.seek(TopicPartition(topic, 0, 3))
        m = _next_message(c)
        assert m.offset() == 3 and m.value() == b"v3", (m.offset(), m.value())
        rest = [m] + [_next_message(c) for _ in range(46)]
        assert [x.offset() for x in rest] == list(range(3, 50))
        assert [x.value() for x in rest] == [f"v{i}".encode() for i in range(3, 50)]
    finally:
        c.close()

    # OFFSET_BEGINNING / OFFSET_END logical offsets via assign.
    got = consume_range(floe.bootstrap, topic, -2, 50)  # OFFSET_BEGINNING
    assert_contiguous(got)


def _next_message(c, timeout: float = CLIENT_TIMEOUT_S):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {m.error()}")
        return m
    raise AssertionError("no message within timeout")


def test_multi_partition_produce(floe):
    topic = create_topic(floe.bootstrap, unique_topic("mp"), partitions=4)
    for p in range(4):
        msgs = [{"key": f"p{p}-{i}".encode(), "value": f"{p}:{i}".encode()} for i in range(100 + p)]
        assert produce_all(floe.bootstrap, topic, msgs, partition=p) == list(range(100 + p))
    for p in range(4):
        got = consume_range(floe.bootstrap, topic, 0, 100 + p, partition=p)
        assert_contiguous(got)
        assert [m.value() for m in got] == [f"{p}:{i}".encode() for i in range(100 + p)]
