"""Brokers that talk to each other over TLS: three brokers and one etcd, every
broker with a single secured listener that is also its inter-broker listener,
so replica fetchers must speak it.

What is checked, on real processes, real sockets and real clients:

- SSL alone with `ssl.client.auth=required`: followers present the broker
  certificate and verify the leader's against the truststore and its host name;
  every replica ends with the leader's bytes and all three stay in the ISR.
"""

from __future__ import annotations

import uuid

import pytest
from cluster_rig import SESSION_TIMEOUT_MS, agreed_view, etcd, node_id  # noqa: F401 (fixture)
from clients import produce_all, unique_topic
from confluent_kafka.admin import AdminClient, NewTopic
from floe_process import wait_until
from tls_certs import make_pki


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def _start(floe_factory, etcd, protocol: str, settings: dict, per_broker=lambda nid: {}):
    """Three brokers whose only listener is `protocol` (named after it), also the
    inter-broker listener."""
    brokers, prefix = [], f"floe-{uuid.uuid4().hex[:8]}"
    for nid in (1, 2, 3):
        b = floe_factory(f"{prefix}-floe{nid}", start=False)
        listener = f"{protocol}://127.0.0.1:{b.port}"
        b.overrides = {"broker.session.timeout.ms": SESSION_TIMEOUT_MS, **settings, "listeners": listener,
                       "advertised.listeners": listener, "inter.broker.listener.name": protocol, **per_broker(nid)}
        b.command_extra = ["--node-id", str(nid), "--metadata-store", etcd.store_url(prefix)]
        b.start()
        brokers.append(b)
    agreed_view(brokers, live=3)
    return brokers, prefix


def _client_conf(pki) -> dict:
    # The listener asks for client certificates.
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.cert),
            "ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(pki.client.key)}


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _state(etcd, prefix: str, topic: str, p: int = 0) -> dict | None:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _create(bootstrap: str, conf: dict, topic: str, partitions: int = 1):
    a = AdminClient({"bootstrap.servers": bootstrap, **conf})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"})
    a.create_topics([new], request_timeout=15)[topic].result(timeout=20)


def _log_bytes(b, topic: str, p: int = 0) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(b.partition_dir(topic, p).glob("*.log")))


def _replicas_equal(brokers, topic: str) -> bool:
    logs = {_log_bytes(b, topic) for b in brokers}
    return len(logs) == 1 and logs != {b""}


def test_ssl_between_brokers_with_client_certificates(floe_factory, etcd, pki, tmp_path):
    settings = {
        "ssl.certificate.location": str(pki.broker.cert),
        "ssl.key.location": str(pki.broker.key),
        "ssl.truststore.location": str(pki.ca.cert),
        "ssl.client.auth": "required",
        "replica.fetch.backoff.ms": "300",
    }
    brokers, prefix = _start(floe_factory, etcd, "SSL", settings)
    conf = _client_conf(pki)
    bootstrap = _bootstrap(brokers)
    topic = unique_topic("mtls")
    _create(bootstrap, conf, topic)
    wait_until(lambda: (_state(etcd, prefix, topic) or {}).get("leader", -1) > 0, timeout=30, interval=0.2, what="a leader")
    values = [f"m{i}".encode() for i in range(500)]
    produce_all(bootstrap, topic, [{"value": v} for v in values], **conf)
    wait_until(lambda: _replicas_equal(brokers, topic), timeout=30, interval=0.2,
               what="every replica to hold the leader's bytes")
    assert sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2, 3]
