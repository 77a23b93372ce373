"""Brokers that talk to each other over TLS and SASL: three brokers and one etcd,
every broker with a single secured listener that is also its inter-broker
listener, so replica fetchers and transaction markers must speak it.

What is checked, on real processes, real sockets and real clients:

- SASL_SSL with SCRAM-SHA-512 between brokers, ACLs on and the brokers' user in
  `super.users`: the inter-broker user is created through the Admin API after the
  brokers start (the fetchers retry until it exists), an RF 3 topic with
  `min.insync.replicas=2` takes N records from an `acks=all` producer, every
  replica ends with the leader's bytes and all three stay in the ISR; after kill -9
  of the leader the new leader serves every record; one transaction across
  partitions led by different brokers commits (its markers go over SASL_SSL);
  no broker logs the inter-broker password;
- a broker whose inter-broker password is wrong never gets in: the ISR shrinks to
  the two others and stays there, acks=all writes go on (min ISR 2), its log
  says SASL authentication failed (naming the mechanism) and it retries with
  backoff rather than spinning;
- SSL alone with `ssl.client.auth=required`: followers present the broker
  certificate and verify the leader's against the truststore and its host name.
"""

from __future__ import annotations

import time
import uuid

import pytest
from cluster_rig import SESSION_TIMEOUT_MS, agreed_view, etcd, node_id  # noqa: F401 (fixture)
from clients import CLIENT_TIMEOUT_S, consume_range, produce_all, unique_topic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from floe_process import wait_until
from tls_certs import make_pki

ADMIN = ("admin", "admin-secret")
BROKER_USER = "broker"
BROKER_PASSWORD = "inter-broker-Pa55"
N = 3000


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def _jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


def _sasl_ssl_settings(pki, users_file) -> dict:
    """Every broker's settings but its listener (`_start` adds it) and JAAS login."""
    return {
        "ssl.certificate.location": str(pki.broker.cert),
        "ssl.key.location": str(pki.broker.key),
        "ssl.truststore.location": str(pki.ca.cert),
        "floe.sasl.plain.users.file": str(users_file),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN[0]};User:{BROKER_USER}",
        "replica.fetch.backoff.ms": "300",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    }


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


def _client_conf(pki, protocol: str = "SASL_SSL") -> dict:
    conf = {"security.protocol": protocol, "ssl.ca.location": str(pki.ca.cert)}
    if protocol == "SASL_SSL":
        conf.update({"sasl.mechanism": "PLAIN", "sasl.username": ADMIN[0], "sasl.password": ADMIN[1]})
    else:
        # The listener asks for client certificates.
        conf.update({"ssl.certificate.location": str(pki.client.cert), "ssl.key.location": str(pki.client.key)})
    return conf


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _state(etcd, prefix: str, topic: str, p: int = 0) -> dict | None:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _create(bootstrap: str, conf: dict, topic: str, partitions: int = 1, assignment=None):
    a = AdminClient({"bootstrap.servers": bootstrap, **conf})
    new = (NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config={"min.insync.replicas": "2"}) if assignment
           else NewTopic(topic, num_partitions=partitions, replication_factor=3, config={"min.insync.replicas": "2"}))
    a.create_topics([new], request_timeout=15)[topic].result(timeout=20)


def _metadata_isr(bootstrap: str, conf: dict, topic: str, p: int = 0) -> list[int] | None:
    md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or p not in t.partitions:
        return None
    return sorted(t.partitions[p].isrs)


def _log_bytes(b, topic: str, p: int = 0) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(b.partition_dir(topic, p).glob("*.log")))


def _replicas_equal(brokers, topic: str) -> bool:
    logs = {_log_bytes(b, topic) for b in brokers}
    return len(logs) == 1 and logs != {b""}


def _own_log(b) -> str:
    """The broker's own log lines (not the harness's command line, which holds the overrides)."""
    return "\n".join(line for line in b.stderr_text(limit=2_000_000).splitlines() if not line.startswith("====="))


