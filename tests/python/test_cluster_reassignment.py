"""Partition reassignment (KIP-455): AlterPartitionReassignments and
ListPartitionReassignments on four brokers and one etcd, through kafka-python's
KafkaAdminClient over real sockets (confluent-kafka 2.16 has neither call), and raw
requests (kwire) where a request must go to a given broker, carry what the client
refuses to send, or avoid a broker that is paused or dead but still registered
(kafka-python's metadata refresh may pick it and time out).

- A replication-factor-3 partition moved from {1,2,3} to {2,3,4} under idempotent
  acks=all producers: broker 4 catches up and joins the ISR within the leader's epoch
  (the leader adds it to its followers when the replicas change), the controller
  completes the move (replicas {2,3,4}, broker 1 out, leadership moved from 1 to 2 at
  a new epoch), the history checker finds nothing acknowledged lost, duplicated or
  reordered, and broker 4's log equals the new leader's byte for byte.
- A move whose adding replica cannot catch up (its broker paused) is listed while in
  progress and cancelled: the original replicas come back, the adding one leaves, the
  leader epoch grows.
- A move whose adding replica is killed stays in progress (acks=all goes on with the
  original ISR) and completes once the broker returns and catches up.
- A broker that dies (crash point `cluster.reassignment.written`) after writing a move
  and before answering leaves a move that completes without it.
- Kafka's refusals: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT,
  NO_REASSIGNMENT_IN_PROGRESS; a move that needs no copy (a reordering, a shrink)
  completes at once; a broker alone answers as Kafka would with nothing to move.

The partition state and the topic's assignment are read from etcd itself (its HTTP
gateway) as well as through the brokers.
"""

from __future__ import annotations

import signal
import struct

import kwire
import pytest
from clients import admin, create_topic, produce_all, unique_topic
from failpoints import assert_failpoints_armed
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from floe_process import wait_until
from history import Workload, check
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

TIMEOUT_S = 30
API_ALTER_PARTITION_REASSIGNMENTS = 45
API_LIST_PARTITION_REASSIGNMENTS = 46
ERRORS = {0: None, 3: "UNKNOWN_TOPIC_OR_PARTITION", 39: "INVALID_REPLICA_ASSIGNMENT", 85: "NO_REASSIGNMENT_IN_PROGRESS"}


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _create(bootstrap: str, topic: str, assignment: list[list[int]], min_isr: int = 2) -> str:
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=len(assignment), replication_factor=-1, replica_assignment=assignment, config={"min.insync.replicas": str(min_isr)})],
                         request_timeout=15)
    fs[topic].result(timeout=TIMEOUT_S)
    return topic


def _state(etcd, prefix: str, topic: str, p: int = 0) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _replicas(etcd, prefix: str, topic: str, p: int = 0) -> list[int]:
    return etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"][str(p)]


def _moving(state: dict) -> bool:
    return bool(state.get("adding_replicas") or state.get("removing_replicas"))


def _kadmin(brokers) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in brokers], request_timeout_ms=20000,
                            client_id="floe-reassignment-test")


def _alter(brokers, moves: dict) -> dict:
    """AlterPartitionReassignments through kafka-python (sent to the controller):
    {(topic, p): target or None} → {(topic, p): error name or None}."""
    a = _kadmin(brokers)
    try:
        res = a.alter_partition_reassignments({KTP(t, p): r for (t, p), r in moves.items()}, timeout_ms=20000)
    finally:
        a.close()
    return {(tp.topic, tp.partition): (None if err is None else ERRORS[err.errno]) for tp, err in res.items()}


def _list(brokers, partitions: list[tuple[str, int]] | None = None) -> dict:
    """ListPartitionReassignments through kafka-python: {(topic, p): {replicas, adding, removing}}."""
    a = _kadmin(brokers)
    try:
        named = None if partitions is None else [KTP(t, p) for t, p in partitions]
        res = a.list_partition_reassignments(named, timeout_ms=20000)
    finally:
        a.close()
    return {(tp.topic, tp.partition): (v["replicas"], v["adding_replicas"], v["removing_replicas"]) for tp, v in res.items()}


def _raw_alter(b, topic: str, p: int, target: list[int] | None) -> str | None:
    """AlterPartitionReassignments v0 (flexible) sent straight to broker `b`; the
    partition's error name."""
    replicas = kwire.uvarint(0) if target is None else kwire.compact_array([struct.pack(">i", r) for r in target])
    partition = struct.pack(">i", p) + replicas + b"\x00"
    body = struct.pack(">i", 15000) + kwire.compact_array([kwire.compact_string(topic) + kwire.compact_array([partition]) + b"\x00"]) + b"\x00"
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.FlexReader(conn.call_flexible(API_ALTER_PARTITION_REASSIGNMENTS, 0, body))
    r.i32()  # throttle
    assert r.i16() == 0
    r.compact_string()

    def part(r):
        out = (r.i32(), r.i16(), r.compact_string())
        r.skip_tags()
        return out

    def top(r):
        out = (r.compact_string(), r.compact_array(part))
        r.skip_tags()
        return out

    topics = r.compact_array(top)
    assert [(t, [q for q, _c, _m in ps]) for t, ps in topics] == [(topic, [p])], topics
    return ERRORS[topics[0][1][0][1]]


