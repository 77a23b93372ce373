"""More than one partition of `__consumer_offsets` and `__transaction_state`, on one broker.

With `offsets.topic.num.partitions=4` and `transaction.state.log.num.partitions=3`:
- the topics are created with those counts;
- each group's records land in partition `abs(javaHash(group)) % 4`, as Kafka puts them
  (read back raw from `__consumer_offsets`);
- committed offsets, plain and transactional, survive a restart, and the restarted broker
  keeps the topics' counts;
- transactions whose ids map to different `__transaction_state` partitions commit and
  abort with send_offsets_to_transaction: read_committed sees the committed output only
  and the groups' offsets are the committed transactions'.
"""

from __future__ import annotations

import struct
import time

from clients import admin, create_topic, produce_all, unique_topic
from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

OFFSETS_PARTITIONS = 4
TXN_PARTITIONS = 3
OVERRIDES = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
             "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
             "group.initial.rebalance.delay.ms": "0"}
TIMEOUT_S = 30


def java_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_partition(key: str, count: int) -> int:
    h = java_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % count


def test_java_hash_matches_known_values():
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("hello") == 99162322
    assert java_hash("polygenelubricants") == -(1 << 31)
    assert kafka_partition("polygenelubricants", 50) == 0


def _keys_spread(prefix: str, count: int, want: int) -> list[str]:
    """Keys `prefix-N` covering every one of `count` partitions, `want` of them at least."""
    keys, covered, n = [], set(), 0
    while len(covered) < count or len(keys) < want:
        k = f"{prefix}-{n}"
        n += 1
        if kafka_partition(k, count) not in covered or len(keys) < want:
            keys.append(k)
            covered.add(kafka_partition(k, count))
    return keys


def _committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    a = admin(bootstrap)
    res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}


def _partition_count(bootstrap: str, topic: str) -> int:
    md = admin(bootstrap).list_topics(topic=topic, timeout=TIMEOUT_S)
    return len(md.topics[topic].partitions)


def _groups_by_offsets_partition(bootstrap: str) -> dict[str, set[int]]:
    """Every group whose key is in `__consumer_offsets`, and the partitions holding its records."""
    found: dict[str, set[int]] = {}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("raw"), "enable.auto.commit": False,
                  "isolation.level": "read_uncommitted"})
    try:
        tps = [TopicPartition("__consumer_offsets", p, OFFSET_BEGINNING) for p in range(OFFSETS_PARTITIONS)]
        ends = {p: c.get_watermark_offsets(TopicPartition("__consumer_offsets", p), timeout=TIMEOUT_S)[1] for p in range(OFFSETS_PARTITIONS)}
        c.assign(tps)
        deadline = time.monotonic() + 60

        def at_end() -> bool:
            # Positions, not the last record: transaction markers end some partitions.
            positions = c.position([TopicPartition("__consumer_offsets", p) for p in range(OFFSETS_PARTITIONS)])
            return all(tp.offset >= ends[tp.partition] for tp in positions)
        while not at_end():
            assert time.monotonic() < deadline, f"reading __consumer_offsets to {ends}"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            key = msg.key()
            # Offset keys (v0/v1) and group metadata keys (v2) both start with the group id.
            (_version, length) = struct.unpack(">hh", key[:4])
            found.setdefault(key[4:4 + length].decode(), set()).add(msg.partition())
    finally:
        c.close()
    return found


