"""Iceberg tiering into a warehouse on S3: a local S3 API (moto_server) stands
in for the object store; Floe keeps its embedded SQL catalog and writes data
and metadata files to `s3://BUCKET/wh`. pyiceberg reads the table back through
its own S3 client, and boto3 lists the bucket: the Parquet files are there and
nothing landed in the local warehouse directory."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka.admin import ConfigResource, ResourceType

from clients import admin, create_topic, unique_topic, watermarks
from floe_process import floe_bin
from s3_server import SECRET_ACCESS_KEY, MotoS3, S3Gate
from test_tiering import CODECS, TIERING, check, produce_codecs

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: E402

BUCKET = "floe-lake"
WAREHOUSE = f"s3://{BUCKET}/wh"


@pytest.fixture
def s3(tmp_path):
    server = MotoS3(tmp_path / "moto.log").start()
    server.client().create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


def s3_rows(s3: MotoS3, data_dir, topic: str):
    """(partition, offset) -> row, the row count, and the table's data file paths."""
    db = data_dir / "iceberg" / "catalog.db"
    if not db.exists():
        return {}, 0, []
    cat = pyiceberg_sql.SqlCatalog("floe", uri=f"sqlite:///{db}", warehouse=WAREHOUSE, **s3.pyiceberg_props())
    try:
        table = cat.load_table(("kafka", topic))
    except (NoSuchTableError, NoSuchNamespaceError):  # not created yet
        return {}, 0, []
    scan = table.scan()
    files = [task.file.file_path for task in scan.plan_files()]
    rows = scan.to_arrow().to_pylist()
    return {(r["partition"], r["offset"]): r for r in rows}, len(rows), files


