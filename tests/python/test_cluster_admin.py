"""Admin requests on a cluster's partitions: CreatePartitions and ElectLeaders, three
brokers and one etcd, through confluent-kafka's AdminClient over real sockets.

- CreatePartitions, handled by any broker, writes the grown assignment and the new
  partitions' first states in one etcd transaction. New partitions continue the
  topic's rack-aware rotation (or take the request's explicit assignment); every
  broker then shows them in Metadata with leaders and full ISRs, and serves them.
  Shrinking, or an assignment naming an unknown broker or the wrong number of
  replicas, is refused as Kafka refuses it; validate_only changes nothing.
- ElectLeaders PREFERRED moves leadership back to each partition's first replica once
  it is alive and in sync again (after a kill -9 and a restart), with a new leader
  epoch, and answers ELECTION_NOT_NEEDED where it leads already and
  PREFERRED_LEADER_NOT_AVAILABLE while it is away. UNCLEAN gives an offline partition
  (its last in-sync replica gone) a leader outside the ISR.
- With `auto.leader.rebalance.enable`, the controller makes the same preferred election
  by itself every `leader.imbalance.check.interval.seconds`.

librdkafka sends both requests to the controller; raw requests (kwire) send them to
other brokers too, since any broker may handle them. The partition state is read from
etcd itself (its HTTP gateway) as well as through the brokers.
"""

from __future__ import annotations

import struct
from concurrent.futures import ThreadPoolExecutor

import kwire
from clients import admin, consume_range, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic
from floe_process import wait_until

TIMEOUT_S = 20
API_CREATE_PARTITIONS = 37
API_ELECT_LEADERS = 43
ERRORS = {0: None, 3: "UNKNOWN_TOPIC_OR_PART", 37: "INVALID_PARTITIONS", 39: "INVALID_REPLICA_ASSIGNMENT",
          80: "PREFERRED_LEADER_NOT_AVAILABLE", 83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED"}


def _create(bootstrap: str, topic: str, partitions: int, rf: int = 3, min_isr: int = 1) -> str:
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf,
                                   config={"min.insync.replicas": str(min_isr)})], request_timeout=15)
    fs[topic].result(timeout=TIMEOUT_S)
    return topic


def _state(etcd, prefix: str, topic: str, p: int) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _metadata(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition → (leader, replicas, isr) as `bootstrap` answers Metadata."""
    t = admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert t.error is None, t.error
    return {p: (i.leader, list(i.replicas), sorted(i.isrs)) for p, i in t.partitions.items() if i.error is None}


def _wait_full(brokers, topic: str, count: int, rf: int = 3) -> dict:
    """Waits until every broker's Metadata shows `count` partitions, each led, with `rf`
    replicas all in sync, and the same on every broker; returns that placement."""
    def full(b):
        md = _metadata(b.bootstrap, topic)
        ok = len(md) == count and all(l != -1 and len(r) == rf and sorted(r) == isr for l, r, isr in md.values())
        return md if ok else None
    seen = [wait_until(lambda b=b: full(b), timeout=30, interval=0.2, what=f"{b.name} to show {count} full partitions of {topic}")
            for b in brokers]
    assert seen[0] == seen[1] == seen[2], seen
    return seen[0]


def _error(fut) -> str | None:
    """The Kafka error name a future resolves to (None for success)."""
    try:
        fut.result(timeout=TIMEOUT_S)
    except KafkaException as e:
        return e.args[0].name()
    return None


def _elect(bootstrap: str, election, partitions) -> dict:
    """ElectLeaders through `bootstrap`: TopicPartition → error name (None: elected)."""
    a = admin(bootstrap)
    # (confluent-kafka 2.16 fails on request_timeout here: a bug in its argument parsing)
    results = a.elect_leaders(election, partitions).result(timeout=TIMEOUT_S)
    out = {}
    for tp, err in results.items():
        if isinstance(err, KafkaException):
            err = err.args[0]
        out[(tp.topic, tp.partition)] = None if err is None else err.name()
    return out


def _raw_create_partitions(b, topic: str, count: int, assignment: list[list[int]] | None) -> str | None:
    """CreatePartitions v1 sent straight to broker `b`; the topic's error name."""
    if assignment is None:
        assignments = struct.pack(">i", -1)
    else:
        assignments = kwire.array([kwire.array([struct.pack(">i", r) for r in replicas]) for replicas in assignment])
    body = kwire.array([kwire.string(topic) + struct.pack(">i", count) + assignments]) + struct.pack(">ib", 15000, 0)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_CREATE_PARTITIONS, 1, body))
    r.i32()  # throttle
    results = r.array(lambda r: (r.string(), r.i16(), r.string()))
    assert [name for name, _code, _msg in results] == [topic], results
    return ERRORS[results[0][1]]


