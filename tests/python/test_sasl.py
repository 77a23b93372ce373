"""SASL: PLAIN and SCRAM-SHA-256/512 on SASL_PLAINTEXT and SASL_SSL listeners with
real clients; SCRAM users created and described through the Admin API, stored
salted and hashed, kept across restarts; wrong passwords and unauthenticated
requests refused cleanly while others are served; KIP-368 session lifetimes."""

from __future__ import annotations

import json
import struct
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic
from floe_process import free_port, wait_until
from tls_certs import make_pki

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
PLAIN_ADMIN = ("admin", "admin-secret:with-colon")


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def sasl_broker(floe_factory, pki, tmp_path, name="floe", extra: dict | None = None, start=True):
    """PLAINTEXT on `.port` (for administration), SASL_PLAINTEXT on `.sasl_port`,
    SASL_SSL on `.sasl_ssl_port`; `admin` is a PLAIN user from the users file."""
    proc = floe_factory(name, start=False)
    proc.sasl_port, proc.sasl_ssl_port = free_port(), free_port()
    listeners = (f"PLAINTEXT://127.0.0.1:{proc.port},SASL_PLAINTEXT://127.0.0.1:{proc.sasl_port},"
                 f"SASL_SSL://127.0.0.1:{proc.sasl_ssl_port}")
    users = tmp_path / f"{name}-plain-users"
    users.write_text(f"# PLAIN users\n{PLAIN_ADMIN[0]}:{PLAIN_ADMIN[1]}\n")
    proc.overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "ssl.certificate.location": str(pki.server.cert),
        "ssl.key.location": str(pki.server.key),
        "floe.sasl.plain.users.file": str(users),
        **(extra or {}),
    }
    if start:
        proc.start()
    return proc


def add_scram_user(bootstrap: str, user: str, password: str, mechanisms=(ScramMechanism.SCRAM_SHA_256,
                                                                        ScramMechanism.SCRAM_SHA_512)):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 4096), password.encode()) for m in mechanisms]
    for fut in admin.alter_user_scram_credentials(ups).values():
        fut.result(timeout=15)


def sasl_conf(protocol: str, mechanism: str, user: str, password: str, pki) -> dict:
    conf = {"security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(pki.ca.cert)
    return conf


def bootstrap_for(floe, protocol: str) -> str:
    return f"127.0.0.1:{floe.sasl_port if protocol == 'SASL_PLAINTEXT' else floe.sasl_ssl_port}"


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_plain_and_scram(floe_factory, pki, tmp_path, protocol):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    topic = create_topic(floe.bootstrap, unique_topic("sasl"))
    bootstrap = bootstrap_for(floe, protocol)
    logins = [("PLAIN", *PLAIN_ADMIN), ("PLAIN", "alice", "alice-pw"),
              ("SCRAM-SHA-256", "alice", "alice-pw"), ("SCRAM-SHA-512", "alice", "alice-pw")]
    for i, (mechanism, user, password) in enumerate(logins):
        conf = sasl_conf(protocol, mechanism, user, password, pki)
        msgs = [{"value": f"{mechanism}-{user}-{j}".encode()} for j in range(20)]
        assert produce_all(bootstrap, topic, msgs, **conf) == list(range(20 * i, 20 * (i + 1)))
        got = consume_range(bootstrap, topic, 20 * i, 20, **conf)
        assert [m.value() for m in got] == [m["value"] for m in msgs], (mechanism, user)
    assert floe.metric("floe_requests_total", api="SaslAuthenticate") >= 8
    # Metadata on a SASL listener advertises that listener.
    md = AdminClient({"bootstrap.servers": bootstrap, **sasl_conf(protocol, "SCRAM-SHA-512", "alice", "alice-pw", pki)}) \
        .list_topics(timeout=15)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", int(bootstrap.split(":")[1]))]


def test_scram_credentials_are_described_hashed_and_survive_restart(floe_factory, pki, tmp_path):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "bob", "bob-very-secret", mechanisms=(ScramMechanism.SCRAM_SHA_512,))
    add_scram_user(floe.bootstrap, "carol", "carol-pw", mechanisms=(ScramMechanism.SCRAM_SHA_256,))
    admin = AdminClient({"bootstrap.servers": floe.bootstrap})
    described = {user: fut.result(timeout=15) for user, fut in
                 admin.describe_user_scram_credentials(["bob", "carol"]).items()}
    assert [(i.mechanism, i.iterations) for i in described["bob"].scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_512, 4096)]
    assert [(i.mechanism, i.iterations) for i in described["carol"].scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_256, 4096)]

    stored = (floe.data_dir / "scram-credentials.json").read_text()
    assert "bob-very-secret" not in stored and "carol-pw" not in stored
    assert set(json.loads(stored)["users"]["bob"]["Sha512"]) == {"salt", "iterations", "stored_key", "server_key"}

    floe.restart()
    topic = create_topic(floe.bootstrap, unique_topic("restart"))
    conf = sasl_conf("SASL_SSL", "SCRAM-SHA-512", "bob", "bob-very-secret", pki)
    assert produce_all(bootstrap_for(floe, "SASL_SSL"), topic, [{"value": b"after restart"}], **conf) == [0]

    # Deleting carol's credential: she can no longer log in.
    fs = admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)])
    for fut in fs.values():
        fut.result(timeout=15)
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap_for(floe, "SASL_PLAINTEXT"),
                     **sasl_conf("SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-pw", pki)}).list_topics(timeout=5)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_is_refused_cleanly_and_others_are_served(floe_factory, pki, tmp_path, mechanism):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    bootstrap = bootstrap_for(floe, "SASL_SSL")
    bad = AdminClient({"bootstrap.servers": bootstrap, **sasl_conf("SASL_SSL", mechanism, "alice", "wrong", pki)})
    # librdkafka reports the refusal to its error callback; list_topics only sees a transport failure.
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=5)
    wait_until(lambda: floe.metric("floe_connections_closed_on_error_total", reason="authentication_failed") >= 1,
               timeout=10, what="failed authentication counted")
    log = floe.stderr_text()
    assert "SASL authentication failed" in log
    assert "panicked" not in log
    good = AdminClient({"bootstrap.servers": bootstrap, **sasl_conf("SASL_SSL", mechanism, "alice", "alice-pw", pki)})
    assert len(good.list_topics(timeout=15).brokers) == 1
    assert floe.running


