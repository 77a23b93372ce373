"""The read-only Iceberg REST catalog (`floe.iceberg.rest-listen`) end to end:
pyiceberg's RestCatalog and DuckDB's iceberg ATTACH read the tiered tables by URL
and get exactly the produced records; every write route is refused and the
catalog stays as it was; unknown namespaces and tables are 404s."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from clients import create_topic, unique_topic
from floe_process import FloeStartError, wait_until
from test_tiering import TIERING, check, produce_codecs, wait_for_rows

pyiceberg_rest = pytest.importorskip("pyiceberg.catalog.rest")


def rest_catalog(floe):
    return pyiceberg_rest.RestCatalog("floe", uri=floe.iceberg_rest_url)


def http(floe, method: str, path: str, body: dict | None = None):
    """(status, headers, parsed JSON body or None) of one raw request to the REST catalog."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(floe.iceberg_rest_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, r.headers, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, e.headers, json.loads(raw) if raw else None


def tiered_topic(floe, prefix: str, partitions: int = 2, per_codec: int = 30, **config):
    topic = create_topic(floe.bootstrap, unique_topic(prefix), partitions=partitions,
                         config={"floe.iceberg.enabled": "true", **config})
    produced = produce_codecs(floe.bootstrap, topic, partitions, per_codec)
    # The SQL catalog (an independent reader of the same catalog) sees everything first.
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)
    return topic, produced


def test_pyiceberg_rest_catalog_reads_exactly_the_produced_records(floe_factory):
    floe = floe_factory("floe", overrides=TIERING)
    topic, produced = tiered_topic(floe, "rest")
    cat = rest_catalog(floe)
    assert ("kafka",) in cat.list_namespaces()
    assert ("kafka", topic) in cat.list_tables("kafka")
    assert cat.table_exists(("kafka", topic))
    assert not cat.table_exists(("kafka", "no-such-topic"))
    table = cat.load_table(("kafka", topic))
    rows = table.scan().to_arrow().to_pylist()
    by_key = {(r["partition"], r["offset"]): r for r in rows}
    assert len(rows) == len(by_key) == len(produced), "every (partition, offset) exactly once"
    check(by_key, produced)
    # The REST answer is the catalog's current metadata file.
    status, _, body = http(floe, "GET", f"/v1/namespaces/kafka/tables/{topic}")
    assert status == 200
    assert body["metadata-location"].endswith(".metadata.json")
    assert body["metadata"]["current-snapshot-id"] == table.metadata.current_snapshot_id
    assert floe.metric("floe_iceberg_rest_requests_total", route="load_table", status="200") >= 2


def test_duckdb_attaches_the_rest_endpoint(floe_factory):
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension
    floe = floe_factory("floe", overrides=TIERING)
    topic, produced = tiered_topic(floe, "duckrest", per_codec=20)
    con = duckdb.connect()
    for ext in ("iceberg", "avro", "httpfs"):
        import_extension(ext, con=con)
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH 'floe' AS f (TYPE iceberg, ENDPOINT '{floe.iceberg_rest_url}', AUTHORIZATION_TYPE 'none')")
    table = f'f.kafka."{topic}"'
    assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == len(produced)
    got = con.execute(f'SELECT partition, "offset", key, value FROM {table} '
                      'WHERE partition = 1 AND "offset" >= 5').fetchall()
    want = {(p, o): (m.get("key"), m["value"]) for (p, o), m in produced.items() if p == 1 and o >= 5}
    assert len(got) == len(want)
    assert {(p, o): (k, v) for p, o, k, v in got} == want
    # Listing the attached catalog goes through the namespace and table routes.
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'f'").fetchall()
    assert (topic,) in tables