def test_groups_and_transactions_over_several_internal_partitions(floe_factory):
    floe = floe_factory("coordparts", overrides=OVERRIDES)
    bootstrap = floe.bootstrap
    source, sink = unique_topic("src"), unique_topic("out")
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=1)
    for p in range(2):
        produce_all(bootstrap, source, [{"value": f"{p}-{i}".encode()} for i in range(50)], partition=p)

    # Groups spread over every __consumer_offsets partition commit offsets.
    groups = _keys_spread(unique_topic("grp"), OFFSETS_PARTITIONS, 6)
    expected: dict[str, dict[tuple[str, int], int]] = {}
    for i, g in enumerate(groups):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        try:
            offsets = [TopicPartition(source, p, i + 1 + p) for p in range(2)]
            c.commit(offsets=offsets, asynchronous=False)
        finally:
            c.close()
        expected[g] = {(source, p): i + 1 + p for p in range(2)}
    assert _partition_count(bootstrap, "__consumer_offsets") == OFFSETS_PARTITIONS

    # Transactions over every __transaction_state partition, each with the offsets of its
    # own group (over __consumer_offsets partitions of their own): one commits, one aborts.
    txn_ids = _keys_spread(unique_topic("tx"), TXN_PARTITIONS, 3)
    txn_groups = _keys_spread(unique_topic("txg"), OFFSETS_PARTITIONS, len(txn_ids))[:len(txn_ids)]
    committed_values = []
    for i, (tid, g) in enumerate(zip(txn_ids, txn_groups)):
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        p.init_transactions(TIMEOUT_S)
        meta_consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        try:
            meta = meta_consumer.consumer_group_metadata()
            p.begin_transaction()
            values = [f"{tid}-commit-{j}" for j in range(5)]
            for v in values:
                p.produce(sink, value=v.encode(), partition=0)
            p.send_offsets_to_transaction([TopicPartition(source, 0, 10 + i)], meta, TIMEOUT_S)
            p.commit_transaction(TIMEOUT_S)
            committed_values += values
            p.begin_transaction()
            for j in range(5):
                p.produce(sink, value=f"{tid}-abort-{j}".encode(), partition=0)
            p.send_offsets_to_transaction([TopicPartition(source, 0, 40)], meta, TIMEOUT_S)
            assert p.flush(TIMEOUT_S) == 0
            p.abort_transaction(TIMEOUT_S)
        finally:
            meta_consumer.close()
        expected[g] = {(source, 0): 10 + i}
    assert _partition_count(bootstrap, "__transaction_state") == TXN_PARTITIONS

    def check_state(where: str):
        for g, offsets in expected.items():
            assert _committed(bootstrap, g) == offsets, f"{where}: {g}"
        placed = _groups_by_offsets_partition(bootstrap)
        for g in expected:
            assert placed.get(g) == {kafka_partition(g, OFFSETS_PARTITIONS)}, f"{where}: {g} in {placed.get(g)}"
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("rc"), "isolation.level": "read_committed",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(sink, 0, OFFSET_BEGINNING)])
            seen = []
            for _ in range(60):
                msgs = [m for m in c.consume(num_messages=100, timeout=0.5) if m.error() is None]
                seen += [m.value().decode() for m in msgs]
                if len(seen) >= len(committed_values) and not msgs:
                    break
        finally:
            c.close()
        assert sorted(seen) == sorted(committed_values), f"{where}: read_committed sees the committed transactions only"

    check_state("before the restart")
    floe.restart()
    assert _partition_count(bootstrap, "__consumer_offsets") == OFFSETS_PARTITIONS
    assert _partition_count(bootstrap, "__transaction_state") == TXN_PARTITIONS
    check_state("after the restart")

    # The listed groups are every partition's.
    a = admin(bootstrap)  # alive until the future resolves
    listed = {g.group_id for g in a.list_consumer_groups().result(timeout=TIMEOUT_S).valid}
    assert set(expected) <= listed

    # The restarted coordinators take the ids' next transactions (each on its partition).
    for tid in txn_ids:
        p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        p.produce(sink, value=f"{tid}-after".encode(), partition=0)
        p.commit_transaction(TIMEOUT_S)
        committed_values.append(f"{tid}-after")
    check_state("after transactions on the restarted broker")


def test_an_existing_topic_keeps_its_partition_count(floe_factory):
    """A data dir whose internal topics have one partition keeps them so under a larger setting."""
    floe = floe_factory("coordkeep")
    bootstrap = floe.bootstrap
    topic = unique_topic("k")
    create_topic(bootstrap, topic, partitions=1)
    groups = _keys_spread(unique_topic("keep"), 4, 4)
    for i, g in enumerate(groups):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        finally:
            c.close()
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "keep-tx"})
    p.init_transactions(TIMEOUT_S)
    assert _partition_count(bootstrap, "__consumer_offsets") == 1
    floe.restart(overrides=OVERRIDES)
    assert _partition_count(bootstrap, "__consumer_offsets") == 1
    assert _partition_count(bootstrap, "__transaction_state") == 1
    for i, g in enumerate(groups):
        assert _committed(bootstrap, g) == {(topic, 0): i + 1}
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "keep-tx"})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, value=b"x", partition=0)
    p.commit_transaction(TIMEOUT_S)
