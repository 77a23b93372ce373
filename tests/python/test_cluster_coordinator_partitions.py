"""Coordinators spread over the partitions of the internal topics, in a cluster.

Three brokers with `offsets.topic.num.partitions=3` and
`transaction.state.log.num.partitions=3` (replication factor 3): each group's
coordinator is the leader of its own `__consumer_offsets` partition, so groups are
coordinated by different brokers (FindCoordinator answers differ). kill -9 of one
group's coordinator:
- moves only that partition: a group coordinated elsewhere keeps its coordinator and
  keeps committing meanwhile;
- the killed group's consumer recovers on the new coordinator with its committed offsets,
  and without a rebalance: the new coordinator loads the group's members and generation;
- a transactional consume-transform-produce of that group, whose transactional id is
  coordinated by the same broker, keeps exactly-once across the kill: read_committed sees
  every input exactly once, and the group's offsets are at the end of the input.
"""

from __future__ import annotations

import time

import kwire
from clients import unique_topic
from cluster_rig import agreed_view, etcd, start_cluster  # noqa: F401 (fixture)
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from test_cluster_coordinators import _committed, _coordinator, _find_coordinator
from test_cluster_replication import _bootstrap, _by_id, _create
from test_coordinator_partitions import kafka_partition

PARTITIONS = 3
OVERRIDES = {"offsets.topic.num.partitions": str(PARTITIONS), "transaction.state.log.num.partitions": str(PARTITIONS),
             "group.initial.rebalance.delay.ms": "0", "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}
PER_PARTITION = 40
CLIENT_TIMEOUT_S = 30


def _coordinators(brokers, prefix: str, key_type: int, count: int) -> dict[int, str]:
    """A key per coordinating broker: `prefix-N` keys until their partitions' leaders cover the brokers."""
    by_broker: dict[int, str] = {}
    n = 0
    while len(by_broker) < len(brokers) and n < 60:
        key = f"{prefix}-{n}"
        n += 1
        if any(kafka_partition(k, count) == kafka_partition(key, count) for k in by_broker.values()):
            continue
        by_broker.setdefault(_coordinator(brokers, key, key_type), key)
    return by_broker


def _commit(bootstrap: str, group: str, offsets: dict[int, int], topic: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            return
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise
            print(f"commit {group}: {e}; retrying")
            time.sleep(0.5)
        finally:
            c.close()


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "acks": "all",
                  "transaction.timeout.ms": 20000})
    p.init_transactions(60)
    return p


