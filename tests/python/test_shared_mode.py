"""Shared mode (`floe.iceberg.storage=shared`, issue #16) as far as it goes today:
the table is written lossless with its `<topic>__log` companion, local segments
leave the disk only once the table holds every offset of them (KIP-405's local
retention), the log start offset stays where it was, and a fetch below the local
log start offset is never answered OFFSET_OUT_OF_RANGE (a consumer with
auto.offset.reset=earliest must not be sent past the table). The table-served
read path comes later; docs/shared-mode.md has the stages.

Every table is read back with pyiceberg's SqlCatalog, an independent reader."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

import kwire
from clients import create_topic, produce_all, unique_topic

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")

BROKER = {
    "floe.iceberg.tick-ms": "200",
    "floe.iceberg.target-lag-ms": "1000",
    "log.retention.check.interval.ms": "500",
}


def catalog(data_dir: Path):
    ice = data_dir / "iceberg"
    return pyiceberg_sql.SqlCatalog(
        "floe", uri=f"sqlite:///{ice / 'catalog.db'}", warehouse=f"file://{ice / 'warehouse'}")


def rows(data_dir: Path, table: str) -> list[dict]:
    try:
        t = catalog(data_dir).load_table(("kafka", table))
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return t.scan().to_arrow().to_pylist()


def list_offset(floe, topic: str, timestamp: int) -> int:
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        r = kwire.parse_list_offsets_v8(conn.call_flexible(kwire.API_LIST_OFFSETS, 8, kwire.list_offsets_v8(topic, 0, timestamp)))
    err, _ts, off = r[(topic, 0)]
    assert err == 0, r
    return off


def transactional_pair(bootstrap: str, topic: str):
    """One committed and one aborted transaction of three records each."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("txn"), "linger.ms": 0})
    p.init_transactions(30)
    for commit in (True, False):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic, key=b"t", value=f"{'c' if commit else 'a'}{i}".encode(), partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)


def test_local_segments_go_only_once_the_table_holds_them(floe_factory):
    floe = floe_factory("floe", overrides=BROKER)
    topic = create_topic(floe.bootstrap, unique_topic("shared"), config={
        "floe.iceberg.enabled": "true",
        "floe.iceberg.storage": "shared",
        "segment.bytes": "20000",
        "local.retention.ms": "0",
    })
    msgs = [{"key": f"k{i}".encode(), "value": f"v{i}".encode() * 20,
             "headers": [("h", b"1"), ("h", b"2")]} for i in range(150)]
    produce_all(floe.bootstrap, topic, msgs)
    transactional_pair(floe.bootstrap, topic)
    produce_all(floe.bootstrap, topic, msgs[:60])  # rolls past the transactions
    deadline = time.monotonic() + 60
    local_start = 0
    while time.monotonic() < deadline:
        local_start = list_offset(floe, topic, -4)
        if local_start > 160:
            break
        time.sleep(0.5)
    assert local_start > 160, "local segments past the transactions were never deleted"
    assert list_offset(floe, topic, -2) == 0, "local deletion does not move the log start offset"

    main = rows(floe.data_dir, topic)
    log = rows(floe.data_dir, f"{topic}__log")
    in_main = {r["offset"] for r in main}
    kinds = {r["offset"]: r["kind"] for r in log}
    assert len(in_main) == len(main) and not (in_main & set(kinds)), "an offset is in the table twice"
    # Every offset below the local log start is in the table: a row, or a marker in __log.
    missing = [o for o in range(local_start) if o not in in_main and o not in kinds]
    assert not missing, f"deleted locally but not in the table: {missing[:10]}"
    assert sorted(kinds.values()) == sorted(["aborted"] * 3 + ["abort_marker", "commit_marker"])
    # The lossless columns: every header in order, the batch fields as stored.
    r0 = next(r for r in main if r["offset"] == 0)
    assert [(h["key"], h["value"]) for h in r0["headers"]] == [("h", b"1"), ("h", b"2")]
    assert r0["batch_records_count"] >= 1 and r0["batch_crc"] > 0 and r0["timestamp_delta"] == 0
    props = catalog(floe.data_dir).load_table(("kafka", topic)).metadata.properties
    assert "batch_last_offset_delta" in props["floe.kafka-columns"]

    # Below the local log start: never out of range (the consumer would be reset past the table).
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        parts = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
    assert parts[0].error_code == 0, parts
