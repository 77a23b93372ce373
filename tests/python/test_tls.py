"""TLS listeners: real clients over SSL next to a PLAINTEXT listener, byte-identical
fetches, clean refusals (plaintext client on the TLS port, untrusted or expired
certificates), certificate reload on SIGHUP, and kernel TLS: on a kernel with
kTLS, TLS 1.3 fetches must go out with sendfile (`sendfile-ktls`) and TLS 1.2
sessions stay in user space; on a kernel without it, the same tests prove the
copying fallback (`copy-tls`).

Certificates come from a CA the test generates (tls_certs.py)."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic
from floe_process import free_port, wait_until
from test_zero_copy import fetch_requests, fetch_requests_v12, produce_sample
from tls_certs import make_pki

TCP_ULP = 31


def _kernel_takes_tls_ulp() -> bool:
    """The broker's own probe: setsockopt(TCP_ULP, "tls") on a connected loopback
    socket (which also loads the module where it exists but is not listed)."""
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            try:
                client.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
                return True
            except OSError:
                return False


KTLS_IN_KERNEL = _kernel_takes_tls_ulp()
# Where fetches on a TLS listener go: sendfile on a kTLS socket, or the copying path.
TLS_FETCH_PATH = "sendfile-ktls" if KTLS_IN_KERNEL else "copy-tls"


@pytest.fixture
def pki(tmp_path):
    return make_pki(tmp_path / "pki")


def tls_broker(floe_factory, pki, name="floe", extra: dict | None = None, start=True):
    """A broker with PLAINTEXT on `.port` and SSL on `.ssl_port` (both advertised as bound)."""
    proc = floe_factory(name, start=False)
    proc.ssl_port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{proc.port},SSL://127.0.0.1:{proc.ssl_port}"
    proc.overrides = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "ssl.certificate.location": str(pki.server.cert),
        "ssl.key.location": str(pki.server.key),
        **(extra or {}),
    }
    if start:
        proc.start()
    return proc


def ssl_conf(pki, ca=None, client=None) -> dict:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(ca or pki.ca.cert)}
    if client is not None:
        conf["ssl.certificate.location"] = str(client.cert)
        conf["ssl.key.location"] = str(client.key)
    return conf


def ssl_context(pki, client=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def brokers_seen(bootstrap: str, conf: dict) -> dict:
    md = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=15)
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def test_confluent_produce_consume_over_ssl_and_metadata_per_listener(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    ssl_bootstrap = f"127.0.0.1:{floe.ssl_port}"
    conf = ssl_conf(pki)

    # Metadata answers with the address of the listener the client came through.
    assert brokers_seen(ssl_bootstrap, conf) == {1: ("127.0.0.1", floe.ssl_port)}
    assert brokers_seen(floe.bootstrap, {}) == {1: ("127.0.0.1", floe.port)}

    topic = create_topic(floe.bootstrap, unique_topic("tls"))
    msgs = [{"key": f"k{i}".encode(), "value": f"secret-{i}".encode() * 20} for i in range(500)]
    offsets = produce_all(ssl_bootstrap, topic, msgs, **conf)
    assert offsets == list(range(500))
    got = consume_range(ssl_bootstrap, topic, 0, 500, **conf)
    assert [(m.key(), m.value()) for m in got] == [(m["key"], m["value"]) for m in msgs]
    # The same records over the plaintext listener of the same broker.
    assert [m.value() for m in consume_range(floe.bootstrap, topic, 0, 500)] == [m["value"] for m in msgs]

    # TLS fetches took sendfile on kTLS where the kernel has it, else the copying path;
    # the plaintext one sendfile.
    other_tls_path = "copy-tls" if KTLS_IN_KERNEL else "sendfile-ktls"
    assert floe.metric("floe_fetch_bytes_total", path=TLS_FETCH_PATH) >= sum(len(m["value"]) for m in msgs)
    assert floe.metric("floe_fetch_bytes_total", path=other_tls_path) == 0
    assert floe.metric("floe_fetch_bytes_total", path="sendfile-plaintext") > 0
    assert floe.metric("floe_connections_accepted_total", listener="SSL", protocol="SSL") > 0


def test_kcat_over_ssl(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    topic = create_topic(floe.bootstrap, unique_topic("kcat-tls"))
    ssl_args = ["-b", f"127.0.0.1:{floe.ssl_port}", "-X", "security.protocol=SSL",
                "-X", f"ssl.ca.location={pki.ca.cert}"]
    lines = "".join(f"k{i}:v{i}\n" for i in range(50))
    subprocess.run(["kcat", *ssl_args, "-P", "-t", topic, "-K:"], input=lines.encode(), check=True, timeout=60)
    out = subprocess.run(["kcat", *ssl_args, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\\n"],
                         capture_output=True, check=True, timeout=60).stdout.decode()
    assert out.splitlines() == [f"{i} k{i} v{i}" for i in range(50)]
    listing = subprocess.run(["kcat", *ssl_args, "-L", "-t", topic], capture_output=True, check=True,
                             timeout=60).stdout.decode()
    assert f"127.0.0.1:{floe.ssl_port}" in listing


def test_fetch_over_tls_is_byte_identical_to_plaintext(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    topic = create_topic(floe.bootstrap, unique_topic("tls-ident"), partitions=2)
    produce_sample(floe, topic, n=1000, size=150)
    produce_all(floe.bootstrap, topic, [{"key": f"p1-{i}".encode(), "value": b"q" * (i % 300)} for i in range(300)],
                partition=1, **{"compression.type": "gzip"})

    responses = {}
    for name, port, ctx in (("plain", floe.port, None), ("tls", floe.ssl_port, ssl_context(pki))):
        with kwire.KafkaConn("127.0.0.1", port, ssl_context=ctx) as conn:
            out = {}
            for req_name, body in fetch_requests(topic, 1000).items():
                out[req_name] = conn.call_raw(kwire.API_FETCH, 4, body)
            for req_name, body in fetch_requests_v12(topic, 1000).items():
                out[req_name] = conn.call_raw(kwire.API_FETCH, 12, body, flexible_header=True)
            responses[name] = out
    for req_name, plain in responses["plain"].items():
        assert responses["tls"][req_name] == plain, f"{req_name}: TLS and plaintext responses differ"
    # Not vacuous: the full fetch carries every record.
    parts = kwire.parse_fetch_v4(responses["tls"]["all"][4:])
    assert sum(len(b.records) for b in kwire.decode_batches(parts[0].records)) == 1000
    assert floe.metric("floe_fetch_bytes_total", path=TLS_FETCH_PATH) > 0
    assert floe.metric("floe_fetch_bytes_total", path="sendfile-plaintext") > 0
    if KTLS_IN_KERNEL:
        assert floe.metric("floe_ktls_sessions_total", outcome="offloaded") > 0


def still_serves(floe, pki):
    """The broker answers a TLS client and a plaintext client."""
    with kwire.KafkaConn("127.0.0.1", floe.ssl_port, ssl_context=ssl_context(pki)) as conn:
        err, _ = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
        assert err == 0
    with kwire.KafkaConn("127.0.0.1", floe.port) as conn:
        err, _ = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
        assert err == 0


def test_plaintext_client_on_tls_port_is_refused_cleanly(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    with kwire.KafkaConn("127.0.0.1", floe.ssl_port) as conn:
        conn.send_raw(conn.request_frame(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
        assert conn.closed_by_peer(timeout=15), "broker kept a plaintext client on its TLS port open"
    wait_until(lambda: floe.metric("floe_connections_closed_on_error_total", reason="tls_handshake_failed") >= 1,
               timeout=10, what="tls_handshake_failed counted")
    assert "TLS handshake failed" in floe.stderr_text()
    still_serves(floe, pki)
    assert floe.running


def test_client_distrusting_the_broker_certificate_fails_and_others_are_served(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    bootstrap = f"127.0.0.1:{floe.ssl_port}"
    # A client that trusts another CA cannot get metadata...
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap, **ssl_conf(pki, ca=pki.rogue_ca.cert),
                     "socket.timeout.ms": 3000}).list_topics(timeout=5)
    # ...and Python's own TLS stack rejects the certificate too.
    ctx = ssl.create_default_context(cafile=str(pki.rogue_ca.cert))
    with socket.create_connection(("127.0.0.1", floe.ssl_port), timeout=10) as s:
        with pytest.raises(ssl.SSLCertVerificationError):
            ctx.wrap_socket(s, server_hostname="127.0.0.1")
    still_serves(floe, pki)
    assert brokers_seen(bootstrap, ssl_conf(pki)) == {1: ("127.0.0.1", floe.ssl_port)}


def test_client_certificates_required(floe_factory, pki):
    floe = tls_broker(floe_factory, pki, extra={"ssl.client.auth": "required",
                                                "ssl.truststore.location": str(pki.ca.cert)})
    bootstrap = f"127.0.0.1:{floe.ssl_port}"
    assert brokers_seen(bootstrap, ssl_conf(pki, client=pki.client)) == {1: ("127.0.0.1", floe.ssl_port)}

    def refused(ctx) -> bool:
        """The broker ends the session during or right after the handshake (TLS 1.3
        clients learn of a rejected certificate on their first read)."""
        try:
            with kwire.KafkaConn("127.0.0.1", floe.ssl_port, ssl_context=ctx) as conn:
                conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0())
        except (ssl.SSLError, ConnectionError, OSError):
            return True
        return False

    assert refused(ssl_context(pki)), "a client without a certificate was served"
    assert refused(ssl_context(pki, client=pki.expired_client)), "an expired client certificate was accepted"
    rogue_client = ssl_context(pki)
    rogue_client.load_cert_chain(str(pki.rogue_server.cert), str(pki.rogue_server.key))
    assert refused(rogue_client), "a client certificate from an unknown CA was accepted"
    assert floe.metric("floe_connections_closed_on_error_total", reason="tls_handshake_failed") >= 3
    with kwire.KafkaConn("127.0.0.1", floe.ssl_port, ssl_context=ssl_context(pki, client=pki.client)) as conn:
        err, _ = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
        assert err == 0


def peer_serial(port: int, pki) -> int:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            from cryptography import x509
            return x509.load_der_x509_certificate(t.getpeercert(binary_form=True)).serial_number


def test_sighup_reloads_the_certificate_without_dropping_connections(floe_factory, pki, tmp_path):
    from tls_certs import make_leaf
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    # The broker reads copies, so the test can replace them.
    live_cert, live_key = tmp_path / "live.crt", tmp_path / "live.key"
    live_cert.write_bytes(pki.server.cert.read_bytes())
    live_key.write_bytes(pki.server.key.read_bytes())
    floe = tls_broker(floe_factory, pki, extra={"ssl.certificate.location": str(live_cert),
                                                "ssl.key.location": str(live_key)})
    assert peer_serial(floe.ssl_port, pki) == pki.server.serial
    old = kwire.KafkaConn("127.0.0.1", floe.ssl_port, ssl_context=ssl_context(pki))
    assert kwire.parse_api_versions_v0(old.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))[0] == 0

    # A new server certificate from the same CA.
    ca_cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    renewed = make_leaf(tmp_path / "renewed", "127.0.0.1", ca_cert, ca_key, server=True)
    # A broken file first: the reload fails, the broker keeps the old certificate.
    live_cert.write_text("not a certificate")
    floe.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "TLS reload failed" in floe.stderr_text(), timeout=10, what="failed reload logged")
    assert peer_serial(floe.ssl_port, pki) == pki.server.serial

    live_cert.write_bytes(renewed.cert.read_bytes())
    live_key.write_bytes(renewed.key.read_bytes())
    floe.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: peer_serial(floe.ssl_port, pki) == renewed.serial, timeout=10, what="renewed certificate served")
    # The connection opened before the reload still works.
    assert kwire.parse_api_versions_v0(old.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))[0] == 0
    old.close()
    assert floe.running


def test_ssl_listener_without_certificate_refuses_to_start(floe_factory, pki):
    floe = tls_broker(floe_factory, pki, start=False)
    del floe.overrides["ssl.certificate.location"]
    with pytest.raises(Exception) as e:
        floe.start()
    assert "ssl.certificate.location" in str(e.value)


@pytest.mark.skipif(KTLS_IN_KERNEL, reason="this kernel has kTLS: the fallback cannot be observed")
def test_ktls_missing_is_detected_and_tls_fetches_copy(floe_factory, pki):
    floe = tls_broker(floe_factory, pki)
    assert floe.metric("floe_ktls_enabled") == 0
    assert "kernel TLS unavailable" in floe.stderr_text()
    topic = create_topic(floe.bootstrap, unique_topic("ktls"))
    produce_sample(floe, topic, n=100, size=100)
    got = consume_range(f"127.0.0.1:{floe.ssl_port}", topic, 0, 100, **ssl_conf(pki))
    assert len(got) == 100
    assert floe.metric("floe_fetch_bytes_total", path="copy-tls") >= 100 * 100
    assert floe.metric("floe_fetch_bytes_total", path="sendfile-ktls") == 0
    floe.stop()

    # Forcing kTLS on such a kernel is refused at startup with a clear message.
    forced = tls_broker(floe_factory, pki, name="forced", extra={"floe.ssl.ktls": "on"}, start=False)
    with pytest.raises(Exception) as e:
        forced.start()
    assert "floe.ssl.ktls=on" in str(e.value)


@pytest.mark.skipif(not KTLS_IN_KERNEL, reason="this kernel has no kTLS (the fallback test covers it)")
def test_ktls_offloads_tls13_keeps_tls12_in_user_space_and_can_be_switched_off(floe_factory, pki):
    """On a kTLS kernel: a TLS 1.3 session is handed to the kernel and its fetch goes
    out with sendfile; a TLS 1.2 session stays in rustls (copying path); both read the
    same bytes as plaintext; floe.ssl.ktls=off keeps every session in user space."""
    floe = tls_broker(floe_factory, pki)
    assert floe.metric("floe_ktls_enabled") == 1
    topic = create_topic(floe.bootstrap, unique_topic("ktls-on"))
    produce_sample(floe, topic, n=500, size=200)
    bodies = fetch_requests(topic, 500)
    with kwire.KafkaConn("127.0.0.1", floe.port) as conn:
        plain = conn.call_raw(kwire.API_FETCH, 4, bodies["all"])
    for version, path in ((ssl.TLSVersion.TLSv1_3, "sendfile-ktls"), (ssl.TLSVersion.TLSv1_2, "copy-tls")):
        ctx = ssl_context(pki)
        ctx.minimum_version = ctx.maximum_version = version
        before = floe.metric("floe_fetch_bytes_total", path=path)
        with kwire.KafkaConn("127.0.0.1", floe.ssl_port, ssl_context=ctx) as conn:
            for _ in range(3):  # several requests on one kTLS session
                assert conn.call_raw(kwire.API_FETCH, 4, bodies["all"]) == plain, version
        assert floe.metric("floe_fetch_bytes_total", path=path) >= before + 3 * 500 * 200, version
    assert floe.metric("floe_ktls_sessions_total", outcome="offloaded") >= 1
    assert floe.metric("floe_ktls_sessions_total", outcome="tls12") >= 1
    assert floe.metric("floe_ktls_sessions_total", outcome="failed") == 0
    floe.stop()

    off = tls_broker(floe_factory, pki, name="ktls-off", extra={"floe.ssl.ktls": "off"})
    assert off.metric("floe_ktls_enabled") == 0
    topic = create_topic(off.bootstrap, unique_topic("ktls-off"))
    produce_sample(off, topic, n=100, size=100)
    assert len(consume_range(f"127.0.0.1:{off.ssl_port}", topic, 0, 100, **ssl_conf(pki))) == 100
    assert off.metric("floe_fetch_bytes_total", path="sendfile-ktls") == 0
    assert off.metric("floe_fetch_bytes_total", path="copy-tls") >= 100 * 100
