"""Coordinators in a cluster: the group coordinator is the leader of `__consumer_offsets`,
the transaction coordinator the leader of `__transaction_state`, and both move with
that leadership, loading their state from the replicated log.

What is checked, on three real brokers and one etcd:
- the first FindCoordinator creates the internal topic in the cluster with
  `offsets.topic.replication.factor` replicas; every broker names the same coordinator,
  the partition's leader, and the others answer NOT_COORDINATOR;
- committed offsets survive kill -9 of the group coordinator: the new leader serves
  them, and a consumer of the group resumes exactly where the group had committed;
- a transactional id survives kill -9 of the transaction coordinator: InitProducerId on
  the new coordinator bumps the same producer id's epoch (the state came from the
  replicated log), and the old epoch is fenced there;
- SyncGroup hands out an assignment only once the group record holding it is
  replicated: with the coordinator's followers paused the leader's SyncGroup gets
  COORDINATOR_NOT_AVAILABLE and the group rebalances; once they are back the
  member rejoins and gets its assignment.
"""

from __future__ import annotations

import signal
import struct
import time

import kwire
from clients import admin, consumer, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource
from floe_process import wait_until
from test_cluster_replication import _bootstrap, _by_id, _create, _state

UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90


def _find_coordinator(b, key: str, key_type: int) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v1 asked of broker `b`."""
    with kwire.KafkaConn(b.host, b.port, timeout=30) as conn:
        err, _msg, node, _host, _port = kwire.parse_find_coordinator_v1(
            conn.call(kwire.API_FIND_COORDINATOR, 1, kwire.find_coordinator_v1(key, key_type)))
    return err, node


def _coordinator(brokers, key: str, key_type: int, timeout: float = 60) -> int:
    """Waits until every live broker in `brokers` names the same coordinator; returns its id."""
    def agreed():
        answers = {_find_coordinator(b, key, key_type) for b in brokers}
        if len(answers) != 1:
            return None
        ((err, node),) = answers
        return node if err == 0 else None
    return wait_until(agreed, timeout=timeout, interval=0.3, what=f"one coordinator for {key!r}")


def _committed(bootstrap: str, group: str, timeout: float = 60) -> dict[tuple[str, int], int]:
    """The group's committed offsets, retried while the coordinator moves or loads."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            a = admin(bootstrap)  # alive until the future resolves
            res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
            return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions}
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise
            print(f"list_consumer_group_offsets: {e}; retrying")
            time.sleep(0.5)


def _new_leader(etcd, prefix: str, topic: str, old: int) -> int:
    return wait_until(lambda: (s := _state(etcd, prefix, topic, 0)) and s["leader"] not in (-1, old) and s["leader"],
                      timeout=30, what=f"a new leader of {topic}-0")


