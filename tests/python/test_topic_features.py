"""Topic-level features through confluent-kafka: partitions, records deletion, retention and
rolling, LogAppendTime, size limits, topic ids, delete + re-create, acks=0."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import NewPartitions, OffsetSpec

import kwire
from clients import (CLIENT_TIMEOUT_S, admin, assert_contiguous, consume_range, create_topic, produce_all,
                     producer, unique_topic, watermarks)
from floe_process import wait_until


def test_create_partitions_adds_partitions(floe):
    topic = create_topic(floe.bootstrap, unique_topic("cp"), partitions=1)
    a = admin(floe.bootstrap)
    a.create_partitions([NewPartitions(topic, 3)], request_timeout=CLIENT_TIMEOUT_S)[topic].result(CLIENT_TIMEOUT_S)
    md = a.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    assert produce_all(floe.bootstrap, topic, [{"value": b"p2"}], partition=2) == [0]
    assert consume_range(floe.bootstrap, topic, 0, 1, partition=2)[0].value() == b"p2"
    # Shrinking is refused (INVALID_PARTITIONS).
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 2)], request_timeout=CLIENT_TIMEOUT_S)[topic].result(CLIENT_TIMEOUT_S)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS, ei.value
    floe.restart()
    md = admin(floe.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2], "added partitions lost on restart"


def test_delete_records_moves_log_start_offset(floe):
    topic = create_topic(floe.bootstrap, unique_topic("dr"))
    produce_all(floe.bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(100)],
                **{"batch.num.messages": 10})
    a = admin(floe.bootstrap)
    res = a.delete_records([TopicPartition(topic, 0, 42)], request_timeout=CLIENT_TIMEOUT_S)
    deleted = list(res.values())[0].result(CLIENT_TIMEOUT_S)
    assert deleted.low_watermark == 42, deleted
    assert watermarks(floe.bootstrap, topic) == (42, 100)
    got = consume_range(floe.bootstrap, topic, 42, 58)
    assert_contiguous(got, 42)
    assert got[0].value() == b"v42"
    # Fetching below the log start offset is OFFSET_OUT_OF_RANGE.
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 5, 1 << 20)])))
        assert p.error_code == 1, f"fetch below log start: error {p.error_code}, want 1"
    floe.restart()
    assert watermarks(floe.bootstrap, topic) == (42, 100), "log start offset not persisted across restart"


def test_segments_roll_and_retention_deletes_old_ones(floe_factory):
    floe = floe_factory(overrides={"log.retention.check.interval.ms": "200"})
    topic = create_topic(floe.bootstrap, unique_topic("ret"),
                         config={"segment.bytes": "20000", "retention.ms": "1500"})
    produce_all(floe.bootstrap, topic, [{"value": bytes([i % 256]) * 500} for i in range(400)],
                **{"batch.num.messages": 10})
    segs = floe.segment_files(topic)
    assert len(segs) >= 5, f"segment.bytes=20000 with ~200 KB written left {len(segs)} segments"
    first_bases = [int(s.stem) for s in segs]
    assert first_bases[0] == 0 and first_bases == sorted(first_bases)
    # Before retention runs out everything is readable across segment boundaries.
    got = consume_range(floe.bootstrap, topic, 0, 400)
    assert_contiguous(got)

    wait_until(lambda: watermarks(floe.bootstrap, topic)[0] > 0, timeout=20,
               what="retention to advance the log start offset")

    # The log start offset moves first; the files below it are deleted just after (as
    # Kafka's `.deleted` files), and a later pass may move it again: wait until the
    # files and the offset agree.
    def settled():
        start = watermarks(floe.bootstrap, topic)[0]
        files = [int(s.stem) for s in floe.segment_files(topic)]
        return (start, files) if files and files[0] == start else None

    lo, remaining = wait_until(settled, timeout=20, what="the files below the log start offset to go")
    _, hi = watermarks(floe.bootstrap, topic)
    assert hi == 400
    assert lo in first_bases, f"log start {lo} is not a segment base offset {first_bases}"
    assert remaining[-1] == first_bases[-1], remaining
    got = consume_range(floe.bootstrap, topic, lo, hi - lo)
    assert_contiguous(got, lo)
    # The active segment survives retention, and new writes continue the offsets.
    assert produce_all(floe.bootstrap, topic, [{"value": b"later"}]) == [400]


def test_log_append_time_topic(floe):
    topic = create_topic(floe.bootstrap, unique_topic("lat"), config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce_all(floe.bootstrap, topic, [{"value": f"v{i}".encode(), "timestamp": 1_000_000_000_000 + i}
                                        for i in range(20)], **{"batch.num.messages": 5})
    after = int(time.time() * 1000)
    got = consume_range(floe.bootstrap, topic, 0, 20)
    for m in got:
        ts_type, ts = m.timestamp()
        assert ts_type == 2, f"timestamp type {ts_type}, want 2 (LogAppendTime)"
        assert before - 1000 <= ts <= after + 1000, f"log append time {ts} not in [{before}, {after}]"
    # The rewritten batches carry a valid CRC (the broker recomputed it).
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
    batches = kwire.decode_batches(p.records)
    assert batches and all(b.crc_ok for b in batches), "LogAppendTime batch with a stale CRC"
    assert all(b.attributes & 0x08 for b in batches), "timestamp-type bit not set"
    assert all(before - 1000 <= b.max_timestamp <= after + 1000 for b in batches)


def test_message_too_large_is_rejected(floe):
    topic = create_topic(floe.bootstrap, unique_topic("big"), config={"max.message.bytes": "100000"})
    # Just under the limit: accepted, and fetchable with a smaller fetch size (KIP-74).
    assert produce_all(floe.bootstrap, topic, [{"value": b"a" * 90_000}]) == [0]
    got = consume_range(floe.bootstrap, topic, 0, 1, **{"fetch.max.bytes": 10_000, "message.max.bytes": 10_000,
                                                         "max.partition.fetch.bytes": 10_000})
    assert got[0].value() == b"a" * 90_000
    # Over it: MESSAGE_TOO_LARGE (10), nothing appended.
    p = producer(floe.bootstrap, **{"message.max.bytes": 10_000_000})
    errors = []
    p.produce(topic, value=b"b" * 200_000, partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(CLIENT_TIMEOUT_S)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors
    assert watermarks(floe.bootstrap, topic) == (0, 1)


def test_topic_ids_stable_and_recreated_topic_is_empty(floe):
    topic = create_topic(floe.bootstrap, unique_topic("ids"), partitions=2)
    a = admin(floe.bootstrap)

    def topic_id():
        d = a.describe_topics(TopicCollection([topic]), request_timeout=CLIENT_TIMEOUT_S)[topic].result(CLIENT_TIMEOUT_S)
        assert len(d.partitions) == 2
        return str(d.topic_id)

    tid = topic_id()
    assert tid and tid != "AAAAAAAAAAAAAAAAAAAAAA", f"zero topic id: {tid}"
    produce_all(floe.bootstrap, topic, [{"value": f"old{i}".encode()} for i in range(10)])
    floe.restart()
    a = admin(floe.bootstrap)
    assert topic_id() == tid, "topic id changed across a restart"

    a.delete_topics([topic], request_timeout=CLIENT_TIMEOUT_S)[topic].result(CLIENT_TIMEOUT_S)
    create_topic(floe.bootstrap, topic, partitions=2)
    assert topic_id() != tid, "re-created topic reuses the deleted topic's id"
    assert watermarks(floe.bootstrap, topic) == (0, 0), "re-created topic still holds the old data"
    assert produce_all(floe.bootstrap, topic, [{"value": b"new"}]) == [0]
    assert consume_range(floe.bootstrap, topic, 0, 1)[0].value() == b"new"
    floe.restart()
    assert watermarks(floe.bootstrap, topic) == (0, 1)


def test_list_offsets_specs_and_describe_cluster(floe):
    topic = create_topic(floe.bootstrap, unique_topic("lo"))
    base = 1_730_000_000_000
    # Timestamps out of order: the max is in the middle.
    ts = [base + 5, base + 1, base + 900, base + 7, base + 3]
    produce_all(floe.bootstrap, topic, [{"value": b"x", "timestamp": t} for t in ts], **{"linger.ms": 0,
                                                                                       "batch.num.messages": 1})
    a = admin(floe.bootstrap)
    tp = TopicPartition(topic, 0)
    for spec, want in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 5), (OffsetSpec.max_timestamp(), 2),
                       (OffsetSpec.for_timestamp(base + 6), 2)):
        res = a.list_offsets({tp: spec}, request_timeout=CLIENT_TIMEOUT_S)[tp].result(CLIENT_TIMEOUT_S)
        assert res.offset == want, f"{type(spec).__name__}: offset {res.offset}, want {want}"
    cluster = a.describe_cluster(request_timeout=CLIENT_TIMEOUT_S).result(CLIENT_TIMEOUT_S)
    assert [n.port for n in cluster.nodes] == [floe.port]
    assert cluster.controller is not None and cluster.controller.id == cluster.nodes[0].id
    assert cluster.cluster_id, "empty cluster id"
    # The cluster id survives a restart (meta.properties).
    floe.restart()
    a = admin(floe.bootstrap)
    again = a.describe_cluster(request_timeout=CLIENT_TIMEOUT_S).result(CLIENT_TIMEOUT_S)
    assert again.cluster_id == cluster.cluster_id


def test_acks_zero_produce(floe):
    topic = create_topic(floe.bootstrap, unique_topic("acks0"))
    # Raw: a Produce with acks=0 gets no response; the next request's answer must be its own.
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        batch = kwire.record_batch([kwire.Record(None, b"fire-and-forget")])
        conn.send_raw(conn.request_frame(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch, acks=0)))
        err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))  # checks correlation id
        assert err == 0 and apis
    wait_until(lambda: watermarks(floe.bootstrap, topic)[1] == 1, timeout=10, what="the acks=0 record")
    # And librdkafka with acks=0.
    p = producer(floe.bootstrap, acks="0")
    for i in range(500):
        p.produce(topic, value=f"a0-{i}".encode(), partition=0)
    assert p.flush(CLIENT_TIMEOUT_S) == 0
    wait_until(lambda: watermarks(floe.bootstrap, topic)[1] == 501, timeout=10, what="500 acks=0 records")
    got = consume_range(floe.bootstrap, topic, 0, 501)
    assert [m.value() for m in got] == [b"fire-and-forget"] + [f"a0-{i}".encode() for i in range(500)]
