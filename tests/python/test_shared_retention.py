"""Table retention of a shared topic (`floe.iceberg.storage=shared`, docs/shared-mode.md
3.2, stage 9): `retention.ms` applies to the whole partition, table included. Records
produced with old CreateTime timestamps leave the Iceberg table as whole data files, the
table records the new log start offset (`floe.log-start.<p>`), and the broker folds it
into the log: ListOffsets EARLIEST (-2) answers it, a fetch below it is out of range.

A kill -9 right after the retention commit (`tiering.retention.committed`) or before it
(`tiering.retention.written`) and a restart, an idempotent producer writing on: the log
start offset never goes back, the table keeps every offset from it to its end exactly
once, and the history checker is valid over drains from the log start.

Every table is read back with pyiceberg's SqlCatalog, an independent reader."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import kwire
from clients import CLIENT_TIMEOUT_S, admin, create_topic, produce_all, unique_topic
from failpoints import assert_failpoints_armed
from floe_process import wait_until
from history import Workload, check, drain_both

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")

DAY_MS = 86_400_000
OLD, NEW = 150, 100

BROKER = {
    "floe.iceberg.tick-ms": "200",
    "floe.iceberg.target-lag-ms": "500",
    "log.retention.check.interval.ms": "500",
}

TOPIC = {
    "floe.iceberg.enabled": "true",
    "floe.iceberg.storage": "shared",
    "segment.bytes": "20000",
    "local.retention.ms": "0",
    # Kept until the test sets it: the broker's 7 days would expire the old records at once.
    "retention.ms": "-1",
}


def catalog(data_dir: Path):
    ice = data_dir / "iceberg"
    return pyiceberg_sql.SqlCatalog(
        "floe", uri=f"sqlite:///{ice / 'catalog.db'}", warehouse=f"file://{ice / 'warehouse'}")


def table(data_dir: Path, topic: str):
    try:
        return catalog(data_dir).load_table(("kafka", topic))
    except Exception:  # noqa: BLE001 - not created yet
        return None


def offsets(data_dir: Path, topic: str) -> list[int]:
    t = table(data_dir, topic)
    return [] if t is None else sorted(r["offset"] for r in t.scan(selected_fields=("offset",)).to_arrow().to_pylist())


def summary(data_dir: Path, topic: str) -> dict:
    t = table(data_dir, topic)
    snap = t.current_snapshot() if t is not None else None
    return {} if snap is None else dict(snap.summary.additional_properties)


def list_offset(floe, topic: str, timestamp: int) -> int:
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        r = kwire.parse_list_offsets_v8(conn.call_flexible(kwire.API_LIST_OFFSETS, 8, kwire.list_offsets_v8(topic, 0, timestamp)))
    err, _ts, off = r[(topic, 0)]
    assert err == 0, r
    return off


def set_retention_ms(bootstrap: str, topic: str, ms: int):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(ms), incremental_operation=AlterConfigOpType.SET)])
    a = admin(bootstrap)
    a.incremental_alter_configs([res])[res].result(timeout=CLIENT_TIMEOUT_S)


def produce_old_then_new(floe, topic: str) -> list[tuple[int, bytes]]:
    """OLD records ten days old, every one in the table, then NEW records of now;
    returns the new records' (offset, value)."""
    old_ts = int(time.time() * 1000) - 10 * DAY_MS
    produce_all(floe.bootstrap, topic, [{"key": b"old", "value": f"old-{i}".encode() * 10, "timestamp": old_ts + i}
                                        for i in range(OLD)])
    wait_until(lambda: len(offsets(floe.data_dir, topic)) >= OLD, timeout=60, what="the old records in the table")
    values = [f"new-{i}".encode() * 10 for i in range(NEW)]
    acked = produce_all(floe.bootstrap, topic, [{"key": b"new", "value": v} for v in values])
    wait_until(lambda: len(offsets(floe.data_dir, topic)) >= OLD + NEW, timeout=60, what="the new records in the table")
    assert offsets(floe.data_dir, topic) == list(range(OLD + NEW))
    return list(zip(acked, values))


def record_acked(h, producer: str, acked: list[tuple[int, bytes]]):
    """Records sends acknowledged outside a `history.Workload` (partition 0)."""
    for off, val in acked:
        h.record_send(producer, 0, val)
        h.record_ack(producer, 0, off, val)


def assert_table_from(data_dir: Path, topic: str, start: int):
    """The table holds every offset from `start` to its committed end once, none below."""
    got = offsets(data_dir, topic)
    props = summary(data_dir, topic)
    end = int(props["floe.next-offset.0"])
    assert got == list(range(start, end)), f"table offsets {got[:3]}..{got[-3:]} for [{start}, {end})"
    assert props["floe.log-start.0"] == str(start), props


def test_retention_ms_removes_old_files_and_moves_the_log_start_offset(floe_factory):
    floe = floe_factory("floe", overrides=BROKER)
    topic = create_topic(floe.bootstrap, unique_topic("shret"), config=TOPIC)
    produce_old_then_new(floe, topic)
    assert list_offset(floe, topic, -2) == 0

    set_retention_ms(floe.bootstrap, topic, 7 * DAY_MS)
    wait_until(lambda: list_offset(floe, topic, -2) >= OLD, timeout=60, what="the log start offset to move")
    assert list_offset(floe, topic, -2) == OLD, "the first kept file starts at the first new record"
    assert_table_from(floe.data_dir, topic, OLD)
    assert floe.metric("floe_iceberg_retention_removed_files_total", topic=topic) >= 1
    t = table(floe.data_dir, topic)
    assert t.current_snapshot().summary.operation.value in ("delete", "append", "replace")
    assert all(not r["value"].startswith(b"old") for r in t.scan(selected_fields=("value",)).to_arrow().to_pylist())

    # Below the log start offset: out of range now (Kafka's answer), at it: the new records.
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        below = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
    assert below[0].error_code == 1, below

    # The next commits carry it: more records tiered on top keep floe.log-start.0.
    produce_all(floe.bootstrap, topic, [{"value": b"more"} for _ in range(20)])
    wait_until(lambda: len(offsets(floe.data_dir, topic)) >= NEW + 20, timeout=60, what="a tiering commit on top")
    assert_table_from(floe.data_dir, topic, OLD)

    floe.restart()
    assert list_offset(floe, topic, -2) == OLD, "a restart keeps the log start offset"


