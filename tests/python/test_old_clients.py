"""Older clients log in over SASL (issue #33): Debian's kcat 1.7.1 on librdkafka 2.0.2
produces and consumes over SASL_PLAINTEXT and SASL_SSL with PLAIN and SCRAM-SHA-256/512.

librdkafka 2.0.x turns SASL on only if ApiVersions lists SaslHandshake v0 (its
rdkafka_feature.c maps the SASL_HANDSHAKE feature to SaslHandshake 0..0; with Floe's
former 1..1 it said "SASL Handshake not supported by broker"), then uses v1 and
SaslAuthenticate. SaslHandshake v0 itself, followed by bare SASL tokens as Kafka 4.x
still serves it, is checked with raw frames and with kafka-python pinned to Kafka 0.10.
A SASL client pointed at a PLAINTEXT listener is told what the listener is and what to use."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

import kwire
from cli import floe_cli
from clients import create_topic, unique_topic
from test_sasl import PLAIN_ADMIN, add_scram_user, sasl_broker

API_SASL_HANDSHAKE = 17
TIMEOUT_S = 60


@pytest.fixture
def pki(tmp_path):
    from tls_certs import make_pki
    return make_pki(tmp_path / "pki")


def kcat(*args, input: bytes | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("kcat")
    assert exe, "kcat not installed (apt-get install kcat)"
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=TIMEOUT_S)


def kcat_login(protocol: str, mechanism: str, user: str, password: str, pki) -> list[str]:
    args = ["-X", f"security.protocol={protocol}", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    if protocol == "SASL_SSL":
        args += ["-X", f"ssl.ca.location={pki.ca.cert}"]
    return args


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kcat_produces_and_consumes_over_sasl(floe_factory, pki, tmp_path, protocol):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    port = floe.sasl_port if protocol == "SASL_PLAINTEXT" else floe.sasl_ssl_port
    bootstrap = f"127.0.0.1:{port}"
    logins = [("PLAIN", *PLAIN_ADMIN), ("SCRAM-SHA-256", "alice", "alice-pw"), ("SCRAM-SHA-512", "alice", "alice-pw")]
    for mechanism, user, password in logins:
        topic = create_topic(floe.bootstrap, unique_topic("kcat-sasl"))
        login = kcat_login(protocol, mechanism, user, password, pki)
        lines = [f"k{i}:{mechanism} record {i}" for i in range(50)]
        prod = kcat("-b", bootstrap, *login, "-P", "-t", topic, "-K", ":", input=("\n".join(lines) + "\n").encode())
        assert prod.returncode == 0, f"{protocol} {mechanism}: {prod.stderr.decode()}"
        cons = kcat("-b", bootstrap, *login, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\n")
        assert cons.returncode == 0, f"{protocol} {mechanism}: {cons.stderr.decode()}"
        assert cons.stdout.decode().splitlines() == [f"{i} k{i} {mechanism} record {i}" for i in range(50)], cons.stderr.decode()

    # A wrong password is refused, and kcat says so instead of hanging.
    bad = kcat("-b", bootstrap, *kcat_login(protocol, "SCRAM-SHA-256", "alice", "wrong", pki), "-L", "-m", "10")
    assert bad.returncode != 0
    assert "Authentication failed" in bad.stderr.decode() or "authentication" in bad.stderr.decode().lower(), bad.stderr.decode()


def handshake_v0(conn, mechanism: str) -> tuple[int, list[str]]:
    r = kwire.Reader(conn.call(API_SASL_HANDSHAKE, 0, kwire.string(mechanism)))
    err = r.i16()
    return err, r.array(lambda r: r.string())


def test_sasl_handshake_v0_then_bare_tokens(floe_factory, pki, tmp_path):
    """Kafka's v0 exchange: each token a 4-byte length and its bytes, answered the same way."""
    floe = sasl_broker(floe_factory, pki, tmp_path)
    token = b"\0" + PLAIN_ADMIN[0].encode() + b"\0" + PLAIN_ADMIN[1].encode()
    with kwire.KafkaConn("127.0.0.1", floe.sasl_port) as conn:
        err, mechanisms = handshake_v0(conn, "PLAIN")
        assert err == 0 and "PLAIN" in mechanisms
        conn.send_raw(struct.pack(">i", len(token)) + token)
        assert conn.recv_frame() == b""  # PLAIN's empty answer, framed
        brokers, _ = kwire.parse_metadata_v1(conn.call(kwire.API_METADATA, 1, kwire.metadata_v1(None)))
        assert brokers
    with kwire.KafkaConn("127.0.0.1", floe.sasl_port) as conn:
        assert handshake_v0(conn, "PLAIN")[0] == 0
        bad = b"\0admin\0wrong"
        conn.send_raw(struct.pack(">i", len(bad)) + bad)
        # No answer on v0 (Kafka sends none either): the connection is closed, after the
        # failed-authentication delay.
        conn.sock.settimeout(10)
        assert conn.sock.recv(4) == b""
    assert floe.metric("floe_connections_closed_on_error_total", reason="authentication_failed") == 1


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_as_a_kafka_0_10_client(floe_factory, pki, tmp_path, mechanism):
    """kafka-python told the broker is Kafka 0.10.1 logs in with SaslHandshake v0 and bare tokens."""
    from kafka import KafkaConsumer

    floe = sasl_broker(floe_factory, pki, tmp_path)
    add_scram_user(floe.bootstrap, "alice", "alice-pw")
    topic = create_topic(floe.bootstrap, unique_topic("kpy-v0"))
    user, password = PLAIN_ADMIN if mechanism == "PLAIN" else ("alice", "alice-pw")
    c = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{floe.sasl_port}", security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
                      api_version=(0, 10, 1), request_timeout_ms=20000)
    try:
        assert topic in c.topics()
    finally:
        c.close()
    assert f"user={user}" in floe.stderr_text() or user in floe.stderr_text()
    assert "SaslHandshake v0" in floe.stderr_text()


def test_sasl_client_on_a_plaintext_listener_is_told_which_listener_to_use(floe_factory, pki, tmp_path):
    floe = sasl_broker(floe_factory, pki, tmp_path)
    login = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN",
             "-X", f"sasl.username={PLAIN_ADMIN[0]}", "-X", f"sasl.password={PLAIN_ADMIN[1]}"]
    p = floe_cli(floe.bootstrap, "topic", "list", *login)
    assert p.returncode != 0
    assert "the listener offers )" not in p.stderr, p.stderr
    assert "PLAINTEXT listener, which offers no SASL mechanisms" in p.stderr, p.stderr
    assert "SASL_PLAINTEXT listener" in p.stderr, p.stderr
    # The same login on the SASL listener works.
    ok = floe_cli(f"127.0.0.1:{floe.sasl_port}", "topic", "list", *login)
    assert ok.returncode == 0, ok.stderr
    # The broker's log names its SASL listeners.
    assert f"SASL_PLAINTEXT://127.0.0.1:{floe.sasl_port}" in floe.stderr_text()