def _raw_list(b, named: list[tuple[str, int]] | None = None) -> list:
    """ListPartitionReassignments v0 (flexible) for the `named` partitions (None: all),
    sent straight to broker `b`: [(topic, p, replicas, adding, removing)]."""
    if named is None:
        topics = kwire.uvarint(0)
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in named:
            by_topic.setdefault(t, []).append(p)
        topics = kwire.compact_array([kwire.compact_string(t) + kwire.compact_array([struct.pack(">i", p) for p in ps]) + b"\x00"
                                      for t, ps in by_topic.items()])
    body = struct.pack(">i", 15000) + topics + b"\x00"
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.FlexReader(conn.call_flexible(API_LIST_PARTITION_REASSIGNMENTS, 0, body))
    r.i32()  # throttle
    assert r.i16() == 0
    r.compact_string()
    ids = lambda r: r.compact_array(lambda r: r.i32())  # noqa: E731

    def part(r):
        out = (r.i32(), ids(r), ids(r), ids(r))
        r.skip_tags()
        return out

    def top(r):
        out = (r.compact_string(), r.compact_array(part))
        r.skip_tags()
        return out

    return [(t, q, rep, add, rem) for t, ps in r.compact_array(top) for q, rep, add, rem in ps]


def _log_bytes(b, topic: str, p: int = 0) -> bytes:
    d = b.partition_dir(topic, p)
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def _wait_identical(etcd, prefix: str, brokers, topic: str, replicas: list[int], p: int = 0):
    """Waits until the partition's ISR is `replicas` and each replica's log equals the
    leader's, byte for byte."""
    def same():
        s = _state(etcd, prefix, topic, p)
        if sorted(s["isr"]) != sorted(replicas):
            return None
        logs = {r: _log_bytes(_by_id(brokers, r), topic, p) for r in replicas}
        lead = logs[s["leader"]]
        return lead if lead and all(v == lead for v in logs.values()) else None
    return wait_until(same, timeout=60, interval=0.3, what=f"{topic}: replicas {replicas} in sync and byte-identical")


def _plan(controller: int) -> tuple[list[int], list[int], int]:
    """(original replicas, target, the adding broker) for a move whose adding broker is
    not the controller (kafka-python sends the requests there, and it is paused or
    killed): the original's first replica leads and leaves."""
    adder = max(i for i in (1, 2, 3, 4) if i != controller)
    original = [i for i in (1, 2, 3, 4) if i != adder]
    return original, original[1:] + [adder], adder


def test_a_move_under_an_acks_all_producer_loses_nothing(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 4, overrides={"log.segment.bytes": "262144"})
    agreed_view(brokers, live=4)
    topic = _create(brokers[0].bootstrap, unique_topic("move"), [[1, 2, 3]])
    before = _state(etcd, prefix, topic)
    assert before["leader"] == 1 and not _moving(before)
    wl = Workload(_bootstrap(brokers), topic, 1, producers=2, consumers=0, rate_per_producer=300).start()
    try:
        wait_until(lambda: wl.acked_count() >= 600, timeout=60, what="first acknowledgements")
        assert _alter(brokers, {(topic, 0): [2, 3, 4]}) == {(topic, 0): None}
        done = wait_until(lambda: s if not _moving(s := _state(etcd, prefix, topic)) and _replicas(etcd, prefix, topic) == [2, 3, 4] else None,
                          timeout=60, interval=0.2, what="the move to complete")
        # Broker 1 led and left: the first target replica in the ISR leads, at a new epoch.
        assert done["leader"] == 2 and done["leader_epoch"] > before["leader_epoch"], done
        assert sorted(done["isr"]) == [2, 3, 4], done
        acked = wl.acked_count()
        wait_until(lambda: wl.acked_count() > acked + 300, timeout=60, what="acknowledgements after the move")
        assert not wl.fatal_errors, wl.fatal_errors
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0
    verdict = check(wl.drain())
    print(verdict.summary())
    assert verdict.ok, verdict.summary()
    assert verdict.counts["acked"] >= 900, verdict.counts  # 600 before the move, 300 after
    assert _list(brokers) == {}
    assert _list(brokers, [(topic, 0)]) == {}
    for b in brokers:
        wait_until(lambda b=b: (m := admin(b.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0]).leader == 2
                   and list(m.replicas) == [2, 3, 4], timeout=30, what=f"{b.name}'s Metadata to show the move")
    _wait_identical(etcd, prefix, brokers, topic, [2, 3, 4])
    # Broker 1 leads nothing and follows nothing of the topic any more.
    assert _by_id(brokers, 1).metric("floe_leader_partitions") == 0