def _rewind(c: Consumer, topic: str):
    """Back to the group's committed positions (the start where none)."""
    assignment = c.assignment()
    if not assignment:
        return
    committed = c.committed(assignment, timeout=CLIENT_TIMEOUT_S)
    for tp in committed:
        c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def test_groups_move_with_their_own_partition(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=OVERRIDES)
    agreed_view(brokers, live=3)
    bootstrap = _bootstrap(brokers)
    source = _create(bootstrap, unique_topic("src"), partitions=PARTITIONS)
    sink = _create(bootstrap, unique_topic("out"), partitions=PARTITIONS)
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            plain.produce(source, value=f"{part}:{i}".encode(), partition=part)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0

    # Groups on different coordinators: one per broker (the partitions' leaders differ).
    groups = _coordinators(brokers, unique_topic("g"), 0, PARTITIONS)
    assignment = etcd.get_json(f"/{prefix}/topics/__consumer_offsets")
    assert sorted(assignment["partitions"]) == [str(p) for p in range(PARTITIONS)], assignment
    assert len(groups) >= 2, f"the groups' coordinators: {groups}"
    # The transactional id of the group's application is coordinated by the same broker.
    txns = _coordinators(brokers, unique_topic("tx"), 1, PARTITIONS)
    victim_id = next((b for b in groups if b in txns), None)
    assert victim_id is not None, f"the groups' coordinators {groups}, the transactional ids' {txns}"
    group_a, txn_id = groups[victim_id], txns[victim_id]
    other_id, group_b = next((b, g) for b, g in groups.items() if b != victim_id)
    # A batched lookup (v4) answers each key with its own partition's leader, on every broker.
    for b in brokers:
        with kwire.KafkaConn(b.host, b.port, timeout=30) as conn:
            body = conn.call_flexible(kwire.API_FIND_COORDINATOR, 4, kwire.find_coordinator_v4(list(groups.values()), 0))
        assert kwire.parse_find_coordinator_v4(body) == {g: (0, nid) for nid, g in groups.items()}, f"broker {b.name}"

    _commit(bootstrap, group_b, {p: 5 for p in range(PARTITIONS)}, source)
    assert _committed(bootstrap, group_b) == {(source, p): 5 for p in range(PARTITIONS)}

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group_a, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    assigned: list[list[int]] = []
    c.subscribe([source], on_assign=lambda _c, ps: assigned.append([tp.partition for tp in ps]))
    p = _txn_producer(bootstrap, txn_id)
    total = PARTITIONS * PER_PARTITION
    done = 0
    killed = False
    deadline = time.monotonic() + 180
    victim = _by_id(brokers, victim_id)
    while done < total:
        assert time.monotonic() < deadline, f"{done} of {total} inputs processed"
        if not killed and done >= total // 3:
            # Between two transactions: kill -9 the coordinator of the group and of the
            # transactional id.
            victim.kill9()
            killed = True
            # librdkafka keeps a dead group coordinator cached for send_offsets_to_transaction
            # and, once the broker leaves the metadata, can wait for it past the call's timeout
            # (confluentinc/librdkafka#5511, #5456): the application restarts its producer, whose
            # init_transactions fences the old instance.
            p = _txn_producer(_bootstrap([b for b in brokers if b is not victim]), txn_id)
        msgs = [m for m in c.consume(num_messages=10, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(sink, value=m.value(), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), CLIENT_TIMEOUT_S)
            p.commit_transaction(CLIENT_TIMEOUT_S)
            done += len(msgs)
        except KafkaException as e:
            err = e.args[0]
            print(f"transaction failed: {err}")
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(CLIENT_TIMEOUT_S)
                except KafkaException as abort_error:
                    print(f"abort failed: {abort_error}; a new producer instance")
                    p = _txn_producer(bootstrap, txn_id)
            else:
                # Fatal or unknown outcome: a new instance fences the old one and aborts what it left open.
                p = _txn_producer(bootstrap, txn_id)
            _rewind(c, source)
            # What committed meanwhile is in the group's offsets: count from them.
            done = sum(max(o, 0) for o in _committed(bootstrap, group_a).values())
    c.close()
    assert killed
    # The new coordinator loaded the group with its member and generation from the
    # replicated log: the member's heartbeats and TxnOffsetCommits went on, no rebalance.
    assert assigned == [list(range(PARTITIONS))], f"assignments: {assigned}"

    survivors = [b for b in brokers if b is not victim]
    # The killed group moved; the other one did not, and commits on.
    assert _coordinator(survivors, group_a, 0) != victim_id
    assert _find_coordinator(_by_id(brokers, other_id), group_b, 0) == (0, other_id)
    assert _committed(_bootstrap(survivors), group_b) == {(source, p): 5 for p in range(PARTITIONS)}
    _commit(_bootstrap(survivors), group_b, {p: 7 for p in range(PARTITIONS)}, source)
    assert _committed(_bootstrap(survivors), group_b) == {(source, p): 7 for p in range(PARTITIONS)}

    # Exactly once: every input once in the committed output, the offsets at the end.
    assert _committed(_bootstrap(survivors), group_a) == {(source, p): PER_PARTITION for p in range(PARTITIONS)}
    out = Consumer({"bootstrap.servers": _bootstrap(survivors), "group.id": unique_topic("check"), "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        out.assign([TopicPartition(sink, part, 0) for part in range(PARTITIONS)])
        values: list[str] = []
        end = time.monotonic() + 60
        while len(values) < total and time.monotonic() < end:
            values += [m.value().decode() for m in out.consume(num_messages=100, timeout=0.5) if m.error() is None]
        time.sleep(1)
        values += [m.value().decode() for m in out.consume(num_messages=100, timeout=0.5) if m.error() is None]
    finally:
        out.close()
    assert sorted(values) == sorted(f"{part}:{i}" for part in range(PARTITIONS) for i in range(PER_PARTITION)), \
        "every input exactly once"

    # A new consumer of the killed group resumes at its committed offsets (the end).
    resumed = Consumer({"bootstrap.servers": _bootstrap(survivors), "group.id": group_a, "enable.auto.commit": False,
                        "auto.offset.reset": "earliest"})
    try:
        resumed.subscribe([source])
        end = time.monotonic() + 30
        while not resumed.assignment() and time.monotonic() < end:
            resumed.poll(0.5)
        extra = [m for m in resumed.consume(num_messages=10, timeout=2) if m.error() is None]
        assert extra == [], "nothing past the committed offsets"
    finally:
        resumed.close()
