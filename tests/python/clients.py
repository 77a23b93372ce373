"""Shared helpers over confluent-kafka (librdkafka), the reference client."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CLIENT_TIMEOUT_S = 30


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None):
    a = admin(bootstrap)  # keep the client alive until the future resolves
    fs = a.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        request_timeout=CLIENT_TIMEOUT_S)
    fs[topic].result(timeout=CLIENT_TIMEOUT_S)
    return topic


def producer(bootstrap: str, **conf) -> Producer:
    base = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 20000,
    }
    base.update(conf)
    return Producer(base)


def consumer(bootstrap: str, **conf) -> Consumer:
    # group.id is set (librdkafka wants one) but only assign() is used: no group protocol.
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": "floe-e2e-assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 100,
    }
    base.update(conf)
    return Consumer(base)


def produce_all(bootstrap: str, topic: str, messages: list[dict], partition: int = 0, **conf) -> list[int]:
    """Produce messages (dicts of key/value/headers/timestamp) in order, acks=all; return
    the offsets the broker acknowledged, in produce order. Raises on any delivery error."""
    p = producer(bootstrap, **conf)
    results: list = [None] * len(messages)

    def cb_for(i):
        def cb(err, msg):
            results[i] = err if err is not None else msg.offset()
        return cb

    for i, m in enumerate(messages):
        kwargs = {k: m[k] for k in ("key", "value", "headers", "timestamp") if k in m}
        while True:
            try:
                p.produce(topic, partition=partition, on_delivery=cb_for(i), **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(CLIENT_TIMEOUT_S)
    assert remaining == 0, f"{remaining} messages still undelivered after {CLIENT_TIMEOUT_S}s"
    errors = [(i, r) for i, r in enumerate(results) if not isinstance(r, int)]
    assert not errors, f"delivery failed for {len(errors)} messages, first: {errors[:3]}"
    return results


def consume_range(bootstrap: str, topic: str, start: int, count: int, partition: int = 0,
                  timeout: float = CLIENT_TIMEOUT_S, **conf) -> list:
    """assign() at `start` and return exactly `count` messages (fails on timeout or error)."""
    c = consumer(bootstrap, **conf)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed {len(out)}/{count} messages from {topic}[{partition}] "
                                     f"starting at {start} within {timeout}s; last offsets "
                                     f"{[m.offset() for m in out[-5:]]}")
            for m in c.consume(num_messages=min(1000, count - len(out)), timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m)
        return out
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S)
    finally:
        c.close()


def _end_offset_seen_at(bootstrap: str, topic: str, partition: int, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": isolation, "isolation.level": isolation})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S, cached=False)[1]
    finally:
        c.close()


def committed_watermark(bootstrap: str, topic: str, partition: int) -> int:
    """The high watermark a read_committed consumer is told: the last stable offset."""
    return _end_offset_seen_at(bootstrap, topic, partition, "read_committed")


def uncommitted_watermark(bootstrap: str, topic: str, partition: int) -> int:
    """The high watermark a read_uncommitted consumer is told."""
    return _end_offset_seen_at(bootstrap, topic, partition, "read_uncommitted")


def consume_all(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Everything from the low to the high watermark."""
    lo, hi = watermarks(bootstrap, topic, partition)
    if hi - lo == 0:
        return []
    return consume_range(bootstrap, topic, lo, hi - lo, partition)


def assert_contiguous(msgs, start: int = 0):
    offsets = [m.offset() for m in msgs]
    expected = list(range(start, start + len(msgs)))
    if offsets != expected:
        bad = next(i for i, (a, b) in enumerate(zip(offsets, expected)) if a != b)
        raise AssertionError(f"offsets not contiguous from {start}: at index {bad} got {offsets[bad]}, "
                             f"expected {expected[bad]} (around: {offsets[max(0, bad - 3):bad + 4]})")
