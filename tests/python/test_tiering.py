"""Iceberg tiering end to end: produce with every codec, read the table back with
pyiceberg's SqlCatalog (an independent reader), and check every (partition, offset)
appears exactly once with the bytes produced — also after kill -9 during tiering."""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from clients import create_topic, produce_all, unique_topic, watermarks
from floe_process import floe_bin

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")

TIERING = {
    "floe.iceberg.tick-ms": "200",
    "floe.iceberg.target-lag-ms": "2000",
}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def catalog(data_dir: Path):
    ice = data_dir / "iceberg"
    return pyiceberg_sql.SqlCatalog(
        "floe", uri=f"sqlite:///{ice / 'catalog.db'}", warehouse=f"file://{ice / 'warehouse'}")


def table_rows(data_dir: Path, topic: str):
    """(partition, offset) -> row dict, plus the count of rows (duplicates show as count > len)."""
    if not (data_dir / "iceberg" / "catalog.db").exists():
        return {}, 0
    cat = catalog(data_dir)
    try:
        t = cat.load_table(("kafka", topic))
    except Exception:  # noqa: BLE001 - not created yet
        return {}, 0
    rows = t.scan().to_arrow().to_pylist()
    return {(r["partition"], r["offset"]): r for r in rows}, len(rows)


def wait_for_rows(data_dir: Path, topic: str, expected: int, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        by_key, n = table_rows(data_dir, topic)
        assert n == len(by_key), f"duplicate rows: {n} rows for {len(by_key)} offsets"
        if len(by_key) >= expected or time.monotonic() > deadline:
            return by_key, n
        time.sleep(0.5)


def messages(partition: int, n: int, value_bytes: int = 40) -> list[dict]:
    out = []
    for i in range(n):
        m = {"value": None if i % 11 == 3 else f"p{partition}-v{i}-".encode() + os.urandom(i % value_bytes)}
        if i % 4 != 0:
            m["key"] = f"k{i}".encode()
        if i % 3 == 0:
            # "h" twice: Kafka keeps both, in order, and so must the table.
            m["headers"] = [("h", f"{i}".encode()), ("empty", b""), ("h", b"again")]
        out.append(m)
    return out


def produce_codecs(bootstrap: str, topic: str, partitions: int, per_codec: int, value_bytes: int = 40) -> dict:
    """Produce per_codec records per codec to every partition; return (partition, offset) -> message."""
    produced = {}
    for p in range(partitions):
        for c, codec in enumerate(CODECS):
            msgs = messages(p, per_codec, value_bytes)
            offsets = produce_all(bootstrap, topic, msgs, partition=p, **{"compression.type": codec})
            for o, m in zip(offsets, msgs):
                produced[(p, o)] = m
    return produced


def check(rows: dict, produced: dict):
    assert set(rows) == set(produced), (
        f"missing {sorted(set(produced) - set(rows))[:10]}, extra {sorted(set(rows) - set(produced))[:10]}")
    for k, m in produced.items():
        r = rows[k]
        assert r["key"] == m.get("key"), k
        assert r["value"] == m["value"], k
        want_headers = [{"key": hk, "value": hv} for hk, hv in m.get("headers", [])]
        assert r["headers"] == want_headers, k


def test_tiering_every_codec_exactly_once(floe_factory):
    floe = floe_factory("floe", overrides=TIERING)
    topic = create_topic(floe.bootstrap, unique_topic("ice"), partitions=2,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
    produced = produce_codecs(floe.bootstrap, topic, 2, 150)
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)
    r = rows[(0, 0)]
    assert r["timestamp_type"] == "CreateTime" and r["compression"] == "none" and r["batch_base_offset"] == 0
    # Metrics: everything committed, no lag.
    for p in range(2):
        assert floe.metric("floe_iceberg_committed_offset", topic=topic, partition=str(p)) == 750
        assert floe.metric("floe_iceberg_lag_records", topic=topic, partition=str(p)) == 0
    assert floe.metric("floe_iceberg_committed_rows_total", topic=topic) == len(produced)
    # The status command reads the same from the catalog.
    out = subprocess.run([floe_bin(), "iceberg", "status", "--data-dir", str(floe.data_dir)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"table kafka.{topic}:" in out and f"rows {len(produced)}," in out, out
    assert "partition 0: committed offset 750" in out and "partition 1: committed offset 750" in out, out
    # A clean restart (SIGTERM, tiering thread stopped) and more data: still every offset once.
    assert floe.restart() == 0
    produced.update(produce_codecs(floe.bootstrap, topic, 2, 20))
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)


def test_topics_without_the_setting_are_not_tiered(floe_factory):
    floe = floe_factory("floe", overrides=TIERING)
    topic = create_topic(floe.bootstrap, unique_topic("plain"))
    produce_all(floe.bootstrap, topic, messages(0, 20))
    time.sleep(3)
    rows, _ = table_rows(floe.data_dir, topic)
    assert rows == {}
    # Bad tiering settings are refused up front.
    with pytest.raises(Exception, match="(?i)invalid|partition-spec"):
        create_topic(floe.bootstrap, unique_topic("badspec"),
                     config={"floe.iceberg.enabled": "true", "floe.iceberg.partition-spec": "day(nope)"})


def test_kill9_during_tiering_keeps_exactly_once(floe_factory):
    floe = floe_factory("floe", overrides={**TIERING, "floe.iceberg.target-lag-ms": "300", "floe.iceberg.tick-ms": "50"})
    topic = create_topic(floe.bootstrap, unique_topic("icekill"), partitions=2,
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "200000"})
    produced = {}
    rng = random.Random(7)
    rounds = 6
    for round_ in range(rounds):
        # ~3 MB a round, so a pass takes long enough for the kill to land inside it.
        produced.update(produce_codecs(floe.bootstrap, topic, 2, 60, value_bytes=5000))
        # Land the kill at a random moment while segments are converted and committed.
        time.sleep(rng.uniform(0.0, 0.6))
        floe.kill9()
        floe.start()
        rows, n = table_rows(floe.data_dir, topic)
        assert n == len(rows), f"round {round_}: duplicate rows"
    for p in range(2):
        assert watermarks(floe.bootstrap, topic, p)[1] == rounds * len(CODECS) * 60
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced))
    check(rows, produced)
    assert n == len(produced)