@pytest.mark.parametrize("point", ["tiering.retention.committed", "tiering.retention.written"])
def test_a_crash_around_the_retention_commit_never_moves_the_log_start_back(floe_factory, point):
    floe = floe_factory("floe", overrides=BROKER, env={"FAILPOINTS": f"{point}=return(abort)"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("shretc"), config=TOPIC)
    new = produce_old_then_new(floe, topic)
    # An idempotent producer writes on across the crash; the new records are its history
    # too (the old ones expire on time and are left out: the checker has no `expired` yet).
    # No group consumers: they would read the old records, which the history does not hold.
    wl = Workload(floe.bootstrap, topic, 1, producers=1, consumers=0, rate_per_producer=100)
    record_acked(wl.history, "new", new)
    wl.start()

    set_retention_ms(floe.bootstrap, topic, 7 * DAY_MS)
    wait_until(lambda: not floe.running, timeout=60, what=f"the abort at {point}")
    floe.kill9()
    assert f"failpoint {point}: aborting" in floe.stderr_text()
    props = summary(floe.data_dir, topic)
    if point == "tiering.retention.committed":
        # Committed, not folded: the table already says where the log starts.
        assert props.get("floe.log-start.0") == str(OLD), props
        assert offsets(floe.data_dir, topic)[0] == OLD
    else:
        assert "floe.log-start.0" not in props, props
        assert offsets(floe.data_dir, topic)[0] == 0

    floe.start(env={})
    wait_until(lambda: list_offset(floe, topic, -2) == OLD, timeout=60, what="the log start offset after the restart")
    seen = []
    for _ in range(6):
        seen.append(list_offset(floe, topic, -2))
        time.sleep(0.3)
    assert seen == [OLD] * len(seen), f"the log start offset moved back: {seen}"
    acked_at_restart = wl.acked_count()
    wait_until(lambda: wl.acked_count() > acked_at_restart + 50, timeout=60, what="acknowledgements after the restart")
    # The drains below then cross from the table into the local log.
    wait_until(lambda: list_offset(floe, topic, -4) > OLD + NEW, timeout=60, what="local deletion past the new records")
    wl.stop()
    assert not wl.fatal_errors, wl.fatal_errors
    wait_until(lambda: len(offsets(floe.data_dir, topic)) >= list_offset(floe, topic, -1) - OLD, timeout=60,
               what="tiering commits after the restart up to the log end")
    assert_table_from(floe.data_dir, topic, OLD)
    assert list_offset(floe, topic, -2) == OLD
    # Every acknowledged record above the log start is there once, in order, read from
    # OLD across the table and the local log at both isolation levels.
    drain_both(floe.bootstrap, topic, 1, wl.history)
    assert wl.history.drain_bounds[0][0] == OLD
    verdict = check(wl.history)
    assert verdict.ok, verdict.summary()
    print(f"{point}: {verdict.summary()}")


def test_delete_records_moves_the_log_start_and_the_table_follows(floe_factory):
    """DeleteRecords on a shared partition whose records are in the table only: the log
    start offset moves at once (ListOffsets -2, fetches), and the leader's next retention
    check carries it into the table: `floe.log-start.0`, whole data files below it gone;
    a file straddling it stays whole (as Kafka keeps a straddling segment)."""
    from confluent_kafka import Consumer, TopicPartition

    floe = floe_factory("floe", overrides=BROKER)
    topic = create_topic(floe.bootstrap, unique_topic("shdel"), config=TOPIC)
    produce_old_then_new(floe, topic)
    wait_until(lambda: list_offset(floe, topic, -4) >= OLD, timeout=60, what="the old records to leave local disk")
    a = admin(floe.bootstrap)

    def delete_records(offset: int) -> int:
        fs = a.delete_records([TopicPartition(topic, 0, offset)], request_timeout=CLIENT_TIMEOUT_S)
        return next(iter(fs.values())).result(timeout=CLIENT_TIMEOUT_S).low_watermark

    # Inside the first file: the start moves, the file stays (its rows below 60 with it).
    assert delete_records(60) == 60
    assert list_offset(floe, topic, -2) == 60
    wait_until(lambda: summary(floe.data_dir, topic).get("floe.log-start.0") == "60", timeout=60,
               what="the table to record the DeleteRecords offset")
    kept = offsets(floe.data_dir, topic)
    assert kept[0] < 60 and kept == list(range(kept[0], OLD + NEW)), "the straddling file is kept whole"

    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        first = None
        deadline = time.monotonic() + 60
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                first = m
    finally:
        c.close()
    assert first is not None and first.offset() == 60, "a consumer from the beginning starts at the new log start"
    assert first.value() == b"old-60" * 10, "served from the table"

    # At the first new record: every old file goes.
    assert delete_records(OLD) == OLD
    wait_until(lambda: summary(floe.data_dir, topic).get("floe.log-start.0") == str(OLD), timeout=60,
               what="the table to follow the second DeleteRecords")
    assert_table_from(floe.data_dir, topic, OLD)
    floe.restart()
    assert list_offset(floe, topic, -2) == OLD, "a restart keeps the log start offset"