def _users_file(tmp_path):
    f = tmp_path / "plain-users"
    f.write_text(f"{ADMIN[0]}:{ADMIN[1]}\n")
    return f


def _add_broker_user(bootstrap: str, conf: dict):
    a = AdminClient({"bootstrap.servers": bootstrap, **conf})
    up = UserScramCredentialUpsertion(BROKER_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), BROKER_PASSWORD.encode())
    for f in a.alter_user_scram_credentials([up]).values():
        f.result(timeout=15)


def _one_transaction(bootstrap: str, conf: dict, topic: str, partitions: int) -> list[str]:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "secured-txn", "linger.ms": 5, **conf})
    p.init_transactions(CLIENT_TIMEOUT_S)
    p.begin_transaction()
    values = [f"txn-{part}-{i}" for part in range(partitions) for i in range(5)]
    for v in values:
        p.produce(topic, value=v.encode(), partition=int(v.split("-")[1]))
    assert p.flush(CLIENT_TIMEOUT_S) == 0
    p.commit_transaction(CLIENT_TIMEOUT_S)
    return values


def _read_committed(bootstrap: str, conf: dict, topic: str, partitions: int, expect: int) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "secured-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 100, **conf})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[str] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(num_messages=100, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m.value().decode())
        return out
    finally:
        c.close()


def test_sasl_ssl_scram_between_brokers(floe_factory, etcd, pki, tmp_path):
    settings = {**_sasl_ssl_settings(pki, _users_file(tmp_path)),
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(BROKER_USER, BROKER_PASSWORD)}
    brokers, prefix = _start(floe_factory, etcd, "SASL_SSL", settings)
    conf = _client_conf(pki)
    bootstrap = _bootstrap(brokers)
    # As with Kafka's SCRAM, the brokers' own user is created once the cluster is up
    # (here by the PLAIN admin); fetchers retry their login until it exists.
    _add_broker_user(bootstrap, conf)

    topic = unique_topic("secured")
    _create(bootstrap, conf, topic)
    wait_until(lambda: (_state(etcd, prefix, topic) or {}).get("leader", -1) > 0, timeout=30, interval=0.2, what="a leader")
    values = [f"v{i:05d}".encode() for i in range(N)]
    offsets = produce_all(bootstrap, topic, [{"value": v} for v in values], **conf)
    assert offsets == list(range(N))

    # Every follower fetched it all over SASL_SSL: the same bytes on every broker, and all in the ISR.
    leader = _state(etcd, prefix, topic)["leader"]
    wait_until(lambda: _replicas_equal(brokers, topic), timeout=30, interval=0.2,
               what="every replica to hold the leader's bytes")
    assert sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2, 3]
    assert _metadata_isr(bootstrap, conf, topic) == [1, 2, 3]
    for b in brokers:
        if node_id(b) != leader:
            assert "replica fetcher connected to the leader" in _own_log(b)
            assert b.metric("floe_replica_fetch_errors_total", error="tls") == 0

    # One transaction over partitions led by every broker: markers to the others go over SASL_SSL.
    spread = unique_topic("secured-txn")
    _create(bootstrap, conf, spread, partitions=3)
    wait_until(lambda: all((_state(etcd, prefix, spread, p) or {}).get("leader", -1) > 0 for p in range(3)),
               timeout=30, interval=0.2, what="leaders of the transactional topic")
    committed = _one_transaction(bootstrap, conf, spread, 3)
    assert sorted(_read_committed(bootstrap, conf, spread, 3, len(committed))) == sorted(committed)
    coordinator = _state(etcd, prefix, "__transaction_state")["leader"]
    led_elsewhere = {_state(etcd, prefix, spread, p)["leader"] for p in range(3)} - {coordinator}
    assert led_elsewhere, "some partition is led by another broker than the coordinator"
    for nid in led_elsewhere:
        assert _by_id(brokers, nid).metric("floe_requests_total", api="WriteTxnMarkers") >= 1, f"broker {nid} got no markers"

    # kill -9 the leader: the new one (a follower until now) has every record.
    _by_id(brokers, leader).kill9()
    survivors = [b for b in brokers if node_id(b) != leader]
    wait_until(lambda: (_state(etcd, prefix, topic) or {}).get("leader") not in (leader, -1, None), timeout=30,
               interval=0.2, what="a new leader")
    got = consume_range(_bootstrap(survivors), topic, 0, N, **conf)
    assert [m.value() for m in got] == values, "nothing lost, nothing reordered"

    for b in brokers:
        assert BROKER_PASSWORD not in _own_log(b), f"broker {node_id(b)} logged the inter-broker password"


