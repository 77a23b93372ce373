"""Topics and partition leadership as cluster state: three brokers and one etcd.

A topic created through any broker is placed over the live brokers and written to
etcd; every broker answers Metadata with the same leaders, and only a partition's
leader accepts its produce and fetch (the others answer NOT_LEADER_OR_FOLLOWER, and
clients follow Metadata there). The controller moves leadership when brokers come and
go: a partition whose only in-sync replica died goes offline (leader -1,
LEADER_NOT_AVAILABLE) rather than to a replica without its data, and returns, with a
new leader epoch, when that replica does.

The state is also read straight from etcd (its HTTP gateway), not only through the
brokers. Replication itself (factors above 1) is in test_cluster_replication.py; these
topics have one replica per partition, so that leadership alone is what is tested.
"""

from __future__ import annotations

import time

import kwire
import pytest
from clients import admin, consume_range, consumer, create_topic, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic
from floe_process import wait_until

NOT_LEADER_OR_FOLLOWER = 6


def _leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int], object]]:
    """partition → (leader, replicas, isr, error) as `bootstrap` answers Metadata."""
    md = admin(bootstrap).list_topics(topic, timeout=10)
    t = md.topics[topic]
    assert t.error is None, t.error
    return {p: (i.leader, list(i.replicas), list(i.isrs), i.error) for p, i in t.partitions.items()}


def _state(etcd, prefix: str, topic: str, partition: int) -> dict:
    state = etcd.get_json(f"/{prefix}/partitions/{topic}/{partition}")
    assert state is not None, f"no state for {topic}-{partition} in etcd"
    return state


def _log_bytes(b, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in b.partition_dir(topic, partition).glob("*.log"))


def test_topics_are_placed_over_the_cluster_and_served_by_their_leaders(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    by_id = {node_id(b): b for b in brokers}
    topic = unique_topic("placed")
    create_topic(brokers[0].bootstrap, topic, partitions=6)

    # Every broker answers with the same placement, read back from etcd too; leaders
    # spread evenly, one replica each (the leader, in sync).
    # Right after creation a broker may answer LEADER_NOT_AVAILABLE (its view has the topic
    # before the partition states), as Kafka does for a new topic: clients retry.
    def placed(b):
        leaders = _leaders(b.bootstrap, topic)
        return leaders if len(leaders) == 6 and all(e is None for *_rest, e in leaders.values()) else None
    placements = [wait_until(lambda b=b: placed(b), timeout=10, what=f"{b.name} to know {topic}") for b in brokers]
    assert placements[0] == placements[1] == placements[2], placements
    leaders = {p: leader for p, (leader, _, _, _) in placements[0].items()}
    assert sorted(leaders.values()) == [1, 1, 2, 2, 3, 3], leaders
    for p, (leader, replicas, isr, error) in placements[0].items():
        assert (replicas, isr, error) == ([leader], [leader], None)
        assert _state(etcd, prefix, topic, p) == {"leader": leader, "leader_epoch": 0, "isr": [leader]}
    assert etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"] == {str(p): [l] for p, l in leaders.items()}

    # A client bootstrapped at broker 2 writes to every partition (routed to each
    # leader by Metadata); one bootstrapped at broker 3 reads them all back.
    for p in range(6):
        produce_all(brokers[1].bootstrap, topic, [{"key": f"k{p}".encode(), "value": f"p{p}-{i}".encode()} for i in range(20)],
                    partition=p)
    for p in range(6):
        got = consume_range(brokers[2].bootstrap, topic, 0, 20, partition=p)
        assert [m.value().decode() for m in got] == [f"p{p}-{i}" for i in range(20)]
    # Only the leader's log holds a partition's records.
    for p, leader in leaders.items():
        for b in brokers:
            held = _log_bytes(b, topic, p)
            assert (held > 0) == (node_id(b) == leader), f"{b.name} holds {held} bytes of {topic}-{p} (leader {leader})"

    # A non-leader refuses the partition's produce and fetch with NOT_LEADER_OR_FOLLOWER.
    p0_leader = leaders[0]
    other = next(b for b in brokers if node_id(b) != p0_leader)
    with kwire.KafkaConn(other.host, other.port) as conn:
        batch = kwire.record_batch([kwire.Record(key=b"x", value=b"y")])
        produced = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch)))
        assert produced[(topic, 0)][0] == NOT_LEADER_OR_FOLLOWER, produced
        fetched = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
        assert [f.error_code for f in fetched] == [NOT_LEADER_OR_FOLLOWER], fetched
    assert by_id[p0_leader].running

    # Deleted through broker 3: gone from every broker's Metadata and data directory.
    a = admin(brokers[2].bootstrap)  # kept alive until the future resolves
    a.delete_topics([topic], request_timeout=10)[topic].result(timeout=15)
    for b in brokers:
        wait_until(lambda b=b: not b.partition_dir(topic, 0).exists(), timeout=15, what=f"{b.name} to delete its logs of {topic}")
        assert topic not in admin(b.bootstrap).list_topics(timeout=10).topics
    assert etcd.get_json(f"/{prefix}/topics/{topic}") is None
    assert etcd.get_json(f"/{prefix}/partitions/{topic}/0") is None


