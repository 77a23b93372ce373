"""Durability: clean restart, kill -9 under an acks=all stream, a torn/garbage segment tail."""

from __future__ import annotations

import os
import struct

import pytest

from clients import (assert_contiguous, consume_all, consume_range, create_topic, produce_all, producer,
                     unique_topic, watermarks)


def test_sigterm_restart_keeps_everything(floe):
    topic = create_topic(floe.bootstrap, unique_topic("restart"), partitions=2)
    msgs0 = [{"key": f"a{i}".encode(), "value": os.urandom(100 + i % 50)} for i in range(2000)]
    msgs1 = [{"key": None, "value": f"b{i}".encode(), "headers": [("n", str(i).encode())]} for i in range(700)]
    produce_all(floe.bootstrap, topic, msgs0, partition=0, **{"compression.type": "lz4"})
    produce_all(floe.bootstrap, topic, msgs1, partition=1)

    rc = floe.restart()
    assert rc == 0, f"floe exited with {rc} on SIGTERM (expected a clean 0)"

    assert watermarks(floe.bootstrap, topic, 0) == (0, 2000)
    assert watermarks(floe.bootstrap, topic, 1) == (0, 700)
    got0 = consume_range(floe.bootstrap, topic, 0, 2000, partition=0)
    assert_contiguous(got0)
    assert [(m.key(), m.value()) for m in got0] == [(m["key"], m["value"]) for m in msgs0]
    got1 = consume_range(floe.bootstrap, topic, 0, 700, partition=1)
    assert_contiguous(got1)
    assert [(m.value(), m.headers()) for m in got1] == [(m["value"], m["headers"]) for m in msgs1]

    # Appends continue at the right offsets after the restart.
    assert produce_all(floe.bootstrap, topic, [{"value": b"after"}], partition=0) == [2000]
    # And a second restart (now recovering a log that was itself recovered) still has it all.
    assert floe.restart() == 0
    assert watermarks(floe.bootstrap, topic, 0) == (0, 2001)
    assert consume_range(floe.bootstrap, topic, 2000, 1)[0].value() == b"after"


def test_kill9_during_acks_all_stream(floe):
    topic = create_topic(floe.bootstrap, unique_topic("kill9"))
    p = producer(floe.bootstrap, **{"linger.ms": 2, "batch.num.messages": 50, "message.timeout.ms": 4000,
                                    "retries": 0, "reconnect.backoff.max.ms": 200})
    acked: dict[int, bytes] = {}     # offset -> value
    failed = 0

    def on_delivery(err, msg):
        nonlocal failed
        if err is None:
            assert msg.offset() not in acked, f"offset {msg.offset()} acknowledged twice"
            acked[msg.offset()] = msg.value()
        else:
            failed += 1

    KILL_AFTER_ACKS = 3000
    sent = 0
    killed_at = None
    # Keep producing across the kill so records are in flight when it lands.
    while killed_at is None or sent < killed_at + 2000:
        value = f"seq-{sent:07d}-".encode() + b"x" * 80
        try:
            p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.05)
        p.poll(0)
        if killed_at is None and len(acked) >= KILL_AFTER_ACKS:
            floe.kill9()
            killed_at = sent
        assert sent < 1_000_000, "the broker never acknowledged enough records"
    p.flush(15)
    assert len(p) == 0, "producer still has undelivered messages after flush"
    assert len(acked) >= KILL_AFTER_ACKS
    assert failed > 0, "no delivery failed: the kill did not happen during the stream"

    floe.start()
    lo, hi = watermarks(floe.bootstrap, topic)
    assert lo == 0
    assert hi >= max(acked) + 1, f"high watermark {hi} lost acknowledged offset {max(acked)}"
    msgs = consume_range(floe.bootstrap, topic, 0, hi)
    assert_contiguous(msgs)
    values = [m.value() for m in msgs]
    assert len(set(values)) == len(values), "a record is present more than once after recovery"
    for off, v in acked.items():
        assert values[off] == v, f"acknowledged offset {off} holds {values[off][:20]!r}, want {v[:20]!r}"
    # Records were written in produce order (single producer, single partition, no retries).
    seqs = [int(v.split(b"-")[1]) for v in values]
    assert seqs == sorted(seqs), "records out of produce order after recovery"

    # And the partition accepts new writes at the next offset.
    assert produce_all(floe.bootstrap, topic, [{"value": b"after-crash"}]) == [hi]


def _garbage_random(last_batch: bytes) -> bytes:
    return os.urandom(3000)