def test_wrong_inter_broker_password_keeps_the_broker_out_of_the_isr(floe_factory, etcd, pki, tmp_path):
    settings = {**_sasl_ssl_settings(pki, _users_file(tmp_path)), "replica.lag.time.max.ms": "2000"}
    wrong = "not-the-password"
    jaas = lambda nid: {"sasl.jaas.config": _jaas(BROKER_USER, wrong if nid == 3 else BROKER_PASSWORD)}  # noqa: E731
    brokers, prefix = _start(floe_factory, etcd, "SASL_SSL", settings, per_broker=jaas)
    conf = _client_conf(pki)
    bootstrap = _bootstrap(brokers)
    _add_broker_user(bootstrap, conf)
    topic = unique_topic("locked-out")
    _create(bootstrap, conf, topic, assignment=[[1, 2, 3]])
    wait_until(lambda: (_state(etcd, prefix, topic) or {}).get("leader") == 1, timeout=30, interval=0.2, what="broker 1 to lead")

    # Broker 3 cannot log in: the leader drops it from the ISR, and acks=all goes on with two.
    wait_until(lambda: sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2], timeout=30, interval=0.2,
               what="the ISR to shrink to the brokers that can log in")
    produce_all(bootstrap, topic, [{"value": f"x{i}".encode()} for i in range(100)], **conf)
    before = _by_id(brokers, 3).metric("floe_replica_fetch_errors_total", error="authentication")
    time.sleep(3)
    assert sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2], "broker 3 never gets back in"
    assert _metadata_isr(bootstrap, conf, topic) == [1, 2]
    assert not list(_by_id(brokers, 3).partition_dir(topic, 0).glob("*.log")) or _log_bytes(_by_id(brokers, 3), topic) == b""

    log = _own_log(_by_id(brokers, 3))
    assert "SASL authentication failed" in log and "SCRAM-SHA-512" in log, log[-3000:]
    assert wrong not in log and BROKER_PASSWORD not in log
    # Retried with the backoff (300 ms), not in a tight loop.
    after = _by_id(brokers, 3).metric("floe_replica_fetch_errors_total", error="authentication")
    assert 1 <= after - before <= 3 / 0.3 + 2, (before, after)


def test_ssl_between_brokers_with_client_certificates(floe_factory, etcd, pki, tmp_path):
    settings = {
        "ssl.certificate.location": str(pki.broker.cert),
        "ssl.key.location": str(pki.broker.key),
        "ssl.truststore.location": str(pki.ca.cert),
        "ssl.client.auth": "required",
        "replica.fetch.backoff.ms": "300",
    }
    brokers, prefix = _start(floe_factory, etcd, "SSL", settings)
    conf = _client_conf(pki, "SSL")
    bootstrap = _bootstrap(brokers)
    topic = unique_topic("mtls")
    _create(bootstrap, conf, topic)
    wait_until(lambda: (_state(etcd, prefix, topic) or {}).get("leader", -1) > 0, timeout=30, interval=0.2, what="a leader")
    values = [f"m{i}".encode() for i in range(500)]
    produce_all(bootstrap, topic, [{"value": v} for v in values], **conf)
    wait_until(lambda: _replicas_equal(brokers, topic), timeout=30, interval=0.2,
               what="every replica to hold the leader's bytes")
    assert sorted(_state(etcd, prefix, topic)["isr"]) == [1, 2, 3]
