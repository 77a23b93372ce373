"""Transactions across brokers: three brokers, one etcd, a topic whose three partitions
are led by three different brokers, and a transaction coordinator on one of them.

The coordinator writes each marker to the partition's leader: its own partitions in
process, the others' with WriteTxnMarkers. What is checked, with real clients:

- committed and aborted transactions over every partition: read_committed consumers
  see exactly the committed records, read_uncommitted all of them, and every
  partition's last stable offset reaches its high watermark (no transaction is left
  open anywhere); the other leaders did receive WriteTxnMarkers;
- consume-transform-produce with send_offsets_to_transaction over partitions led by
  every broker: each input appears once in the output, and the group's committed
  offsets, read by an independent consumer, are the inputs' ends;
- WriteTxnMarkers sent raw: NONE from the leader, NOT_LEADER_OR_FOLLOWER from a
  follower, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist.
"""

from __future__ import annotations

import struct
import time

import kwire
from clients import CLIENT_TIMEOUT_S, admin, committed_watermark, uncommitted_watermark, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from floe_process import wait_until

PARTITIONS = 3
# A marker that fails (a leader still taking over) is retried on the coordinator's tick.
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}
WRITE_TXN_MARKERS = 27
NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_TOPIC_OR_PARTITION = 3


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _create_spread(etcd, prefix: str, brokers, topic: str) -> dict[int, int]:
    """Creates `topic` (3 partitions, RF 3) and returns {partition: leader} once every
    partition has a leader, each on a different broker (the placement spreads them)."""
    a = admin(brokers[0].bootstrap)  # alive until the future resolves
    fs = a.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})], request_timeout=15)
    fs[topic].result(timeout=20)

    def leaders():
        states = [etcd.get_json(f"/{prefix}/partitions/{topic}/{p}") for p in range(PARTITIONS)]
        if any(s is None or s["leader"] < 0 or sorted(s["isr"]) != [1, 2, 3] for s in states):
            return None
        return {p: s["leader"] for p, s in enumerate(states)}

    placed = wait_until(leaders, timeout=30, interval=0.2, what=f"leaders and full ISRs of {topic}")
    assert len(set(placed.values())) == PARTITIONS, f"leaders not spread: {placed}"
    # Every broker serves them before the clients start (a new topic's metadata settles).
    for b in brokers:
        wait_until(lambda b=b: _metadata_leaders(b, topic) == placed, timeout=30, interval=0.2,
                   what=f"broker {node_id(b)} to report the leaders of {topic}")
    return placed


def _metadata_leaders(b, topic: str) -> dict[int, int] | None:
    a = admin(b.bootstrap)
    md = a.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or len(t.partitions) != PARTITIONS:
        return None
    return {p: pm.leader for p, pm in t.partitions.items()}


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, "message.timeout.ms": 20000})
    p.init_transactions(CLIENT_TIMEOUT_S)
    return p