def _raw_elect_all_preferred(b) -> dict:
    """ElectLeaders v1 (PREFERRED, every partition) sent straight to broker `b`."""
    body = struct.pack(">b", 0) + struct.pack(">i", -1) + struct.pack(">i", 15000)
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.Reader(conn.call(API_ELECT_LEADERS, 1, body))
    r.i32()  # throttle
    assert r.i16() == 0
    topics = r.array(lambda r: (r.string(), r.array(lambda r: (r.i32(), r.i16(), r.string()))))
    return {(t, p): ERRORS[code] for t, parts in topics for p, code, _msg in parts}


def test_create_partitions_grows_a_topic_on_every_broker(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    controller = agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("grow"), partitions=3)
    before = _wait_full(brokers, topic, 3)
    a = admin(brokers[1].bootstrap)

    # Refused as Kafka refuses: no growth, or a bad explicit assignment; nothing changes.
    refusals = {
        "shrink": (NewPartitions(topic, 2), "INVALID_PARTITIONS"),
        "same": (NewPartitions(topic, 3), "INVALID_PARTITIONS"),
        "unknown broker": (NewPartitions(topic, 4, replica_assignment=[[1, 2, 9]]), "INVALID_REPLICA_ASSIGNMENT"),
        "wrong factor": (NewPartitions(topic, 4, replica_assignment=[[1, 2]]), "INVALID_REPLICA_ASSIGNMENT"),
        "repeated broker": (NewPartitions(topic, 4, replica_assignment=[[1, 2, 2]]), "INVALID_REPLICA_ASSIGNMENT"),
        "unknown topic": (NewPartitions(unique_topic("absent"), 4), "UNKNOWN_TOPIC_OR_PART"),
    }
    for what, (new, expected) in refusals.items():
        fut = a.create_partitions([new], request_timeout=15)[new.topic]
        assert _error(fut) == expected, what
    assert _error(a.create_partitions([NewPartitions(topic, 5)], validate_only=True, request_timeout=15)[topic]) is None
    assert len(etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"]) == 3
    assert _state(etcd, prefix, topic, 3) is None

    # Automatic: the new partitions continue the rotation, so leaders stay spread.
    assert _error(a.create_partitions([NewPartitions(topic, 6)], request_timeout=15)[topic]) is None
    grown = _wait_full(brokers, topic, 6)
    assert {p: grown[p] for p in range(3)} == before
    assert sorted(l for l, _r, _isr in grown.values()) == [1, 1, 2, 2, 3, 3], grown
    for p in range(3, 6):
        leader, replicas, _isr = grown[p]
        assert leader == replicas[0]
        assert _state(etcd, prefix, topic, p) == {"leader": leader, "leader_epoch": 0, "isr": replicas}

    # Explicit assignment: the first replica leads.
    assignment = [[3, 1, 2]]
    assert _error(a.create_partitions([NewPartitions(topic, 7, replica_assignment=assignment)], request_timeout=15)[topic]) is None
    # Any broker handles it, not only the controller librdkafka picks.
    other = next(b for b in brokers if node_id(b) != controller)
    assert _raw_create_partitions(other, topic, 7, [[1, 2, 3]]) == "INVALID_PARTITIONS"
    assert _raw_create_partitions(other, topic, 8, [[2, 3, 1], [1, 2, 3]]) == "INVALID_REPLICA_ASSIGNMENT"
    assert _raw_create_partitions(other, topic, 8, [[2, 3, 1]]) is None
    grown = _wait_full(brokers, topic, 8)
    assert (grown[6][0], grown[6][1]) == (3, [3, 1, 2]) and (grown[7][0], grown[7][1]) == (2, [2, 3, 1]), grown
    stored = etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"]
    assert stored["6"] == [3, 1, 2] and stored["7"] == [2, 3, 1] and len(stored) == 8

    # The new partitions are served: produced through one broker, read through another,
    # and replicated to every replica (the ISR stays full while acks=all is answered).
    bootstrap = ",".join(b.bootstrap for b in brokers)
    for p in range(3, 8):
        produce_all(bootstrap, topic, [{"value": f"p{p}-{i}".encode()} for i in range(20)], partition=p)
    for p in range(3, 8):
        got = consume_range(brokers[(p + 1) % 3].bootstrap, topic, 0, 20, partition=p)
        assert [m.value().decode() for m in got] == [f"p{p}-{i}" for i in range(20)]
    for p in range(8):
        wait_until(lambda p=p: sorted(_state(etcd, prefix, topic, p)["isr"]) == [1, 2, 3], timeout=20, interval=0.2,
                   what=f"{topic}-{p} in sync")
    for b in brokers:
        for p in range(3, 8):
            assert b.partition_dir(topic, p).exists(), f"{b.name} has no log of {topic}-{p}"

    # Two brokers asked at once for the same growth: one writes it, the other, whose
    # conditional write fails or comes second, checks again and refuses.
    with ThreadPoolExecutor(2) as pool:
        outcomes = sorted(pool.map(lambda b: _raw_create_partitions(b, topic, 12, None) or "", brokers[1:]))
    assert outcomes == ["", "INVALID_PARTITIONS"], outcomes
    assert len(etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"]) == 12
    _wait_full(brokers, topic, 12)


def test_preferred_election_moves_leadership_back_after_a_restart(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={"auto.leader.rebalance.enable": "false"})
    controller = agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("prefer"), partitions=3)
    placed = _wait_full(brokers, topic, 3)
    everything = [TopicPartition(topic, p) for p in range(3)]
    bootstrap = ",".join(b.bootstrap for b in brokers)
    for p in range(3):
        produce_all(bootstrap, topic, [{"value": f"before-{p}-{i}".encode()} for i in range(10)], partition=p)

    # Balanced: nothing to do, named or all.
    assert _elect(brokers[0].bootstrap, ElectionType.PREFERRED, everything) == {(topic, p): "ELECTION_NOT_NEEDED" for p in range(3)}
    assert _elect(brokers[0].bootstrap, ElectionType.PREFERRED, None) == {}
    assert _elect(brokers[0].bootstrap, ElectionType.UNCLEAN, everything) == {(topic, p): "ELECTION_NOT_NEEDED" for p in range(3)}
    missing = _elect(brokers[0].bootstrap, ElectionType.PREFERRED, [TopicPartition(topic, 7), TopicPartition("no-such-topic", 0)])
    assert missing == {(topic, 7): "UNKNOWN_TOPIC_OR_PART", ("no-such-topic", 0): "UNKNOWN_TOPIC_OR_PART"}

    # kill -9 a broker that is not the controller: its partition moves to another replica.
    victim_id = next(n for n in (1, 2, 3) if n != controller)
    p = next(q for q, (leader, _r, _i) in placed.items() if leader == victim_id)
    old = _state(etcd, prefix, topic, p)
    victim = _by_id(brokers, victim_id)
    victim.kill9()
    moved = wait_until(lambda: s if (s := _state(etcd, prefix, topic, p))["leader"] not in (-1, victim_id) else None,
                       timeout=20, interval=0.2, what=f"{topic}-{p} to move off broker {victim_id}")
    assert moved["leader_epoch"] == old["leader_epoch"] + 1
    others = [b for b in brokers if b is not victim]
    # The preferred replica is away: it cannot lead.
    assert _elect(others[0].bootstrap, ElectionType.PREFERRED, [TopicPartition(topic, p)]) == {(topic, p): "PREFERRED_LEADER_NOT_AVAILABLE"}
    produce_all(",".join(b.bootstrap for b in others), topic, [{"value": f"during-{i}".encode()} for i in range(10)], partition=p)

    # Back and in sync again, it does not lead by itself (automatic rebalance is off) ...
    victim.start()
    agreed_view(brokers, live=3)
    wait_until(lambda: len(_state(etcd, prefix, topic, p)["isr"]) == 3, timeout=30, interval=0.2,
               what=f"broker {victim_id} back in the ISR of {topic}-{p}")
    assert _state(etcd, prefix, topic, p)["leader"] == moved["leader"]

    # ... until a preferred election moves it back: only that partition is elected
    # (left out of an "all" answer are those that need nothing). Sent to a broker that
    # is not the controller: any broker handles it.
    assert _raw_elect_all_preferred(_by_id(brokers, next(n for n in (1, 2, 3) if n not in (controller, victim_id)))) == {(topic, p): None}
    after = _state(etcd, prefix, topic, p)
    assert after["leader"] == victim_id and after["leader_epoch"] == moved["leader_epoch"] + 1, after
    assert sorted(after["isr"]) == [1, 2, 3]
    assert _elect(others[1].bootstrap, ElectionType.PREFERRED, everything) == {(topic, q): "ELECTION_NOT_NEEDED" for q in range(3)}
    for b in brokers:
        wait_until(lambda b=b: _metadata(b.bootstrap, topic).get(p, (None,))[0] == victim_id, timeout=10, interval=0.2,
                   what=f"{b.name} to show broker {victim_id} leading {topic}-{p}")
    # The controller keeps it there; the partition serves from its preferred leader
    # with nothing lost.
    produce_all(bootstrap, topic, [{"value": f"after-{i}".encode()} for i in range(10)], partition=p)
    got = [m.value().decode() for m in consume_range(bootstrap, topic, 0, 30, partition=p)]
    assert got == [f"before-{p}-{i}" for i in range(10)] + [f"during-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)]
    assert _state(etcd, prefix, topic, p)["leader"] == victim_id


def test_unclean_election_gives_an_offline_partition_a_leader(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    controller = agreed_view(brokers, live=3)
    topic = unique_topic("unclean")
    # Two replicas on the two brokers that are not the controller, so that the
    # controller stays up throughout.
    a, b = (n for n in (1, 2, 3) if n != controller)
    client = admin(brokers[0].bootstrap)  # kept alive until the future resolves
    fs = client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[a, b]])], request_timeout=15)
    fs[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: (s := _state(etcd, prefix, topic, 0)) and s["isr"] == [a, b], timeout=10, what="the partition state")
    produce_all(_by_id(brokers, a).bootstrap, topic, [{"value": b"x"}])

    # b dies (the ISR shrinks to a), then a (the partition goes offline, ISR [a]).
    _by_id(brokers, b).kill9()
    wait_until(lambda: _state(etcd, prefix, topic, 0)["isr"] == [a], timeout=20, interval=0.2, what="the ISR to shrink to the leader")
    _by_id(brokers, a).kill9()
    wait_until(lambda: _state(etcd, prefix, topic, 0)["leader"] == -1, timeout=20, interval=0.2, what="the partition to go offline")
    assert _elect(_by_id(brokers, controller).bootstrap, ElectionType.UNCLEAN, [TopicPartition(topic, 0)]) == \
        {(topic, 0): "ELIGIBLE_LEADERS_NOT_AVAILABLE"}

    # b returns, out of sync: a clean election cannot use it, an unclean one does.
    _by_id(brokers, b).start()
    agreed_view([x for x in brokers if node_id(x) != a], live=2)
    offline = _state(etcd, prefix, topic, 0)
    assert (offline["leader"], offline["isr"]) == (-1, [a])
    assert _elect(_by_id(brokers, controller).bootstrap, ElectionType.PREFERRED, [TopicPartition(topic, 0)]) == \
        {(topic, 0): "PREFERRED_LEADER_NOT_AVAILABLE"}
    assert _elect(_by_id(brokers, controller).bootstrap, ElectionType.UNCLEAN, [TopicPartition(topic, 0)]) == {(topic, 0): None}
    s = _state(etcd, prefix, topic, 0)
    assert (s["leader"], s["isr"], s["leader_epoch"]) == (b, [b], offline["leader_epoch"] + 1), s
    produce_all(_by_id(brokers, b).bootstrap, topic, [{"value": b"after"}], acks=1)


def test_the_controller_moves_leadership_back_by_itself(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={"leader.imbalance.check.interval.seconds": "1"})
    controller = agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("rebalance"), partitions=3)
    placed = _wait_full(brokers, topic, 3)
    victim_id = next(n for n in (1, 2, 3) if n != controller)
    p = next(q for q, (leader, _r, _i) in placed.items() if leader == victim_id)
    victim = _by_id(brokers, victim_id)
    victim.kill9()
    moved = wait_until(lambda: s if (s := _state(etcd, prefix, topic, p))["leader"] not in (-1, victim_id) else None,
                       timeout=20, interval=0.2, what=f"{topic}-{p} to move off broker {victim_id}")
    victim.start()
    # Back in sync, it leads its preferred partition again without any request.
    back = wait_until(lambda: s if (s := _state(etcd, prefix, topic, p))["leader"] == victim_id else None,
                      timeout=30, interval=0.2, what=f"broker {victim_id} to lead {topic}-{p} again")
    assert back["leader_epoch"] == moved["leader_epoch"] + 1 and sorted(back["isr"]) == [1, 2, 3], back
    assert _elect(brokers[0].bootstrap, ElectionType.PREFERRED, None) == {}
