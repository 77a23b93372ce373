"""Power cut of one broker of three (issue #14's acceptance): the broker's data
directory is on floe-powerloss-fs (see test_power_loss.py), which drops every change
not yet fsynced on a "cut". The other two brokers keep running.

With Kafka's default flush settings (no fsync per append), a single broker loses
acknowledged records in a power cut, and test_power_loss.py's negative control shows the
checker sees it. In a cluster the same settings lose nothing: `acks=all` is answered
only once `min.insync.replicas` replicas have each batch, so the surviving replicas
hold everything the clients were told, and the returning broker, whose log lost its
unsynced tail (or is torn), truncates by leader epoch and fetches it back.

A cycle: SIGKILL the broker on the rig at a random moment (it leads some partitions and
may coordinate the group), cut the power, start it again on what survived; the
producers and the group consumer carry on against the cluster throughout. At the end the
history checker judges everything the clients were told, and every replica holds the
leader's log byte for byte.
"""

from __future__ import annotations

import os
import random
import time

from clients import admin, unique_topic
from cluster_rig import SESSION_TIMEOUT_MS, agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from floe_process import wait_until
from history import Workload, check
from test_cluster_replication import _wait_converged, _wait_for_full_isr
from test_power_loss import powerloss_fs  # noqa: F401 (fixture)

CYCLES = int(os.environ.get("FLOE_CLUSTER_POWERLOSS_CYCLES", "3"))


def test_a_power_cut_of_one_broker_loses_nothing_acknowledged(floe_factory, etcd, powerloss_fs):
    seed = int(os.environ.get("FLOE_FAULT_SEED", str(random.randrange(1 << 30))))
    print(f"seed {seed} (FLOE_FAULT_SEED={seed} replays it)")
    rng = random.Random(seed)
    fs = powerloss_fs
    settings = {"log.segment.bytes": "65536"}
    survivors, prefix = start_cluster(floe_factory, etcd, 2, overrides=settings)
    # Broker 3 lives on the rig: the mount's root is its data directory.
    rigged = floe_factory(f"{prefix}-floe3", start=False, data_dir=fs.mountpoint,
                          overrides={"broker.session.timeout.ms": SESSION_TIMEOUT_MS, **settings})
    rigged.command_extra = ["--node-id", "3", "--metadata-store", etcd.store_url(prefix)]
    rigged.start()
    brokers = survivors + [rigged]
    agreed_view(brokers, live=3)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    partitions = 3
    topic = unique_topic("cluster-powerloss")
    a = admin(bootstrap)
    # Flushing stays at Kafka's defaults: replication, not fsync, keeps acknowledged records.
    a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3,
                              config={"min.insync.replicas": "2"})], request_timeout=15)[topic].result(timeout=20)

    wl = Workload(bootstrap, topic, partitions, producers=2, consumers=1, rate_per_producer=300).start()
    wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")
    try:
        for cycle in range(CYCLES):
            time.sleep(rng.uniform(0.3, 2.0))
            led = [p for p in range(partitions)
                   if etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")["leader"] == node_id(rigged)]
            rigged.kill9()
            dropped = fs.cut(rng.randrange(1, 1 << 62) if cycle % 2 else None)
            print(f"cycle {cycle}: broker 3 led {led}; the cut dropped {dropped}")
            before = wl.acked_count()
            wait_until(lambda: wl.acked_count() > before + 100, timeout=60,
                       what=f"acknowledgements from the two survivors after cut {cycle}")
            rigged.start()
            agreed_view(brokers, live=3)
            _wait_for_full_isr(etcd, prefix, topic, partitions, brokers)
            assert not wl.fatal_errors, wl.fatal_errors
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0, f"{wl.unflushed_at_stop} sends without an outcome after 60 s"
    verdict = check(wl.drain())
    print(f"{CYCLES} power cuts of one broker, fs {fs.command('stats')}\n{verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert verdict.counts["acked"] > 1000, verdict.counts
    assert verdict.counts["read"] > 0, "the group consumer read nothing"
    _wait_converged(etcd, prefix, brokers, topic, partitions)
