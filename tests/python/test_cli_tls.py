"""The admin commands over TLS (issue #17 part 1: `-X` and `--profile` carry the
connection's security settings, with librdkafka's names): a trusted CA works,
checked by an independent client; a broker certificate from another CA and a
missing client certificate on a listener that requires one are refused with
exit code 3 and a message that says what to fix."""

from __future__ import annotations

from cli import floe_cli, floe_ok
from clients import admin, unique_topic
from test_tls import pki, tls_broker  # noqa: F401  (the pki fixture)


def test_commands_speak_tls_with_librdkafkas_properties(floe_factory, pki, tmp_path):  # noqa: F811
    floe = tls_broker(floe_factory, pki)
    ssl_bootstrap = f"127.0.0.1:{floe.ssl_port}"
    topic = unique_topic("tls")
    floe_ok(ssl_bootstrap, "topic", "create", topic, "--partitions", "2",
            "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca.cert}")
    assert len(admin(floe.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions) == 2

    profile = tmp_path / "tls.properties"
    profile.write_text(f"# as kcat -F takes it\nbootstrap.servers={ssl_bootstrap}\nsecurity.protocol=SSL\n"
                       f"ssl.ca.location={pki.ca.cert}\n")
    listed = floe_ok(None, "topic", "list", "--profile", str(profile))
    assert topic in listed

    rogue = floe_cli(ssl_bootstrap, "topic", "list", "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.rogue_ca.cert}")
    assert rogue.returncode == 3 and "TLS" in rogue.stderr, rogue.stderr
    plaintext_on_tls = floe_cli(ssl_bootstrap, "topic", "list", "--timeout-ms", "3000")
    assert plaintext_on_tls.returncode == 3, plaintext_on_tls.stderr
    no_ca = floe_cli(ssl_bootstrap, "topic", "list", "-X", "security.protocol=SSL")
    assert no_ca.returncode == 1 and "ssl.ca.location" in no_ca.stderr, no_ca.stderr


def test_a_listener_that_requires_client_certificates(floe_factory, pki):  # noqa: F811
    floe = tls_broker(floe_factory, pki, extra={"ssl.client.auth": "required", "ssl.truststore.location": str(pki.ca.cert)})
    ssl_bootstrap = f"127.0.0.1:{floe.ssl_port}"
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca.cert}"]
    refused = floe_cli(ssl_bootstrap, "topic", "list", *tls)
    assert refused.returncode == 3, refused.stderr
    ok = floe_cli(ssl_bootstrap, "cluster", "info", *tls,
                  "-X", f"ssl.certificate.location={pki.client.cert}", "-X", f"ssl.key.location={pki.client.key}")
    assert ok.returncode == 0 and "Cluster id" in ok.stdout, ok.stderr
