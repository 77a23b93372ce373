"""`floe cluster info|health` (issue #17 part 1), driven as a user would from the
shell and checked against what confluent-kafka's AdminClient sees of the same
cluster: one broker, then three (etcd) with one killed."""

from __future__ import annotations

import json

from cli import floe_cli, floe_json, floe_ok
from clients import admin, create_topic, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from floe_process import wait_until


def test_info_and_health_of_one_broker(floe):
    topic = create_topic(floe.bootstrap, unique_topic("info"), partitions=3)
    md = admin(floe.bootstrap).list_topics(timeout=10)
    info = floe_json(floe.bootstrap, "cluster", "info")
    assert info["cluster_id"] == md.cluster_id and info["controller"] == md.controller_id
    assert [(b["id"], b["address"]) for b in info["brokers"]] == \
        sorted((b.id, f"{b.host}:{b.port}") for b in md.brokers.values())
    # confluent-kafka lists every topic, internal ones too.
    assert info["topics"] == len(md.topics) and info["partitions"] == sum(len(t.partitions) for t in md.topics.values())
    assert info["partitions"] >= 3
    text = floe_ok(floe.bootstrap, "cluster", "info")
    assert f"Cluster id: {md.cluster_id}" in text and floe.bootstrap in text

    health = floe_json(floe.bootstrap, "cluster", "health")
    assert health["healthy"] is True and health["under_replicated_partitions"] == [] and health["offline_partitions"] == []
    assert [b["reachable"] for b in health["brokers"]] == [True]
    assert floe_ok(floe.bootstrap, "cluster", "health").startswith("healthy")
    assert topic  # created above, counted in partitions

    help_text = floe_ok(None, "cluster", "health", "--help")
    assert "Examples:" in help_text and "Exits 0" in help_text


def test_health_reports_under_replicated_partitions_when_a_broker_dies(floe_factory, etcd):
    brokers, _prefix = start_cluster(floe_factory, etcd, 3)
    controller = agreed_view(brokers, live=3)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topic = unique_topic("health")
    a = admin(brokers[0].bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)], request_timeout=15)[topic].result(timeout=20)
    wait_until(lambda: floe_cli(bootstrap, "cluster", "health").returncode == 0, timeout=30, interval=0.3,
               what="the new topic's replicas all in sync")
    info = floe_json(bootstrap, "cluster", "info")
    assert sorted(b["id"] for b in info["brokers"]) == [1, 2, 3] and info["controller"] == controller

    victim = next(b for b in brokers if node_id(b) != controller)
    victim_id = node_id(victim)
    victim.kill9()
    survivors = ",".join(b.bootstrap for b in brokers if b is not victim)

    def health():
        p = floe_cli(survivors, "cluster", "health", "--format", "json")
        return p, json.loads(p.stdout) if p.stdout else None

    # At once: the dead broker does not answer (while the metadata still lists it).
    first, doc = health()
    assert first.returncode == 1 and doc["healthy"] is False and "unhealthy" in first.stderr, first.stderr
    assert victim_id in doc["unreachable_brokers"] or doc["under_replicated_partitions"], doc

    # Once the controller drops it from the ISRs: every partition of the topic is short of a replica.
    def shrunk():
        p, doc = health()
        mine = [q for q in doc["under_replicated_partitions"] if q["topic"] == topic]
        return (p, doc, mine) if len(mine) == 3 else None
    p, doc, mine = wait_until(shrunk, timeout=30, interval=0.3, what=f"health to report {topic}'s partitions under-replicated")
    assert p.returncode == 1
    # What confluent-kafka sees of the same partitions.
    md = admin(survivors).list_topics(topic, timeout=10).topics[topic]
    assert sorted(q for q, i in md.partitions.items() if len(i.isrs) < len(i.replicas)) == [0, 1, 2]
    for q in mine:
        assert victim_id in q["replicas"] and victim_id not in q["isr"] and q["leader"] != victim_id, q
    assert doc["offline_partitions"] == []
    text = floe_cli(survivors, "cluster", "health")
    assert text.returncode == 1 and text.stdout.startswith("UNHEALTHY") and "Under-replicated partitions" in text.stdout
    assert f"{topic}-0" in text.stderr