def test_a_move_is_listed_and_cancelled_before_it_completes(floe_factory, etcd):
    # The lease outlives the pause: the paused broker stays registered (a valid target).
    brokers, prefix = start_cluster(floe_factory, etcd, 4, overrides={"broker.session.timeout.ms": "30000"})
    controller = agreed_view(brokers, live=4)
    original, target, adder = _plan(controller)
    live = [b for b in brokers if node_id(b) != adder]
    topic = _create(brokers[0].bootstrap, unique_topic("cancel"), [original])
    produce_all(_bootstrap(live), topic, [{"value": f"before-{i}".encode()} for i in range(200)])
    paused = _by_id(brokers, adder)
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        assert _raw_alter(live[0], topic, 0, target) is None
        union = target + [original[0]]
        moving = _state(etcd, prefix, topic)
        assert (moving["adding_replicas"], moving["removing_replicas"]) == ([adder], [original[0]]), moving
        assert _replicas(etcd, prefix, topic) == union
        assert _raw_list(live[0]) == [(topic, 0, union, [adder], [original[0]])]
        assert _raw_list(live[1], [(topic, 0), (topic, 7), ("no-such-topic", 0)]) == [(topic, 0, union, [adder], [original[0]])]
        # acks=all goes on with the original ISR; the move waits for the paused broker.
        produce_all(_bootstrap(live), topic, [{"value": f"during-{i}".encode()} for i in range(200)])
        assert _moving(_state(etcd, prefix, topic))
        assert _raw_alter(live[1], topic, 0, None) is None
        reverted = _state(etcd, prefix, topic)
        assert not _moving(reverted), reverted
        # The union without the adding replica, in the union's order (Kafka's KRaft revert
        # keeps that order, so the preferred leader may differ; the leader does not).
        assert _replicas(etcd, prefix, topic) == [r for r in union if r != adder]
        assert sorted(reverted["isr"]) == sorted(original) and reverted["leader"] == original[0]
        # The adding replica left: the epoch grows, so its fetches would be fenced.
        assert reverted["leader_epoch"] > moving["leader_epoch"], (moving, reverted)
        assert _raw_list(live[2]) == []
        assert _raw_alter(live[2], topic, 0, None) == "NO_REASSIGNMENT_IN_PROGRESS"
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    produce_all(_bootstrap(live), topic, [{"value": f"after-{i}".encode()} for i in range(200)])
    _wait_identical(etcd, prefix, brokers, topic, original)


def test_a_move_waits_for_a_killed_adding_replica(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 4, overrides={"broker.session.timeout.ms": "30000"})
    controller = agreed_view(brokers, live=4)
    original, target, adder = _plan(controller)
    live = [b for b in brokers if node_id(b) != adder]
    topic = _create(brokers[0].bootstrap, unique_topic("waits"), [original])
    produce_all(_bootstrap(live), topic, [{"value": f"before-{i}".encode()} for i in range(300)])
    victim = _by_id(brokers, adder)
    # Paused first, so that it is a registered target that cannot catch up; then killed.
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        assert _raw_alter(live[0], topic, 0, target) is None
    finally:
        victim.kill9()
    before = _state(etcd, prefix, topic)
    assert before["adding_replicas"] == [adder], before
    produce_all(_bootstrap(live), topic, [{"value": f"while-dead-{i}".encode()} for i in range(300)])
    still = _state(etcd, prefix, topic)
    assert _moving(still) and adder not in still["isr"], still
    assert _raw_list(live[0], [(topic, 0)]) == [(topic, 0, target + [original[0]], [adder], [original[0]])]
    victim.start()
    agreed_view(brokers, live=4)
    done = wait_until(lambda: s if not _moving(s := _state(etcd, prefix, topic)) else None,
                      timeout=60, interval=0.2, what="the move to complete after the adding replica returned")
    assert _replicas(etcd, prefix, topic) == target
    assert done["leader"] == target[0] and done["leader_epoch"] > before["leader_epoch"], done
    assert _list(brokers) == {}
    _wait_identical(etcd, prefix, brokers, topic, target)


