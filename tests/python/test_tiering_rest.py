"""Iceberg tiering through an external REST catalog (`floe.iceberg.catalog-type=rest`).

The catalog is `rest_catalog_server.py`: a writable Iceberg REST endpoint over
a pyiceberg SqlCatalog, requiring an OAuth2 client-credential exchange. Floe
creates the namespace and table and commits through it; the table is read
back through the same REST catalog with pyiceberg's RestCatalog client."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from clients import admin, create_topic, unique_topic, watermarks
from floe_process import floe_bin, free_port
from rest_catalog_server import RestCatalogServer
from s3_server import MotoS3
from tls_certs import make_pki
from test_tiering import TIERING, check, produce_codecs

pytest.importorskip("pyiceberg.catalog.rest")
from pyiceberg.catalog.rest import RestCatalog  # noqa: E402
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: E402

CLIENT_SECRET = "rest-secret-7d41e0"
CREDENTIAL = f"floe-client:{CLIENT_SECRET}"


def rest_settings(server_uri: str, credential: str = CREDENTIAL) -> dict:
    return {"floe.iceberg.catalog-type": "rest", "floe.iceberg.catalog-uri": server_uri,
            "floe.iceberg.rest.credential": credential}


def rest_rows(server: RestCatalogServer, topic: str):
    """(partition, offset) -> row and the row count, read through the REST catalog itself
    (pyiceberg's RestCatalog client, with the same OAuth2 credential)."""
    cat = RestCatalog("reader", uri=server.uri, credential=CREDENTIAL,
                      **{"oauth2-server-uri": f"{server.uri}/v1/oauth/tokens"}, **server.storage_props)
    try:
        table = cat.load_table(("kafka", topic))
    except (NoSuchTableError, NoSuchNamespaceError):  # not created yet
        return {}, 0
    rows = table.scan().to_arrow().to_pylist()
    return {(r["partition"], r["offset"]): r for r in rows}, len(rows)


def wait_for_rest_rows(server: RestCatalogServer, topic: str, expected: int, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        rows, n = rest_rows(server, topic)
        assert n == len(rows), f"duplicate rows: {n} rows for {len(rows)} offsets"
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows, n
        time.sleep(0.5)


@pytest.fixture
def rest_catalog(tmp_path):
    server = RestCatalogServer(tmp_path / "rest-catalog", credential=CREDENTIAL).start()
    yield server
    server.stop()


def test_rest_catalog_with_oauth2_credential(floe_factory, rest_catalog):
    floe = floe_factory("floe", overrides={**TIERING, **rest_settings(rest_catalog.uri)})
    topic = create_topic(floe.bootstrap, unique_topic("restice"), partitions=2,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
    produced = produce_codecs(floe.bootstrap, topic, 2, 60)
    rows, n = wait_for_rest_rows(rest_catalog, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)
    seen = {(m, p, s) for m, p, s in rest_catalog.requests}
    assert ("POST", "/v1/oauth/tokens", 200) in seen, "the credential was exchanged for a token"
    assert ("POST", f"/v1/namespaces/kafka/tables/{topic}", 200) in seen, "commits went through the REST API"
    assert not any(s == 401 for _, p, s in rest_catalog.requests if p != "/v1/oauth/tokens"), rest_catalog.requests
    # The data files are in the warehouse the catalog chose (floe was told none).
    assert list((rest_catalog.directory / "warehouse").rglob("*.parquet"))
    assert not (floe.data_dir / "iceberg").exists()

    # The credential is a secret: not in DescribeConfigs, the log, or status output.
    res = ConfigResource(ResourceType.BROKER, "1")
    a = admin(floe.bootstrap)  # kept alive until the future resolves
    entries = a.describe_configs([res])[res].result(timeout=30)
    assert entries["floe.iceberg.rest.credential"].is_sensitive
    assert entries["floe.iceberg.rest.credential"].value is None
    assert entries["floe.iceberg.catalog-type"].value == "rest"
    cmd = [floe_bin()] + [a for k, v in rest_settings(rest_catalog.uri).items() for a in ("--override", f"{k}={v}")]
    out = subprocess.run(cmd + ["iceberg", "status"], capture_output=True, text=True, timeout=60, check=True)
    assert f"table kafka.{topic}:" in out.stdout and f"rows {len(produced)}," in out.stdout, out
    # The broker's own lines (the harness's "=====" lines echo the command line, secret included).
    log = "\n".join(l for l in floe.stderr_text(limit=10_000_000).splitlines() if not l.startswith("====="))
    assert CLIENT_SECRET not in log + out.stdout + out.stderr

    # Restart: the committed offsets come back from the REST catalog; more data, still once.
    assert floe.restart() == 0
    produced.update(produce_codecs(floe.bootstrap, topic, 2, 10))
    rows, n = wait_for_rest_rows(rest_catalog, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)


def test_rest_catalog_unreachable_fails_loudly_retries_then_catches_up(floe_factory, tmp_path):
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    floe = floe_factory("floe", overrides={**TIERING, **rest_settings(uri), "floe.iceberg.target-lag-ms": "200",
                                           "log.retention.check.interval.ms": "200"})
    topic = create_topic(floe.bootstrap, unique_topic("restdown"),
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "3000", "retention.ms": "1"})
    produced = produce_codecs(floe.bootstrap, topic, 1, 20)
    # Nothing listens: the catalog cannot be opened; each retry is logged and counted.
    deadline = time.monotonic() + 30
    while floe.metric("floe_iceberg_errors_total", topic="(catalog)") < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert floe.metric("floe_iceberg_errors_total", topic="(catalog)") >= 2, "retried"
    metrics = floe.metrics_text()
    assert 'floe_iceberg_last_error{error="' in metrics and 'topic="(catalog)"' in metrics
    assert "cannot open the iceberg catalog" in floe.stderr_text(limit=10_000_000)
    status = subprocess.run([floe_bin(), "--override", "floe.iceberg.catalog-type=rest", "--override",
                             f"floe.iceberg.catalog-uri={uri}", "iceberg", "status"],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode != 0 and status.stderr.strip(), status
    # Retention kept every untiered offset meanwhile.
    assert watermarks(floe.bootstrap, topic, 0)[0] == 0
    # The catalog comes up on that address: tiering catches up, every offset once.
    server = RestCatalogServer(tmp_path / "late-catalog", port=port, credential=CREDENTIAL).start()
    try:
        rows, n = wait_for_rest_rows(server, topic, len(produced), timeout=120)
        check(rows, produced)
        assert n == len(produced)
    finally:
        server.stop()


def test_rest_catalog_with_s3_warehouse(floe_factory, tmp_path):
    """The REST catalog places the table on S3; floe writes there with its own S3 settings."""
    s3 = MotoS3(tmp_path / "moto.log").start()
    try:
        s3.client().create_bucket(Bucket="rest-lake")
        server = RestCatalogServer(tmp_path / "rest-s3", warehouse="s3://rest-lake/wh", credential=CREDENTIAL,
                                   **s3.pyiceberg_props()).start()
        try:
            s3_settings = {k: v for k, v in s3.floe_settings("").items() if k != "floe.iceberg.warehouse"}
            floe = floe_factory("floe", overrides={**TIERING, **rest_settings(server.uri), **s3_settings})
            topic = create_topic(floe.bootstrap, unique_topic("rests3"),
                                 config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
            produced = produce_codecs(floe.bootstrap, topic, 1, 40)
            rows, n = wait_for_rest_rows(server, topic, len(produced))
            check(rows, produced)
            assert n == len(produced)
            # pyiceberg's SqlCatalog places tables at WAREHOUSE/<namespace>.db/<table>.
            assert [k for k in s3.keys("rest-lake", "wh/") if f"/{topic}/data/" in k and k.endswith(".parquet")]
        finally:
            server.stop()
    finally:
        s3.stop()


def test_rest_catalog_over_https(floe_factory, tmp_path):
    """An https:// catalog: Floe verifies the server against the system roots
    (here the test CA, named by SSL_CERT_FILE, which rustls-native-certs reads)."""
    pki = make_pki(tmp_path / "pki")
    server = RestCatalogServer(tmp_path / "tls-catalog", credential=CREDENTIAL,
                               tls=(pki.server.cert, pki.server.key)).start()
    try:
        assert server.uri.startswith("https://")
        floe = floe_factory("floe", overrides={**TIERING, **rest_settings(server.uri)},
                            env={"SSL_CERT_FILE": str(pki.ca.cert)})
        topic = create_topic(floe.bootstrap, unique_topic("resttls"),
                             config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
        produced = produce_codecs(floe.bootstrap, topic, 1, 20)
        deadline = time.monotonic() + 90
        while True:
            # Read from the catalog's own database: pyiceberg's HTTP client does not read SSL_CERT_FILE.
            with server.lock:
                rows = rows_in_database(server, topic)
            if len(rows) >= len(produced) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        got = {(r["partition"], r["offset"]): r for r in rows}
        assert len(got) == len(rows)
        check(got, produced)
        assert ("POST", "/v1/oauth/tokens", 200) in server.requests
    finally:
        server.stop()

    # A catalog whose certificate does not chain to a trusted root is refused (and retried, logged).
    rogue = RestCatalogServer(tmp_path / "rogue-catalog", credential=CREDENTIAL,
                              tls=(pki.rogue_server.cert, pki.rogue_server.key)).start()
    try:
        floe2 = floe_factory("floe2", overrides={**TIERING, **rest_settings(rogue.uri)},
                             env={"SSL_CERT_FILE": str(pki.ca.cert)})
        create_topic(floe2.bootstrap, unique_topic("rogue"), config={"floe.iceberg.enabled": "true"})
        deadline = time.monotonic() + 30
        while floe2.metric("floe_iceberg_errors_total", topic="(catalog)") < 1 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert floe2.metric("floe_iceberg_errors_total", topic="(catalog)") >= 1
        assert "cannot open the iceberg catalog" in floe2.stderr_text(limit=10_000_000)
        assert rogue.requests == [], "no request got past the TLS handshake"
    finally:
        rogue.stop()


def rows_in_database(server: RestCatalogServer, topic: str) -> list[dict]:
    from pyiceberg.catalog.sql import SqlCatalog
    cat = SqlCatalog(server.catalog.name, uri=server.db_uri, warehouse=server.warehouse)
    try:
        return cat.load_table(("kafka", topic)).scan().to_arrow().to_pylist()
    except (NoSuchTableError, NoSuchNamespaceError):
        return []


def test_compaction_through_the_rest_catalog(floe_factory, rest_catalog):
    """Small-file compaction commits its `replace` snapshot through the REST protocol
    (Floe speaks it itself: the iceberg crate's client sends only its own actions);
    the table reads the same rows once each through the REST catalog afterwards."""
    from test_iceberg_maintenance import commit_rounds

    floe = floe_factory("floe", overrides={**rest_settings(rest_catalog.uri), "floe.iceberg.tick-ms": "50",
                                           "floe.iceberg.maintenance-interval-ms": "300"})
    topic = create_topic(floe.bootstrap, unique_topic("restcompact"), partitions=2, config={
        "floe.iceberg.enabled": "true", "floe.iceberg.target-lag-ms": "0",
        "floe.iceberg.compaction.min-input-files": "4"})
    produced: dict = {}
    commit_rounds(floe, topic, 10, produced)
    compactions = lambda: floe.metric("floe_iceberg_compactions_total", topic=topic)  # noqa: E731
    if compactions() < 1:
        time.sleep(0.5)
        commit_rounds(floe, topic, floe.metric("floe_iceberg_commits_total", topic=topic) + 1, produced)
    assert compactions() >= 1, floe.stderr_text()[-3000:]
    cat = RestCatalog("reader", uri=rest_catalog.uri, credential=CREDENTIAL,
                      **{"oauth2-server-uri": f"{rest_catalog.uri}/v1/oauth/tokens"}, **rest_catalog.storage_props)
    table = cat.load_table(("kafka", topic))
    operations = [s.summary.operation.value for s in table.metadata.snapshots]
    assert "replace" in operations, operations
    rows, n = wait_for_rest_rows(rest_catalog, topic, len(produced))
    assert n == len(produced) and set(rows) == set(produced)
    for k, m in produced.items():
        assert rows[k]["value"] == m["value"], k


def test_a_type_promotion_through_the_rest_catalog(floe_factory, rest_catalog):
    """A typed table's widened field (int → long, float → double) is promoted in place
    through the REST protocol too (an add-schema + set-current-schema commit that
    requires the schema it was built on): same field ids, rows before read widened,
    no dead letters."""
    import json

    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from test_schema_registry import wait_registry
    from test_typed_tables import LINE_V1, LINE_V2, TYPED

    broker = floe_factory("floe", start=False, overrides={**rest_settings(rest_catalog.uri), "floe.iceberg.tick-ms": "100"})
    broker.schema_registry_port = free_port()
    broker.start()
    wait_registry(broker.schema_registry_url)
    topic = create_topic(broker.bootstrap, unique_topic("restpromote"), partitions=1, config=TYPED)
    client = SchemaRegistryClient({"url": broker.schema_registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    narrow = [{"sku": f"s{i}", "qty": i, "price": 0.5 * i} for i in range(5)]
    wide = [{"sku": f"w{i}", "qty": 2**40 + i, "price": 1e300} for i in range(5)]
    for schema, lines in ((LINE_V1, narrow), (LINE_V2, wide)):
        ser = AvroSerializer(client, json.dumps(schema))
        for line in lines:
            producer.produce(topic, value=ser(line, ctx))
        assert producer.flush(30) == 0
        rows, _ = wait_for_rest_rows(rest_catalog, topic, len(narrow) if lines is narrow else 10)
    rows = [rows[k] for k in sorted(rows)]
    assert [{k: r[k] for k in ("sku", "qty", "price")} for r in rows] == narrow + wide
    cat = RestCatalog("reader", uri=rest_catalog.uri, credential=CREDENTIAL,
                      **{"oauth2-server-uri": f"{rest_catalog.uri}/v1/oauth/tokens"}, **rest_catalog.storage_props)
    schema = cat.load_table(("kafka", topic)).schema()
    assert str(schema.find_field("qty").field_type) == "long" and str(schema.find_field("price").field_type) == "double"
    dead, _ = rest_rows(rest_catalog, f"{topic}__dlq")
    assert dead == {}, "nothing went to the dead-letter table"