def raw_handshake(conn, mechanism: str):
    body = conn.call(API_SASL_HANDSHAKE, 1, kwire.string(mechanism))
    (err,) = struct.unpack_from(">h", body, 0)
    return err


def raw_authenticate(conn, token: bytes):
    """SaslAuthenticate v1 → (error code, auth bytes, session lifetime ms)."""
    r = kwire.Reader(conn.call(API_SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token))
    err = r.i16()
    r.string()
    auth = r.bytes_()
    return err, auth, r.i64()


def test_requests_before_authentication_close_the_connection(floe_factory, pki, tmp_path):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    with kwire.KafkaConn("127.0.0.1", floe.sasl_port) as conn:
        # ApiVersions is allowed before authenticating...
        err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
        assert err == 0 and API_SASL_AUTHENTICATE in apis
        # ...Metadata is not.
        conn.send_raw(conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        assert conn.closed_by_peer(timeout=10)
    assert floe.metric("floe_connections_closed_on_error_total", reason="unauthenticated_request") == 1
    with kwire.KafkaConn("127.0.0.1", floe.sasl_port) as conn:
        # A mechanism the listener does not offer.
        assert raw_handshake(conn, "GSSAPI") == 33  # UNSUPPORTED_SASL_MECHANISM
        assert conn.closed_by_peer(timeout=10)
    with kwire.KafkaConn("127.0.0.1", floe.port) as conn:
        brokers, _ = kwire.parse_metadata_v1(conn.call(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        assert brokers


def test_kip_368_session_lifetime_and_reauthentication(floe_factory, pki, tmp_path):
    floe = sasl_broker(floe_factory, pki, tmp_path, extra={"connections.max.reauth.ms": "1500"})
    token = b"\0" + PLAIN_ADMIN[0].encode() + b"\0" + PLAIN_ADMIN[1].encode()
    with kwire.KafkaConn("127.0.0.1", floe.sasl_port) as conn:
        assert raw_handshake(conn, "PLAIN") == 0
        err, _, lifetime = raw_authenticate(conn, token)
        assert (err, lifetime) == (0, 1500)
        brokers, _ = kwire.parse_metadata_v1(conn.call(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        assert brokers
        # Re-authenticating on the same connection extends the session.
        time.sleep(1.0)
        assert raw_handshake(conn, "PLAIN") == 0
        assert raw_authenticate(conn, token)[0] == 0
        time.sleep(1.0)
        kwire.parse_metadata_v1(conn.call(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        # Without re-authentication the session expires and the next request closes the connection.
        time.sleep(1.7)
        conn.send_raw(conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        assert conn.closed_by_peer(timeout=10)
    assert floe.metric("floe_connections_closed_on_error_total", reason="authentication_expired") == 1

    # librdkafka re-authenticates by itself (KIP-368) and keeps working past several lifetimes.
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    topic = create_topic(floe.bootstrap, unique_topic("reauth"))
    conf = sasl_conf("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "alice-pw", pki)
    bootstrap = bootstrap_for(floe, "SASL_PLAINTEXT")
    from clients import producer
    p = producer(bootstrap, **conf)
    for i in range(8):
        p.produce(topic, value=f"v{i}".encode())
        assert p.flush(15) == 0
        time.sleep(0.5)
    assert [m.value() for m in consume_range(bootstrap, topic, 0, 8, **conf)] == [f"v{i}".encode() for i in range(8)]


def test_kafka_python_over_sasl_ssl(floe_factory, pki, tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    topic = create_topic(floe.bootstrap, unique_topic("kpy-sasl"))
    common = dict(bootstrap_servers=bootstrap_for(floe, "SASL_SSL"), security_protocol="SASL_SSL",
                  ssl_cafile=str(pki.ca.cert), sasl_plain_username="alice", sasl_plain_password="alice-pw")
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        p = KafkaProducer(sasl_mechanism=mechanism, **common)
        for i in range(5):
            p.send(topic, value=f"{mechanism}-{i}".encode()).get(timeout=30)
        p.close()
    c = KafkaConsumer(sasl_mechanism="SCRAM-SHA-512", enable_auto_commit=False, consumer_timeout_ms=10000, **common)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = [m.value for _, m in zip(range(15), c)]
    c.close()
    assert got == [f"{m}-{i}".encode() for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") for i in range(5)]