def test_a_move_written_by_a_broker_that_dies_before_answering_completes(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 4)
    controller = agreed_view(brokers, live=4)
    # The handling broker is neither the controller nor in the target.
    handler = _by_id(brokers, next(i for i in (1, 2, 3, 4) if i != controller))
    original = [node_id(handler)] + [i for i in (1, 2, 3, 4) if i not in (node_id(handler), controller)][:2]
    target = [i for i in (1, 2, 3, 4) if i != node_id(handler)]
    handler.restart(env={"FAILPOINTS": "cluster.reassignment.written=return(abort)"})
    assert_failpoints_armed(handler)
    agreed_view(brokers, live=4)
    topic = _create(brokers[0].bootstrap, unique_topic("crash"), [original])
    produce_all(_bootstrap(brokers), topic, [{"value": f"v{i}".encode()} for i in range(300)])
    with pytest.raises(ConnectionError):  # no answer: the broker aborts at its crash point
        _raw_alter(handler, topic, 0, target)
    wait_until(lambda: not handler.running, timeout=10, what="the handling broker to abort")
    done = wait_until(lambda: s if not _moving(s := _state(etcd, prefix, topic)) and _replicas(etcd, prefix, topic) == target else None,
                      timeout=60, interval=0.2, what="the move to complete without the broker that wrote it")
    assert done["leader"] in target and sorted(done["isr"]) == sorted(target), done
    live = [b for b in brokers if b is not handler]
    _wait_identical(etcd, prefix, live, topic, target)
    handler.start(env={})
    agreed_view(brokers, live=4)
    assert _list(brokers) == {}


def test_refusals_and_moves_that_need_no_copy(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 4)
    agreed_view(brokers, live=4)
    topic = _create(brokers[0].bootstrap, unique_topic("refuse"), [[1, 2, 3], [1, 2, 3]])
    assert _alter(brokers, {
        (topic, 0): [1, 9],
        (topic, 1): [2, 2],
        (topic, 5): [1, 2, 3],
        ("no-such-topic", 0): [1, 2, 3],
    }) == {
        (topic, 0): "INVALID_REPLICA_ASSIGNMENT",
        (topic, 1): "INVALID_REPLICA_ASSIGNMENT",
        (topic, 5): "UNKNOWN_TOPIC_OR_PARTITION",
        ("no-such-topic", 0): "UNKNOWN_TOPIC_OR_PARTITION",
    }
    assert _alter(brokers, {(topic, 0): None}) == {(topic, 0): "NO_REASSIGNMENT_IN_PROGRESS"}
    # Any broker handles it, not only the controller; an empty target is refused too.
    for b in brokers:
        assert _raw_alter(b, topic, 0, []) == "INVALID_REPLICA_ASSIGNMENT"
        assert _raw_alter(b, topic, 0, None) == "NO_REASSIGNMENT_IN_PROGRESS"
    assert _replicas(etcd, prefix, topic, 0) == [1, 2, 3] and _replicas(etcd, prefix, topic, 1) == [1, 2, 3]
    before = _state(etcd, prefix, topic, 0)

    # A reordering: every target replica is in sync, it completes at once; the leader stays.
    assert _raw_alter(brokers[3], topic, 0, [3, 1, 2]) is None
    s = _state(etcd, prefix, topic, 0)
    assert _replicas(etcd, prefix, topic, 0) == [3, 1, 2] and not _moving(s)
    assert (s["leader"], s["leader_epoch"]) == (1, before["leader_epoch"])
    # A shrink away from the leader: completes at once, 2 leads at a new epoch.
    assert _alter(brokers, {(topic, 1): [2, 3]}) == {(topic, 1): None}
    s1 = _state(etcd, prefix, topic, 1)
    assert _replicas(etcd, prefix, topic, 1) == [2, 3] and not _moving(s1)
    assert s1["leader"] == 2 and sorted(s1["isr"]) == [2, 3] and s1["leader_epoch"] > before["leader_epoch"], s1
    assert _list(brokers) == {}
    produce_all(_bootstrap(brokers), topic, [{"value": b"x"}] * 50, partition=1)
    _wait_identical(etcd, prefix, brokers, topic, [2, 3], p=1)


def test_a_broker_alone_has_nothing_to_move(floe):
    topic = unique_topic("alone")
    create_topic(floe.bootstrap, topic)
    me = next(iter(admin(floe.bootstrap).list_topics(timeout=10).brokers))
    assert _alter([floe], {(topic, 0): [me]}) == {(topic, 0): None}
    assert _alter([floe], {(topic, 0): [me + 1], (topic, 1): [me]}) == {
        (topic, 0): "INVALID_REPLICA_ASSIGNMENT", (topic, 1): "UNKNOWN_TOPIC_OR_PARTITION"}
    assert _alter([floe], {(topic, 0): None}) == {(topic, 0): "NO_REASSIGNMENT_IN_PROGRESS"}
    assert _list([floe]) == {}
