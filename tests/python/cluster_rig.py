"""Shared pieces of the cluster tests: an etcd fixture, N brokers started as members of
one cluster, and reading what each broker knows of it from /metrics.

Each broker is `floe --node-id N --metadata-store etcd://...`, with short leases
(`broker.session.timeout.ms`) so that a dead broker is noticed within seconds.
"""

from __future__ import annotations

import uuid

import pytest
from etcd_process import EtcdProcess
from floe_process import free_port, parse_metric, wait_until

SESSION_TIMEOUT_MS = 2000


@pytest.fixture
def etcd(tmp_path):
    e = EtcdProcess(tmp_path / "etcd-data", tmp_path / "etcd.log").start()
    yield e
    e.kill9()


def start_cluster(floe_factory, etcd, n: int, prefix: str | None = None, overrides: dict | None = None,
                  schema_registry: bool = False):
    """Starts brokers 1..n of a cluster under `prefix` (a fresh one by default);
    with `schema_registry`, each runs its Schema Registry on a port of its own."""
    prefix = prefix or f"floe-{uuid.uuid4().hex[:8]}"
    brokers = []
    for node_id in range(1, n + 1):
        settings = {"broker.session.timeout.ms": SESSION_TIMEOUT_MS, **(overrides or {})}
        b = floe_factory(f"{prefix}-floe{node_id}", start=False, overrides=settings)
        if schema_registry:
            b.schema_registry_port = free_port()
        b.command_extra = ["--node-id", str(node_id), "--metadata-store", etcd.store_url(prefix)]
        b.start()
        brokers.append(b)
    return brokers, prefix


def node_id(b) -> int:
    return int(b.command_extra[1])


def view(b) -> tuple[int, int, int]:
    """(live brokers, controller id, 1 if it is the controller) from the broker's /metrics."""
    text = b.metrics_text()
    return (int(parse_metric(text, "floe_cluster_live_brokers")), int(parse_metric(text, "floe_cluster_controller_id")),
            int(parse_metric(text, "floe_active_controller_count")))


def agreed_view(brokers, live: int) -> int:
    """Waits until every broker in `brokers` sees `live` brokers and the same controller,
    which is one of them and the only one that says it is; returns the controller's id."""
    ids = {node_id(b): b for b in brokers}

    def agreed():
        views = [view(b) for b in brokers]
        controllers = {v[1] for v in views}
        if any(v[0] != live for v in views) or len(controllers) != 1:
            return None
        (cid,) = controllers
        if cid not in ids or sum(v[2] for v in views) != 1 or view(ids[cid])[2] != 1:
            return None
        return cid

    return wait_until(agreed, timeout=30, interval=0.2, what=f"{len(brokers)} brokers to agree on {live} live and one controller")