def test_writes_are_refused_and_unknown_names_are_404(floe_factory):
    floe = floe_factory("floe", overrides=TIERING)
    topic, produced = tiered_topic(floe, "ro", partitions=1, per_codec=4)
    before = http(floe, "GET", f"/v1/namespaces/kafka/tables/{topic}")[2]

    cat = rest_catalog(floe)
    with pytest.raises(Exception):  # noqa: B017 - refused client side (endpoints) or server side
        cat.create_namespace("other")
    with pytest.raises(Exception):  # noqa: B017
        cat.drop_table(("kafka", topic))
    # The server refuses every write route itself, with the spec's ErrorModel.
    for method, path, body in [
        ("POST", "/v1/namespaces", {"namespace": ["other"]}),
        ("DELETE", "/v1/namespaces/kafka", None),
        ("POST", "/v1/namespaces/kafka/properties", {"updates": {"a": "b"}}),
        ("POST", "/v1/namespaces/kafka/tables", {"name": "new", "schema": {"type": "struct", "fields": []}}),
        ("POST", f"/v1/namespaces/kafka/tables/{topic}", {"requirements": [], "updates": []}),
        ("DELETE", f"/v1/namespaces/kafka/tables/{topic}", None),
        ("POST", "/v1/namespaces/kafka/register", {"name": "x", "metadata-location": "file:///x"}),
        ("POST", "/v1/tables/rename", {"source": {"namespace": ["kafka"], "name": topic},
                                       "destination": {"namespace": ["kafka"], "name": "renamed"}}),
        ("POST", "/v1/transactions/commit", {"table-changes": []}),
    ]:
        status, _, err = http(floe, method, path, body)
        assert status == 403, (method, path, status, err)
        assert err["error"]["type"] == "ForbiddenException" and err["error"]["code"] == 403
        assert "read-only" in err["error"]["message"]
    status, headers, err = http(floe, "PUT", "/v1/config")
    assert status == 405 and headers["Allow"] == "GET" and err["error"]["code"] == 405

    # Nothing changed: same namespaces, same table, same metadata.
    assert cat.list_namespaces() == [("kafka",)]
    assert cat.list_tables("kafka") == [("kafka", topic)]
    assert http(floe, "GET", f"/v1/namespaces/kafka/tables/{topic}")[2] == before
    assert len(cat.load_table(("kafka", topic)).scan().to_arrow()) == len(produced)

    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
    with pytest.raises(NoSuchTableError):
        cat.load_table(("kafka", "no-such-topic"))
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nope")
    status, _, err = http(floe, "GET", "/v1/namespaces/kafka/tables/no-such-topic")
    assert status == 404 and err["error"]["type"] == "NoSuchTableException"
    status, _, err = http(floe, "GET", "/v1/namespaces/nope")
    assert status == 404 and err["error"]["type"] == "NoSuchNamespaceException"
    assert http(floe, "HEAD", "/v1/namespaces/nope")[0] == 404
    assert http(floe, "GET", "/v1/no/such/route")[0] == 404
    status, _, err = http(floe, "GET", "/v1/config?warehouse=elsewhere")
    assert status == 400 and "unknown warehouse" in err["error"]["message"]
    assert floe.metric("floe_iceberg_rest_requests_total", route="refused_write", status="403") >= 9


def test_empty_catalog_disabled_endpoint_and_taken_port(floe_factory):
    floe = floe_factory("floe")
    wait_until(lambda: f"http://127.0.0.1:{floe.iceberg_rest_port}" in floe.stderr_text(), 10, what="the REST URL logged")
    # No tiered topic yet: an empty catalog, and the REST server created no catalog file.
    assert rest_catalog(floe).list_namespaces() == []
    assert http(floe, "GET", "/v1/namespaces/kafka/tables")[0] == 404
    assert not (floe.data_dir / "iceberg" / "catalog.db").exists()
    # A second broker asked for the same REST port does not start, and says why.
    clash = floe_factory("clash", start=False)
    clash.iceberg_rest_port = floe.iceberg_rest_port
    try:
        clash.start()  # may see the Kafka port listening before the REST bind fails
    except FloeStartError:
        pass
    assert clash.proc.wait(timeout=20) != 0
    assert (f"Iceberg REST catalog on 127.0.0.1:{floe.iceberg_rest_port} "
            "(setting `floe.iceberg.rest-listen`, flag --iceberg-rest-listen)") in clash.stderr_text()
    # An empty address disables the endpoint.
    off = floe_factory("off", start=False)
    port, off.iceberg_rest_port = off.iceberg_rest_port, None
    off.start()
    wait_until(lambda: "floe is ready" in off.stderr_text(), 10, what="startup")
    assert "REST catalog (read-only) listening" not in off.stderr_text()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/config", timeout=2)