def test_a_dead_leaders_partitions_go_offline_and_return_with_a_new_epoch(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    controller = agreed_view(brokers, live=3)
    topic = unique_topic("failover")
    create_topic(brokers[0].bootstrap, topic, partitions=3)
    def led():
        ls = _leaders(brokers[0].bootstrap, topic)
        return ls if all(leader != -1 for leader, *_rest in ls.values()) else None
    leaders = wait_until(led, timeout=10, what="leaders")
    for p in range(3):
        produce_all(brokers[0].bootstrap, topic, [{"value": f"p{p}-{i}".encode()} for i in range(10)], partition=p)

    # Kill the leader of a partition that the controller does not lead, then the controller.
    victims = [next(n for n in (1, 2, 3) if n != controller), controller]
    for victim in victims:
        b = next(x for x in brokers if node_id(x) == victim)
        led = [p for p, (leader, *_rest) in leaders.items() if leader == victim]
        assert led, f"broker {victim} leads nothing: {leaders}"
        b.kill9()
        survivors = [x for x in brokers if x.running]
        agreed_view(survivors, live=len(survivors))
        for p in led:
            offline = wait_until(lambda p=p: _state(etcd, prefix, topic, p) if _state(etcd, prefix, topic, p)["leader"] == -1 else None,
                                 timeout=20, what=f"{topic}-{p} to go offline")
            # Its only in-sync replica is dead: no election of a replica without the data.
            assert offline == {"leader": -1, "leader_epoch": 1, "isr": [victim]}
            seen = wait_until(lambda p=p: _leaders(survivors[0].bootstrap, topic)[p], timeout=10, what="metadata")
            assert seen[0] == -1 and seen[3] is not None, seen  # LEADER_NOT_AVAILABLE
        # The other partitions go on being written.
        for p in (p for p in range(3) if p not in led and leaders[p][0] in {node_id(x) for x in survivors}):
            produce_all(survivors[0].bootstrap, topic, [{"value": f"p{p}-during-{victim}".encode()}], partition=p)
        b.start()
        for p in led:
            back = wait_until(lambda p=p: _state(etcd, prefix, topic, p) if _state(etcd, prefix, topic, p)["leader"] == victim else None,
                              timeout=30, what=f"{topic}-{p} to be led by {victim} again")
            assert back == {"leader": victim, "leader_epoch": 2, "isr": [victim]}
    agreed_view(brokers, live=3)

    # Nothing acknowledged was lost, and consumers read on from the new epoch.
    for p in range(3):
        produce_all(brokers[2].bootstrap, topic, [{"value": f"p{p}-after".encode()}], partition=p)
        c = consumer(brokers[1].bootstrap)
        values = []
        try:
            from confluent_kafka import TopicPartition
            c.assign([TopicPartition(topic, p, 0)])
            deadline = time.monotonic() + 30
            while not values or values[-1] != f"p{p}-after":
                assert time.monotonic() < deadline, f"{topic}-{p}: read {values}"
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    values.append(m.value().decode())
        finally:
            c.close()
        assert values[:10] == [f"p{p}-{i}" for i in range(10)], values
        assert values[-1] == f"p{p}-after"
        assert len(values) == len(set(values)), f"duplicates in {values}"


def test_a_group_consumes_from_every_broker_with_one_coordinator(floe_factory, etcd):
    brokers, _ = start_cluster(floe_factory, etcd, 3)
    controller = agreed_view(brokers, live=3)
    topic = unique_topic("group")
    create_topic(brokers[1].bootstrap, topic, partitions=6)
    for p in range(6):
        produce_all(brokers[1].bootstrap, topic, [{"value": f"{p}-{i}".encode()} for i in range(5)], partition=p)
    group = unique_topic("g")
    # Two members bootstrapped at different brokers: one coordinator (the leader of __consumer_offsets).
    members = [consumer(b.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
               for b in (brokers[0], brokers[2])]
    for m in members:
        m.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 30:
        assert time.monotonic() < deadline, f"consumed {len(got)}/30"
        for m in members:
            msg = m.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
                m.commit(message=msg, asynchronous=False)
    assert sorted(got) == sorted(f"{p}-{i}" for p in range(6) for i in range(5))
    for m in members:
        m.close()
    # The committed offsets are the same whichever broker is asked.
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    for b in brokers:
        a = admin(b.bootstrap)
        res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=15)
        assert {tp.partition: tp.offset for tp in res.topic_partitions} == {p: 5 for p in range(6)}, b.name
    assert controller in {1, 2, 3}


def test_replication_factors_beyond_the_live_brokers_are_refused(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = unique_topic("rf4")
    a = admin(brokers[0].bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=4)], request_timeout=10)
    with pytest.raises(KafkaException) as refused:
        fs[topic].result(timeout=15)
    assert "INVALID_REPLICATION_FACTOR" in str(refused.value) and "larger than the 3 live brokers" in str(refused.value)
    fs = a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=-1, replica_assignment=[[1, 1], [2, 3]])],
                         request_timeout=10)
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        fs[topic].result(timeout=15)
    assert etcd.get_json(f"/{prefix}/topics/{topic}") is None
    # A manual assignment on a broker of the cluster is honoured.
    fs = a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=-1, replica_assignment=[[3], [2]])], request_timeout=10)
    fs[topic].result(timeout=15)
    assert etcd.get_json(f"/{prefix}/topics/{topic}")["partitions"] == {"0": [3], "1": [2]}


def test_producer_ids_are_unique_across_the_cluster(floe_factory, etcd):
    """Each broker hands out idempotent producer ids from blocks reserved in etcd, so two
    producers bootstrapped at different brokers never share an id (which would mix their
    sequence numbers in a partition)."""
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    ids = []
    for b in brokers * 2:
        with kwire.KafkaConn(b.host, b.port) as conn:
            error, producer_id, epoch = kwire.parse_init_producer_id_v1(
                conn.call(kwire.API_INIT_PRODUCER_ID, 1, kwire.init_producer_id_v1(None)))
        assert (error, epoch) == (0, 0)
        ids.append(producer_id)
    assert len(set(ids)) == 6, ids
    assert etcd.get_json(f"/{prefix}/producer_id_block") == 3000, "three blocks of 1000 reserved"
    # A broker restarted takes a new block: its earlier ids are never handed out again.
    brokers[0].kill9()
    brokers[0].start()
    with kwire.KafkaConn(brokers[0].host, brokers[0].port) as conn:
        _, again, _ = kwire.parse_init_producer_id_v1(conn.call(kwire.API_INIT_PRODUCER_ID, 1, kwire.init_producer_id_v1(None)))
    assert again >= 3000 and again not in ids
