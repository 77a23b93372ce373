"""Shared mode in a cluster (issue #16, docs/shared-mode.md 4.8): a replica added to a
shared partition whose leader has already moved its old segments into the table is
answered OFFSET_MOVED_TO_TIERED_STORAGE (KIP-405), asks the leader's local log start
(ListOffsets -4), starts its local log there with the table's log start offset, and
joins the ISR; once it leads, a consumer from offset 0 still reads everything, the
old offsets served from the shared table by the new leader.

Three brokers, one etcd, one catalog and warehouse every broker shares."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaAdminClient
from kafka.structs import TopicPartition as KTP

import kwire
from clients import admin, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from floe_process import wait_until

pytest.importorskip("pyiceberg.catalog.sql")


def _state(etcd, prefix: str, topic: str, p: int = 0) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _list_offset(b, topic: str, timestamp: int) -> tuple[int, int]:
    with kwire.KafkaConn(b.host, b.port) as conn:
        r = kwire.parse_list_offsets_v8(conn.call_flexible(kwire.API_LIST_OFFSETS, 8, kwire.list_offsets_v8(topic, 0, timestamp)))
    err, _ts, off = r[(topic, 0)]
    return err, off


def _drain(bootstrap: str, topic: str, count: int) -> list[tuple]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple] = []
        deadline = time.monotonic() + 90
        while len(out) < count:
            assert time.monotonic() < deadline, f"drained {len(out)}/{count}; last {out[-1:]}"
            for m in c.consume(num_messages=500, timeout=0.5):
                assert not m.error(), m.error()
                out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def test_a_replica_added_after_local_deletion_starts_at_the_leaders_local_log_start(floe_factory, etcd, tmp_path: Path):
    lake = tmp_path / "lake"
    lake.mkdir()
    settings = {"floe.iceberg.catalog-uri": f"sqlite:{lake / 'catalog.db'}", "floe.iceberg.warehouse": str(lake / "warehouse"),
                "floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "1000", "log.retention.check.interval.ms": "500"}
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=settings)
    agreed_view(brokers, live=3)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topic = unique_topic("clshared")
    a = admin(brokers[0].bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1, replica_assignment=[[1]], config={
        "floe.iceberg.enabled": "true", "floe.iceberg.storage": "shared", "local.retention.ms": "0",
        "segment.bytes": "8000", "retention.ms": "-1", "min.insync.replicas": "1"})], request_timeout=15)[topic].result(timeout=20)
    msgs = [{"key": f"k{i}".encode(), "value": f"v{i}-".encode() * 8} for i in range(600)]
    produce_all(bootstrap, topic, msgs, **{"batch.size": 2000})
    leader = _by_id(brokers, 1)
    wait_until(lambda: _list_offset(leader, topic, -4)[1] >= 400, timeout=90, interval=0.5,
               what="the leader's old segments to leave local disk")
    local_start = _list_offset(leader, topic, -4)[1]

    # Add broker 2: it cannot copy what the leader no longer has locally.
    ka = KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in brokers], request_timeout_ms=20000)
    try:
        res = ka.alter_partition_reassignments({KTP(topic, 0): [1, 2]}, timeout_ms=20000)
        assert all(err is None for err in res.values()), res
    finally:
        ka.close()
    wait_until(lambda: sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2] or None, timeout=60, interval=0.3,
               what="broker 2 in the ISR")
    follower = _by_id(brokers, 2)
    first_local = min(int(f.stem) for f in follower.partition_dir(topic, 0).glob("*.log"))
    assert first_local >= local_start, f"the follower's local log starts at {first_local}, the leader's at {local_start}"
    assert follower.metric("floe_replica_fetch_errors_total", error="OFFSET_MOVED_TO_TIERED_STORAGE") >= 1

    # Broker 2 takes over: the old offsets come from the table, through it.
    ka = KafkaAdminClient(bootstrap_servers=[b.bootstrap for b in brokers], request_timeout_ms=20000)
    try:
        ka.alter_partition_reassignments({KTP(topic, 0): [2]}, timeout_ms=20000)
    finally:
        ka.close()
    wait_until(lambda: _state(etcd, prefix, topic)["leader"] == 2 and _state(etcd, prefix, topic)["isr"] == [2] or None,
               timeout=60, interval=0.3, what="broker 2 to lead alone")
    wait_until(lambda: _list_offset(follower, topic, -2) == (0, 0) or None, timeout=30, interval=0.3,
               what="the new leader to answer the table's log start offset")
    got = _drain(bootstrap, topic, 600)
    assert got == [(i, f"k{i}".encode(), f"v{i}-".encode() * 8) for i in range(600)]
    assert follower.metric("floe_fetch_bytes_total", path="table-rebuild") > 0