def test_catalog_down_holds_retention_then_catches_up(floe_factory, tmp_path):
    data_dir = tmp_path / "down-data"
    # The catalog database path is taken by a directory: opening the catalog fails.
    blocker = data_dir / "iceberg" / "catalog.db"
    blocker.mkdir(parents=True)
    floe = floe_factory("floe", data_dir=data_dir, overrides={
        **TIERING, "floe.iceberg.target-lag-ms": "200", "log.retention.check.interval.ms": "200"})
    topic = create_topic(floe.bootstrap, unique_topic("icedown"),
                         config={"floe.iceberg.enabled": "true", "segment.bytes": "3000", "retention.ms": "1"})
    produced = produce_codecs(floe.bootstrap, topic, 1, 40)
    time.sleep(3)
    # Retention (everything is older than 1 ms) kept every untiered offset.
    assert watermarks(floe.bootstrap, topic, 0)[0] == 0
    assert floe.metric("floe_iceberg_errors_total", topic="(catalog)") >= 1
    blocker.rmdir()
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced), timeout=90)
    check(rows, produced)
    assert n == len(produced)
    # Once tiered, retention may delete the sealed segments.
    deadline = time.monotonic() + 20
    while watermarks(floe.bootstrap, topic, 0)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert watermarks(floe.bootstrap, topic, 0)[0] > 0


def test_duckdb_reads_the_table(floe_factory):
    duckdb = pytest.importorskip("duckdb")
    from duckdb_extensions import import_extension
    floe = floe_factory("floe", overrides=TIERING)
    topic = create_topic(floe.bootstrap, unique_topic("duck"), partitions=2,
                         config={"floe.iceberg.enabled": "true", "floe.iceberg.partition-spec": "hour(timestamp),identity(partition)"})
    produced = produce_codecs(floe.bootstrap, topic, 2, 30)
    wait_for_rows(floe.data_dir, topic, len(produced))
    metadata = max((floe.data_dir / "iceberg" / "warehouse" / "kafka" / topic / "metadata").glob("*.metadata.json"),
                   key=lambda p: p.stat().st_mtime)
    con = duckdb.connect()
    import_extension("iceberg", con=con)
    import_extension("avro", con=con)
    con.execute("LOAD iceberg")
    rows = con.execute(f"select partition, \"offset\", key, value from iceberg_scan('{metadata}')").fetchall()
    assert len(rows) == len(produced)
    got = {(p, o): (k, v) for p, o, k, v in rows}
    assert got == {k: (m.get("key"), m["value"]) for k, m in produced.items()}