def test_group_offsets_move_with_the_leadership_of_consumer_offsets(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("coord"), partitions=3)
    for p in range(3):
        produce_all(brokers[0].bootstrap, topic, [{"value": f"{p}-{i}".encode()} for i in range(20)], partition=p)
    group = unique_topic("g")

    # The first lookup creates __consumer_offsets in the cluster, replicated three ways.
    coordinator = _coordinator(brokers, group, 0)
    assignment = etcd.get_json(f"/{prefix}/topics/__consumer_offsets")
    assert sorted(assignment["partitions"]["0"]) == [1, 2, 3], assignment
    assert _state(etcd, prefix, "__consumer_offsets", 0)["leader"] == coordinator

    # A member commits half of every partition.
    c = consumer(_bootstrap(brokers), **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 60
    while sum(seen.values()) < 30:
        assert time.monotonic() < deadline, f"consumed {seen}"
        msg = c.poll(0.2)
        if msg is None or msg.error() is not None or seen.get(msg.partition(), 0) >= 10:
            continue
        seen[msg.partition()] = seen.get(msg.partition(), 0) + 1
        if seen[msg.partition()] == 10:
            c.commit(offsets=[TopicPartition(topic, msg.partition(), msg.offset() + 1)], asynchronous=False)
    c.close()
    expected = {(topic, p): 10 for p in range(3)}
    assert _committed(_bootstrap(brokers), group) == expected

    # kill -9 the coordinator: the new leader of __consumer_offsets serves the same offsets.
    victim = _by_id(brokers, coordinator)
    victim.kill9()
    survivors = [b for b in brokers if b is not victim]
    new = _new_leader(etcd, prefix, "__consumer_offsets", coordinator)
    assert _coordinator(survivors, group, 0) == new
    assert _committed(_bootstrap(survivors), group) == expected

    # A new member resumes exactly at the committed offsets.
    c = consumer(_bootstrap(survivors), **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    rest: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in rest.values()) < 30:
        assert time.monotonic() < deadline, f"consumed {rest}"
        msg = c.poll(0.2)
        if msg is not None and msg.error() is None:
            rest.setdefault(msg.partition(), []).append(msg.offset())
    c.commit(offsets=[TopicPartition(topic, p, 20) for p in range(3)], asynchronous=False)
    c.close()
    assert rest == {p: list(range(10, 20)) for p in range(3)}, rest

    # The ex-coordinator returns as a follower; every broker agrees on where the group is.
    victim.start()
    agreed_view(brokers, live=3)
    wait_until(lambda: sorted(_state(etcd, prefix, "__consumer_offsets", 0)["isr"]) == [1, 2, 3],
               timeout=60, what="__consumer_offsets back in full ISR")
    assert _committed(victim.bootstrap, group) == {(topic, p): 20 for p in range(3)}


def _init_producer_id(b, txn_id: str, timeout: float = 60) -> tuple[int, int]:
    """InitProducerId v1 on `b`, retried while it loads; (producer id, epoch)."""
    deadline = time.monotonic() + timeout
    while True:
        with kwire.KafkaConn(b.host, b.port, timeout=30) as conn:
            err, pid, epoch = kwire.parse_init_producer_id_v1(conn.call(kwire.API_INIT_PRODUCER_ID, 1, kwire.init_producer_id_v1(txn_id)))
        if err == 0:
            return pid, epoch
        assert err in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), err
        assert time.monotonic() < deadline, f"InitProducerId kept failing with {err}"
        time.sleep(0.3)


def _describe_transaction(b, txn_id: str) -> tuple[int, int]:
    """DescribeTransactions v0 (flexible) for one id on `b`: (error code, producer id)."""
    body = kwire.uvarint(2) + kwire.compact_string(txn_id) + b"\x00"
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.FlexReader(conn.call_flexible(65, 0, body))
    r.i32()  # throttle_time_ms
    assert r.uvarint() == 2, "one transaction state"
    err = r.i16()
    r.compact_string()  # transactional_id
    r.compact_string()  # transaction_state
    r.i32()
    r.i64()
    return err, r.i64()


def test_a_transactional_id_survives_the_loss_of_its_coordinator(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    txn_id = unique_topic("txn")
    coordinator = _coordinator(brokers, txn_id, 1)
    assignment = etcd.get_json(f"/{prefix}/topics/__transaction_state")
    assert sorted(assignment["partitions"]["0"]) == [1, 2, 3], assignment
    assert assignment["configs"]["min.insync.replicas"] == "2", assignment
    here = _by_id(brokers, coordinator)
    pid, epoch = _init_producer_id(here, txn_id)
    # Only the coordinator answers for the id.
    for b in brokers:
        if b is not here:
            with kwire.KafkaConn(b.host, b.port) as conn:
                err, *_ = kwire.parse_init_producer_id_v1(conn.call(kwire.API_INIT_PRODUCER_ID, 1, kwire.init_producer_id_v1(txn_id)))
            assert err == NOT_COORDINATOR, err
    pid2, epoch2 = _init_producer_id(here, txn_id)
    assert (pid2, epoch2) == (pid, epoch + 1)

    here.kill9()
    survivors = [b for b in brokers if b is not here]
    new = _new_leader(etcd, prefix, "__transaction_state", coordinator)
    assert _coordinator(survivors, txn_id, 1) == new
    pid3, epoch3 = _init_producer_id(_by_id(brokers, new), txn_id)
    # The same producer id, its epoch bumped once more: the state was replicated.
    assert (pid3, epoch3) == (pid, epoch + 2)
    # Only the coordinator describes the id.
    for b in survivors:
        assert _describe_transaction(b, txn_id) == ((0, pid) if node_id(b) == new else (NOT_COORDINATOR, -1))
    with kwire.KafkaConn(_by_id(brokers, new).host, _by_id(brokers, new).port) as conn:
        answer = conn.call(kwire.API_END_TXN, 1, kwire.end_txn_v1(txn_id, pid, epoch2, True))
    err = kwire.Reader(answer)
    err.i32()
    assert err.i16() in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED)