def wait_for_s3_rows(s3: MotoS3, data_dir, topic: str, expected: int, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        rows, n, files = s3_rows(s3, data_dir, topic)
        assert n == len(rows), f"duplicate rows: {n} rows for {len(rows)} offsets"
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows, n, files
        time.sleep(0.5)


def test_s3_warehouse_every_codec_exactly_once(floe_factory, s3):
    floe = floe_factory("floe", overrides={**TIERING, **s3.floe_settings(WAREHOUSE)})
    topic = create_topic(floe.bootstrap, unique_topic("s3ice"), partitions=2,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
    produced = produce_codecs(floe.bootstrap, topic, 2, 60)
    rows, n, files = wait_for_s3_rows(s3, floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)

    # The files are objects in the bucket, and only there.
    keys = set(s3.keys(BUCKET, f"wh/kafka/{topic}/"))
    assert files and all(f.startswith(f"{WAREHOUSE}/kafka/{topic}/data/") for f in files), files[:3]
    assert {f.removeprefix(f"s3://{BUCKET}/") for f in files} <= keys
    assert any(k.endswith(".metadata.json") for k in keys), sorted(keys)[:10]
    assert not (floe.data_dir / "iceberg" / "warehouse").exists()
    assert not list(floe.data_dir.rglob("*.parquet"))

    # Floe's own read-only REST catalog serves the S3-held table too (the reader brings its S3 settings).
    from pyiceberg.catalog.rest import RestCatalog
    served = RestCatalog("floe", uri=floe.iceberg_rest_url, **s3.pyiceberg_props()).load_table(("kafka", topic))
    assert served.metadata_location.startswith(f"{WAREHOUSE}/kafka/{topic}/metadata/")
    assert served.scan().to_arrow().num_rows == len(produced)

    # The secret key is never shown: not in the log, not in DescribeConfigs, not in status.
    res = ConfigResource(ResourceType.BROKER, "1")
    a = admin(floe.bootstrap)  # kept alive until the future resolves
    entries = a.describe_configs([res])[res].result(timeout=30)
    secret = entries["floe.iceberg.s3.secret-access-key"]
    assert secret.is_sensitive and secret.value is None
    assert entries["floe.iceberg.s3.endpoint"].value == s3.endpoint
    status_cmd = [floe_bin()] + [a for k, v in s3.floe_settings(WAREHOUSE).items() for a in ("--override", f"{k}={v}")]
    out = subprocess.run(status_cmd + ["iceberg", "status", "--data-dir", str(floe.data_dir)],
                         capture_output=True, text=True, timeout=60, check=True)
    assert f"table kafka.{topic}:" in out.stdout and f"rows {len(produced)}," in out.stdout, out
    assert "partition 1: committed offset 300" in out.stdout, out.stdout
    # The broker's own lines (the harness's "=====" lines echo the command line, secret included).
    log = "\n".join(l for l in floe.stderr_text(limit=10_000_000).splitlines() if not l.startswith("====="))
    assert "cannot look for orphan data files" not in log
    assert SECRET_ACCESS_KEY not in log + out.stdout + out.stderr

    # A restart resumes from the committed offsets in the S3-held metadata: still every offset once.
    assert floe.restart() == 0
    produced.update(produce_codecs(floe.bootstrap, topic, 2, 10))
    rows, n, _ = wait_for_s3_rows(s3, floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)


def test_s3_kill9_mid_commit_keeps_exactly_once(floe_factory, s3):
    """kill -9 after a pass uploaded its Parquet file to S3 and before its
    commit wrote any manifest (an S3Gate holds that write): after the restart
    every offset is in the table once, and the uploaded file, an orphan no
    snapshot references, is found by listing the bucket and deleted."""
    gate = S3Gate(s3.endpoint)
    try:
        settings = {**TIERING, **s3.floe_settings(WAREHOUSE, endpoint=gate.endpoint),
                    "floe.iceberg.target-lag-ms": "300", "floe.iceberg.tick-ms": "50",
                    # Orphan cleanup off for the crash, on (and quick) after the restart.
                    "floe.iceberg.orphan-check-interval-ms": "3600000"}
        floe = floe_factory("floe", overrides=settings)
        topic = create_topic(floe.bootstrap, unique_topic("s3kill"), partitions=2,
                             config={"floe.iceberg.enabled": "true", "segment.bytes": "200000"})
        gate.arm()
        produced = produce_codecs(floe.bootstrap, topic, 2, 60, value_bytes=5000)
        assert gate.holding.wait(60), "no commit reached its manifest write"
        floe.kill9()
        gate.release()
        rows, n, _ = s3_rows(s3, floe.data_dir, topic)
        assert n == len(rows) == 0, "nothing was committed before the kill"
        uploaded = [k.removeprefix(f"/{BUCKET}/") for k in gate.data_keys]
        assert uploaded and set(uploaded) <= set(s3.keys(BUCKET, "wh/")), uploaded

        floe.start(overrides={**settings, "floe.iceberg.orphan-check-interval-ms": "500",
                              "floe.iceberg.orphan-min-age-ms": "1000"})
        produced.update(produce_codecs(floe.bootstrap, topic, 2, 10))
        for p in range(2):
            assert watermarks(floe.bootstrap, topic, p)[1] == len(CODECS) * 70
        rows, n, files = wait_for_s3_rows(s3, floe.data_dir, topic, len(produced), timeout=120)
        check(rows, produced)
        assert n == len(produced)
        # The crashed attempt's file is in no snapshot: orphan cleanup lists the bucket and deletes it,
        # and nothing the table references.
        referenced = {f.removeprefix(f"s3://{BUCKET}/") for f in files}
        assert not set(uploaded) & referenced
        deadline = time.monotonic() + 60
        while set(uploaded) & set(s3.keys(BUCKET, "wh/")) and time.monotonic() < deadline:
            time.sleep(0.3)
        keys = set(s3.keys(BUCKET, "wh/"))
        assert not set(uploaded) & keys, "the orphan was deleted"
        assert referenced <= keys
        assert "deleted orphan data file" in floe.stderr_text(limit=10_000_000)
        rows, n, _ = s3_rows(s3, floe.data_dir, topic)
        check(rows, produced)
        assert n == len(produced)
    finally:
        gate.stop()


def test_s3_missing_bucket_fails_loudly_then_catches_up(floe_factory, s3):
    """The warehouse bucket does not exist yet: tiering fails, is logged and
    counted, and catches up once the bucket is there."""
    floe = floe_factory("floe", overrides={**TIERING, **s3.floe_settings("s3://not-yet-a-bucket/wh")})
    topic = create_topic(floe.bootstrap, unique_topic("s3late"),
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "5000"})
    produced = produce_codecs(floe.bootstrap, topic, 1, 20)
    deadline = time.monotonic() + 30
    while floe.metric("floe_iceberg_errors_total") < 1 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert floe.metric("floe_iceberg_errors_total") >= 1
    assert "iceberg tiering failed" in floe.stderr_text(limit=10_000_000)
    s3.client().create_bucket(Bucket="not-yet-a-bucket")
    db = floe.data_dir / "iceberg" / "catalog.db"
    deadline = time.monotonic() + 120
    while True:
        cat = pyiceberg_sql.SqlCatalog("floe", uri=f"sqlite:///{db}", warehouse="s3://not-yet-a-bucket/wh",
                                       **s3.pyiceberg_props())
        try:
            rows = cat.load_table(("kafka", topic)).scan().to_arrow().to_pylist()
        except Exception:  # noqa: BLE001 - not there yet
            rows = []
        if len(rows) >= len(produced) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    got = {(r["partition"], r["offset"]): r for r in rows}
    assert len(rows) == len(got)
    check(got, produced)