def _read(bootstrap: str, topic: str, isolation: str, expect: int) -> list:
    """Every record of `topic` visible at `isolation`, from offset 0 of each partition;
    reads until `expect` arrived, then a little longer to catch any extra."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        settle_until = None
        while time.monotonic() < deadline:
            if len(out) >= expect:
                settle_until = settle_until or time.monotonic() + 1.0
                if time.monotonic() > settle_until:
                    break
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m)
        return out
    finally:
        c.close()


def _cluster(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=OVERRIDES)
    controller = agreed_view(brokers, live=3)
    return brokers, prefix, controller


def test_transactions_span_partitions_led_by_every_broker(floe_factory, etcd):
    brokers, prefix, controller = _cluster(floe_factory, etcd)
    topic = unique_topic("txn-spread")
    leaders = _create_spread(etcd, prefix, brokers, topic)
    bootstrap = _bootstrap(brokers)
    p = _txn_producer(bootstrap, "spread-1")
    committed, everything = [], []
    for i in range(6):
        p.begin_transaction()
        for part in range(PARTITIONS):
            for j in range(10):
                v = f"{i}-{part}-{j}"
                p.produce(topic, value=v.encode(), partition=part)
                everything.append(v)
                if i % 2 == 0:
                    committed.append(v)
        # Written before the end either way: abort_transaction would purge what is unsent.
        assert p.flush(CLIENT_TIMEOUT_S) == 0
        if i % 2 == 0:
            p.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            p.abort_transaction(CLIENT_TIMEOUT_S)

    seen = _read(bootstrap, topic, "read_committed", expect=len(committed))
    assert sorted(m.value().decode() for m in seen) == sorted(committed), "read_committed: exactly the committed records"
    for part in range(PARTITIONS):
        in_part = [m.value().decode() for m in seen if m.partition() == part]
        assert in_part == [v for v in committed if v.split("-")[1] == str(part)], f"partition {part}: in order"
    raw = _read(bootstrap, topic, "read_uncommitted", expect=len(everything))
    assert sorted(m.value().decode() for m in raw) == sorted(everything), "read_uncommitted: every record"
    # Every transaction ended in every partition: the LSO is the high watermark.
    for part in range(PARTITIONS):
        wait_until(lambda part=part: committed_watermark(bootstrap, topic, part) == uncommitted_watermark(bootstrap, topic, part),
                   timeout=15, interval=0.2, what=f"{topic}-{part}: last stable offset at the high watermark")
    # The markers of the partitions led elsewhere went there as WriteTxnMarkers: the
    # coordinator is the leader of __transaction_state.
    coordinator = etcd.get_json(f"/{prefix}/partitions/__transaction_state/0")["leader"]
    others = {leader for leader in leaders.values() if leader != coordinator}
    assert others, leaders
    for nid in others:
        served = _by_id(brokers, nid).metric("floe_requests_total", api="WriteTxnMarkers")
        assert served >= 6, f"broker {nid} served {served} WriteTxnMarkers"


def test_consume_transform_produce_across_brokers(floe_factory, etcd):
    brokers, prefix, controller = _cluster(floe_factory, etcd)
    bootstrap = _bootstrap(brokers)
    source = unique_topic("ctp-in")
    sink = unique_topic("ctp-out")
    _create_spread(etcd, prefix, brokers, source)
    _create_spread(etcd, prefix, brokers, sink)
    per_partition = 30
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part in range(PARTITIONS):
        for i in range(per_partition):
            plain.produce(source, value=f"{part}:{i}".encode(), partition=part)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0

    group = "ctp-cluster"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    p = _txn_producer(bootstrap, "ctp-cluster-1")
    c.subscribe([source])
    total = PARTITIONS * per_partition
    seen = 0
    aborted_once = False
    deadline = time.monotonic() + 45
    while seen < total and time.monotonic() < deadline:
        msgs = [m for m in c.consume(num_messages=20, timeout=0.5) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            # Each output to the same partition number: the transaction spans every leader.
            p.produce(sink, value=b"x" + m.value(), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), CLIENT_TIMEOUT_S)
        if not aborted_once:
            assert p.flush(CLIENT_TIMEOUT_S) == 0, "the aborted output is written, then aborted"
            p.abort_transaction(CLIENT_TIMEOUT_S)
            aborted_once = True
            # Back to the last committed positions (none yet: the start) and do it again.
            for tp in c.assignment():
                c.seek(TopicPartition(tp.topic, tp.partition, 0))
            continue
        p.commit_transaction(CLIENT_TIMEOUT_S)
        seen += len(msgs)
    c.close()
    assert seen == total, f"{seen} of {total} inputs processed"
    out = _read(bootstrap, sink, "read_committed", expect=total)
    values = sorted(m.value().decode()[1:] for m in out)
    assert values == sorted(f"{part}:{i}" for part in range(PARTITIONS) for i in range(per_partition)), "every input exactly once"
    # The group's committed offsets, as an independent consumer sees them.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        got = check.committed([TopicPartition(source, part) for part in range(PARTITIONS)], timeout=CLIENT_TIMEOUT_S)
    finally:
        check.close()
    assert {tp.partition: tp.offset for tp in got} == {part: per_partition for part in range(PARTITIONS)}


def _write_txn_markers_v1(producer_id: int, producer_epoch: int, commit: bool, topics: dict[str, list[int]],
                          coordinator_epoch: int = 0) -> bytes:
    """WriteTxnMarkers v1 (flexible): markers [producer_id int64 | producer_epoch int16 |
    transaction_result bool | topics [name | partition_indexes [int32]] | coordinator_epoch int32]."""
    topic_items = [kwire.compact_string(t) + kwire.compact_array([struct.pack(">i", p) for p in ps]) + b"\x00"
                   for t, ps in topics.items()]
    marker = (struct.pack(">qhb", producer_id, producer_epoch, 1 if commit else 0) + kwire.compact_array(topic_items)
              + struct.pack(">i", coordinator_epoch) + b"\x00")
    return kwire.compact_array([marker]) + b"\x00"


def _parse_write_txn_markers_v1(body: bytes) -> dict[tuple[int, str, int], int]:
    """{(producer_id, topic, partition): error_code}."""
    r = kwire.FlexReader(body)

    def partition(r):
        p, err = r.i32(), r.i16()
        r.skip_tags()
        return p, err

    def topic(r):
        name = r.compact_string()
        parts = r.compact_array(partition)
        r.skip_tags()
        return name, parts

    def marker(r):
        pid = r.i64()
        topics = r.compact_array(topic)
        r.skip_tags()
        return pid, topics

    markers = r.compact_array(marker)
    r.skip_tags()
    assert r.done(), "trailing bytes in WriteTxnMarkers v1 response"
    return {(pid, t, p): err for pid, topics in markers for t, parts in topics for p, err in parts}


def test_write_txn_markers_go_to_the_leader_only(floe_factory, etcd):
    brokers, prefix, _controller = _cluster(floe_factory, etcd)
    topic = unique_topic("wtm")
    leaders = _create_spread(etcd, prefix, brokers, topic)
    leader = _by_id(brokers, leaders[0])
    follower = next(b for b in brokers if node_id(b) != leaders[0])
    pid = 987_654
    body = _write_txn_markers_v1(pid, 0, False, {topic: [0], "no-such-topic": [0]})
    with kwire.KafkaConn(follower.host, follower.port) as conn:
        codes = _parse_write_txn_markers_v1(conn.call_flexible(WRITE_TXN_MARKERS, 1, body))
    assert codes == {(pid, topic, 0): NOT_LEADER_OR_FOLLOWER, (pid, "no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}

    def from_leader():
        # NOT_LEADER_OR_FOLLOWER (retriable) while the leader is still taking the role.
        with kwire.KafkaConn(leader.host, leader.port) as conn:
            codes = _parse_write_txn_markers_v1(conn.call_flexible(WRITE_TXN_MARKERS, 1, body))
        return None if codes[(pid, topic, 0)] == NOT_LEADER_OR_FOLLOWER else codes

    codes = wait_until(from_leader, timeout=15, interval=0.2, what=f"broker {leaders[0]} to lead {topic}-0")
    assert codes == {(pid, topic, 0): 0, (pid, "no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    # The ABORT marker is in the leader's log and replicated: the high watermark passed it.
    wait_until(lambda: uncommitted_watermark(_bootstrap(brokers), topic, 0) == 1, timeout=15, what="the marker at offset 0")