def _join_group_v0(conn, group: str, member_id: str) -> tuple[int, int, str, str]:
    """JoinGroup v0 of a `consumer` member with one protocol: (error, generation, leader, member id)."""
    body = (kwire.string(group) + struct.pack(">i", 10_000) + kwire.string(member_id) + kwire.string("consumer")
            + kwire.array([kwire.string("range") + kwire.nbytes(b"subscription")]))
    r = kwire.Reader(conn.call(11, 0, body))
    err, generation = r.i16(), r.i32()
    r.string()  # protocol name
    leader, member = r.string(), r.string()
    r.array(lambda r: (r.string(), r.bytes_()))
    return err, generation, leader, member


def _sync_group_v0(conn, group: str, generation: int, member_id: str, assignment: bytes) -> tuple[int, bytes]:
    """SyncGroup v0 of the leader assigning `assignment` to itself: (error, its assignment)."""
    body = (kwire.string(group) + struct.pack(">i", generation) + kwire.string(member_id)
            + kwire.array([kwire.string(member_id) + kwire.nbytes(assignment)]))
    r = kwire.Reader(conn.call(14, 0, body))
    return r.i16(), r.bytes_()


def test_sync_group_answers_once_the_assignment_is_replicated(floe_factory, etcd):
    # Kafka answers the leader's SyncGroup from the callback of the group record's write:
    # an assignment a new coordinator would not load is never handed out.
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={
        "offsets.topic.num.partitions": "1", "min.insync.replicas": "2", "replica.lag.time.max.ms": "2000",
        "broker.session.timeout.ms": "60000", "group.initial.rebalance.delay.ms": "0"})
    agreed_view(brokers, live=3)
    group = unique_topic("sync")
    coordinator = _by_id(brokers, _coordinator(brokers, group, 0))
    followers = [b for b in brokers if b is not coordinator]
    wait_until(lambda: sorted(_state(etcd, prefix, "__consumer_offsets", 0)["isr"]) == [1, 2, 3],
               timeout=60, what="__consumer_offsets in full ISR")
    # The internal topic follows the broker's min.insync.replicas, as in Kafka.
    a = admin(_bootstrap(brokers))  # alive until the future resolves
    (described,) = a.describe_configs([ConfigResource("topic", "__consumer_offsets")]).values()
    assert described.result(timeout=30)["min.insync.replicas"].value == "2"

    with kwire.KafkaConn(coordinator.host, coordinator.port, timeout=30) as conn:
        for f in followers:
            f.proc.send_signal(signal.SIGSTOP)
        try:
            err, generation, leader, member = _join_group_v0(conn, group, "")
            assert (err, leader) == (0, member), (err, leader, member)
            err, assignment = _sync_group_v0(conn, group, generation, member, b"partitions-of-" + member.encode())
            assert (err, assignment) == (COORDINATOR_NOT_AVAILABLE, b""), \
                f"SyncGroup answered {err} with {len(assignment)} bytes while the group record could not be replicated"
        finally:
            for f in followers:
                f.proc.send_signal(signal.SIGCONT)

        # The failed write started a new rebalance; with the followers back the member
        # rejoins in a new generation and gets its assignment.
        wanted = b"partitions-of-" + member.encode()
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the member never got its assignment back"
            err, new_generation, _leader, joined = _join_group_v0(conn, group, member)
            if err == UNKNOWN_MEMBER_ID:  # its session ran out meanwhile: join afresh
                member = ""
                continue
            assert err == 0, err
            member, wanted = joined, b"partitions-of-" + joined.encode()
            err, assignment = _sync_group_v0(conn, group, new_generation, member, wanted)
            if err == 0:
                break
            assert err in (COORDINATOR_NOT_AVAILABLE, REBALANCE_IN_PROGRESS), err
            time.sleep(0.5)
        assert new_generation > generation
        assert assignment == wanted