def _garbage_torn_batch(last_batch: bytes) -> bytes:
    # A batch header claiming the next offset, cut mid-way (a torn write).
    base_offset = struct.unpack_from(">q", last_batch, 0)[0] + 1000
    return struct.pack(">q", base_offset) + last_batch[8:len(last_batch) // 2]


def _garbage_bad_crc(last_batch: bytes) -> bytes:
    # A complete batch whose CRC does not match (a bit flip in the payload).
    b = bytearray(last_batch)
    b[-1] ^= 0x01
    return bytes(b)


def _garbage_zeros(last_batch: bytes) -> bytes:
    return b"\x00" * 4096  # preallocated / zero-filled tail


@pytest.mark.parametrize("garbage", [_garbage_random, _garbage_torn_batch, _garbage_bad_crc, _garbage_zeros],
                         ids=["random", "torn-batch", "bad-crc", "zeros"])
def test_garbage_tail_is_truncated_on_recovery(floe, garbage):
    topic = create_topic(floe.bootstrap, unique_topic("garbage"))
    msgs = [{"key": f"k{i}".encode(), "value": f"v{i}".encode() * 10} for i in range(500)]
    produce_all(floe.bootstrap, topic, msgs, **{"batch.num.messages": 25})
    assert floe.stop() == 0

    segs = floe.segment_files(topic)
    assert segs, f"no .log segments in {floe.partition_dir(topic)}: {list(floe.partition_dir(topic).iterdir())}"
    active = segs[-1]
    data = active.read_bytes()
    # Find the last complete batch in the active segment (walk the length fields).
    pos, last = 0, None
    while pos + 12 <= len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0]
        last = data[pos:pos + 12 + length]
        pos += 12 + length
    assert pos == len(data) and last, f"active segment {active} does not end on a batch boundary"
    with open(active, "ab") as f:
        f.write(garbage(last))

    floe.start()
    assert watermarks(floe.bootstrap, topic) == (0, 500), "recovery did not truncate the garbage tail"
    got = consume_range(floe.bootstrap, topic, 0, 500)
    assert_contiguous(got)
    assert [m.value() for m in got] == [m["value"] for m in msgs]

    more = [{"key": b"new", "value": f"new{i}".encode()} for i in range(50)]
    assert produce_all(floe.bootstrap, topic, more) == list(range(500, 550))
    got = consume_all(floe.bootstrap, topic)
    assert_contiguous(got)
    assert [m.value() for m in got] == [m["value"] for m in msgs + more]

    # The recovered log is clean: a restart now serves the same thing.
    assert floe.restart() == 0
    assert watermarks(floe.bootstrap, topic) == (0, 550)


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
def test_lost_or_damaged_indexes_are_rebuilt(floe_factory, damage):
    floe = floe_factory()
    # The timestamps are from 2025: without retention.ms=-1 a retention pass would delete
    # the oldest segments (past the 7-day default) if the test is slow enough to meet one.
    topic = create_topic(floe.bootstrap, unique_topic("idx"), config={"segment.bytes": "30000", "retention.ms": "-1",
                                                                        "index.interval.bytes": "1000"})
    base_ts = 1_740_000_000_000
    msgs = [{"value": f"v{i}".encode() * 20, "timestamp": base_ts + i * 10} for i in range(1000)]
    produce_all(floe.bootstrap, topic, msgs, **{"batch.num.messages": 10})
    assert floe.stop() == 0
    pdir = floe.partition_dir(topic)
    indexes = sorted(pdir.glob("*.index")) + sorted(pdir.glob("*.timeindex"))
    assert len(floe.segment_files(topic)) >= 3, "expected several segments"
    assert indexes, f"no index files in {pdir}: {sorted(p.name for p in pdir.iterdir())}"
    for f in indexes:
        if damage == "delete":
            f.unlink()
        elif damage == "truncate":
            with open(f, "r+b") as fh:
                fh.truncate(f.stat().st_size // 2 - 3)
        else:
            f.write_bytes(os.urandom(f.stat().st_size or 64))

    floe.start()
    assert watermarks(floe.bootstrap, topic) == (0, 1000)
    # Offset lookups (offset index) and time lookups (time index) are right again.
    for start in (0, 1, 333, 500, 999):
        got = consume_range(floe.bootstrap, topic, start, 1)
        assert got[0].offset() == start and got[0].value() == msgs[start]["value"]
    from confluent_kafka import TopicPartition
    from clients import consumer
    c = consumer(floe.bootstrap)
    try:
        for i in (0, 250, 777, 999):
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, base_ts + i * 10 - 5)], timeout=30)
            assert r.offset == i, f"offsets_for_times for record {i}: got {r.offset}"
    finally:
        c.close()
    got = consume_range(floe.bootstrap, topic, 0, 1000)
    assert_contiguous(got)


def test_sigterm_under_load_exits_cleanly_and_keeps_acked_records(floe):
    """SIGTERM while a producer streams and a consumer long-polls: exit 0 promptly, and
    every acknowledged record is there after the restart."""
    import threading
    import time

    from confluent_kafka import TopicPartition

    from clients import consumer

    topic = create_topic(floe.bootstrap, unique_topic("term"))
    c = consumer(floe.bootstrap, **{"fetch.wait.max.ms": 5000})
    c.assign([TopicPartition(topic, 0, 0)])
    stop_polling = threading.Event()

    def poll():
        while not stop_polling.is_set():
            c.poll(0.2)

    poller = threading.Thread(target=poll)
    poller.start()
    p = producer(floe.bootstrap, **{"linger.ms": 2, "message.timeout.ms": 3000, "retries": 0})
    acked: dict[int, bytes] = {}

    def on_delivery(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()

    try:
        sent = 0
        while len(acked) < 2000:
            p.produce(topic, value=f"t{sent}".encode(), partition=0, on_delivery=on_delivery)
            sent += 1
            p.poll(0)
        t0 = time.monotonic()
        rc = floe.stop(timeout=20)
        took = time.monotonic() - t0
        for i in range(200):  # keep the producer busy while the broker goes away
            p.produce(topic, value=f"late{i}".encode(), partition=0, on_delivery=on_delivery)
        p.flush(10)
    finally:
        stop_polling.set()
        poller.join()
        c.close()
    assert rc == 0, f"SIGTERM under load: exit code {rc}"
    print(f"shutdown under load took {took:.2f}s")
    assert took < 15, f"shutdown under load took {took:.1f}s"

    floe.start()
    lo, hi = watermarks(floe.bootstrap, topic)
    assert hi >= max(acked) + 1
    got = consume_range(floe.bootstrap, topic, 0, hi)
    assert_contiguous(got)
    for off, v in acked.items():
        assert got[off].value() == v, f"acknowledged offset {off} lost or changed"
