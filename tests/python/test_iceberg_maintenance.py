"""Table maintenance: snapshot expiry on tiered tables.

- Many commits (one per produce round), then expiry by age
  (`floe.iceberg.snapshot.max-age-ms`) keeps at most `floe.iceberg.snapshot.min-to-keep`
  recent snapshots plus the ones younger than the age; the manifest lists of the
  expired snapshots are deleted from the warehouse; pyiceberg and DuckDB read every
  (partition, offset) exactly once afterwards, and tiering goes on exactly once on
  top of the expired table (the offsets guard reads the current snapshot alone).
- A kill -9 right after the expiry's commit, before any file is deleted (failpoint
  `tiering.expire.committed`), leaves a readable table with no duplicate and no
  missing offset, and tiering resumes exactly once after the restart.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from clients import create_topic, produce_all, unique_topic
from failpoints import assert_failpoints_armed
from floe_process import floe_bin, wait_until
from test_tiering import catalog, messages, wait_for_rows

BROKER = {
    "floe.iceberg.tick-ms": "100",
    "floe.iceberg.maintenance-interval-ms": "500",
}
MAX_AGE_MS = 1500
KEEP = 2


def topic_config() -> dict:
    return {"floe.iceberg.enabled": "true", "floe.iceberg.target-lag-ms": "0",
            "floe.iceberg.snapshot.max-age-ms": str(MAX_AGE_MS), "floe.iceberg.snapshot.min-to-keep": str(KEEP)}


def produce_rounds(floe, topic: str, rounds: int, produced: dict, per_round: int = 5):
    """Each round produces to both partitions and waits for the rows: at least one commit per round."""
    for _ in range(rounds):
        for p in range(2):
            msgs = messages(p, per_round)
            for o, m in zip(produce_all(floe.bootstrap, topic, msgs, partition=p), msgs):
                produced[(p, o)] = m
        wait_for_rows(floe.data_dir, topic, len(produced))


def table(floe, topic: str):
    return catalog(floe.data_dir).load_table(("kafka", topic))


def exact(floe, topic: str, produced: dict):
    rows, n = wait_for_rows(floe.data_dir, topic, len(produced))
    assert n == len(produced) and set(rows) == set(produced), (n, len(produced))
    for k, m in produced.items():
        assert rows[k]["value"] == m["value"], k


def duckdb_offsets(floe, topic: str) -> list[tuple]:
    """(partition, offset) of every row, as DuckDB's iceberg_scan reads the current metadata."""
    import duckdb
    from duckdb_extensions import import_extension

    metadata = table(floe, topic).metadata_location.removeprefix("file://")
    con = duckdb.connect()
    import_extension("iceberg", con=con)
    import_extension("avro", con=con)
    con.execute("LOAD iceberg")
    return con.execute(f"select partition, \"offset\" from iceberg_scan('{metadata}')").fetchall()


def manifest_lists(floe, topic: str) -> set[str]:
    meta = floe.data_dir / "iceberg" / "warehouse" / "kafka" / topic / "metadata"
    return {p.name for p in meta.glob("snap-*.avro")}


def test_expiry_bounds_snapshots_and_keeps_the_table_exact(floe_factory):
    pytest.importorskip("duckdb")

    floe = floe_factory("floe", overrides=BROKER)
    topic = create_topic(floe.bootstrap, unique_topic("maint"), partitions=2, config=topic_config())
    produced: dict = {}
    produce_rounds(floe, topic, 12, produced)
    # Once the early snapshots are older than the max age, a commit's maintenance expires them.
    time.sleep(MAX_AGE_MS / 1000 + 0.5)
    produce_rounds(floe, topic, 2, produced)
    commits = floe.metric("floe_iceberg_commits_total", topic=topic)
    assert commits >= 8, f"only {commits} commits: the test needs many"

    def expired():
        t = table(floe, topic)
        return floe.metric("floe_iceberg_expired_snapshots_total", topic=topic) >= 1 and len(t.metadata.snapshots) < commits and t
    t = wait_until(expired, timeout=30, interval=0.3, what="old snapshots expired")
    ages = [time.time() * 1000 - s.timestamp_ms for s in t.metadata.snapshots]
    # Expiry runs at most every maintenance interval (500 ms) after a commit: allow for that.
    old = [a for a in ages if a > MAX_AGE_MS + 3000]
    assert len(old) <= KEEP, f"snapshots older than the max age beyond min-to-keep: {ages}"
    assert len(t.metadata.snapshots) + floe.metric("floe_iceberg_expired_snapshots_total", topic=topic) >= commits

    # Manifest lists on disk: the remaining snapshots' only (the expired ones' were deleted).
    listed = {s.manifest_list.rsplit("/", 1)[-1] for s in table(floe, topic).metadata.snapshots}
    on_disk = wait_until(lambda: (files := manifest_lists(floe, topic)) == listed and files, timeout=10,
                         what="only the remaining snapshots' manifest lists on disk")
    assert on_disk == listed

    exact(floe, topic, produced)
    assert sorted(duckdb_offsets(floe, topic)) == sorted(produced), "DuckDB reads every offset once"

    # Tiering goes on exactly once on top of the expired table, across a restart too.
    floe.restart()
    produce_rounds(floe, topic, 2, produced)
    exact(floe, topic, produced)

    # `floe iceberg maintain` by hand: everything but the current snapshot goes.
    floe.stop()
    out = subprocess.run([floe_bin(), "iceberg", "maintain", "--data-dir", str(floe.data_dir), "--table", topic,
                          "--max-age-ms", "0", "--min-to-keep", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"table kafka.{topic}: expired" in out.stdout, out.stdout
    assert len(table(floe, topic).metadata.snapshots) == 1
    assert len(manifest_lists(floe, topic)) == 1
    exact(floe, topic, produced)


def test_a_kill_after_the_expiry_commit_leaves_an_exact_table(floe_factory):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from clients import admin

    floe = floe_factory("floe", overrides=BROKER, env={"FAILPOINTS": "tiering.expire.committed=return(abort)"})
    assert_failpoints_armed(floe)
    # Nothing expires while the commits pile up (a day's max age) ...
    config = {**topic_config(), "floe.iceberg.snapshot.max-age-ms": "86400000"}
    topic = create_topic(floe.bootstrap, unique_topic("maintkill"), partitions=2, config=config)
    produced: dict = {}
    produce_rounds(floe, topic, 6, produced)
    snapshots = len(table(floe, topic).metadata.snapshots)
    assert snapshots > KEEP + 1
    # ... then the max age drops, and the next commit's maintenance expires, commits, and dies
    # before deleting anything.
    a = admin(floe.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("floe.iceberg.snapshot.max-age-ms", str(MAX_AGE_MS), incremental_operation=AlterConfigOpType.SET)])
    for f in a.incremental_alter_configs([resource]).values():
        f.result(30)
    time.sleep(MAX_AGE_MS / 1000 + 0.5)
    for p in range(2):
        msgs = messages(p, 5)
        for o, m in zip(produce_all(floe.bootstrap, topic, msgs, partition=p), msgs):
            produced[(p, o)] = m
    floe.proc.wait(timeout=60)
    assert floe.proc.returncode != 0, "the failpoint aborted the broker"
    assert len(table(floe, topic).metadata.snapshots) <= KEEP + 2, "the expiry before the kill was committed"
    floe.start(env={})
    exact(floe, topic, produced)
    produce_rounds(floe, topic, 2, produced)
    exact(floe, topic, produced)


# ---------------------------------------------------------------- compaction

TARGET = 32 * 1024
MIN_INPUT_FILES = 5
COMPACT_BROKER = {"floe.iceberg.tick-ms": "20", "floe.iceberg.maintenance-interval-ms": "300"}


def compact_config(max_age_ms: int = 1000) -> dict:
    return {**topic_config(), "floe.iceberg.snapshot.max-age-ms": str(max_age_ms),
            "floe.iceberg.target-file-size-bytes": str(TARGET),
            "floe.iceberg.compaction.min-input-files": str(MIN_INPUT_FILES)}


def commit_rounds(floe, topic: str, commits: int, produced: dict, per_round: int = 4):
    """Produces a few records at a time, each round waiting for the next tiering commit,
    until the topic has had `commits` commits (one small data file or two each)."""
    from clients import producer

    p = producer(floe.bootstrap, **{"linger.ms": 0})
    i = 0
    start = time.monotonic()
    while (done := floe.metric("floe_iceberg_commits_total", topic=topic)) < commits:
        part = i % 2
        offsets: dict = {}
        msgs = messages(part, per_round, value_bytes=120)
        for k, m in enumerate(msgs):
            p.produce(topic, partition=part, key=m.get("key"), value=m["value"], headers=m.get("headers"),
                      on_delivery=lambda err, msg, k=k: offsets.__setitem__(k, (err, msg.offset())))
        p.flush(30)
        for k, m in enumerate(msgs):
            err, off = offsets[k]
            assert err is None, err
            produced[(part, off)] = m
        i += 1
        wait_until(lambda: floe.metric("floe_iceberg_commits_total", topic=topic) > done, timeout=30, interval=0.01,
                   what=f"tiering commit {done + 1}")
        assert time.monotonic() - start < 600, f"{done} commits in 10 minutes"


def live_files(t) -> list:
    return [task.file for task in t.scan().plan_files()]


def test_500_commits_with_maintenance_keep_the_table_small_and_exact(floe_factory):
    pytest.importorskip("duckdb")

    floe = floe_factory("floe", overrides=COMPACT_BROKER)
    topic = create_topic(floe.bootstrap, unique_topic("compact"), partitions=2, config=compact_config())
    produced: dict = {}
    commit_rounds(floe, topic, 500, produced)
    # Maintenance runs after a commit once its interval passed, so the table settles
    # (no group left with MIN_INPUT_FILES small files) only while commits go on: one
    # more commit after each pause until it has. On a loaded machine the last
    # maintenance of the 500 may not have run yet.
    def settled():
        time.sleep(0.5)
        commit_rounds(floe, topic, floe.metric("floe_iceberg_commits_total", topic=topic) + 1, produced)
        time.sleep(0.5)
        t = table(floe, topic)
        small = [f for f in live_files(t) if f.file_size_in_bytes < TARGET * 3 // 4] if t else []
        return t if t and len(small) < MIN_INPUT_FILES else None
    t = wait_until(settled, timeout=90, interval=0.1, what="small files compacted")

    assert floe.metric("floe_iceberg_compactions_total", topic=topic) >= 10
    assert floe.metric("floe_iceberg_compacted_files_total", topic=topic) >= 400
    files = live_files(t)
    total = sum(f.file_size_in_bytes for f in files)
    small = [f for f in files if f.file_size_in_bytes < TARGET * 3 // 4]
    # Whole target-size files, plus what the last compaction left and the commits since.
    assert len(files) <= total // (TARGET * 3 // 4) + 2 * MIN_INPUT_FILES + 2, [f.file_size_in_bytes for f in files]
    assert sum(f.file_size_in_bytes for f in small) <= total // 2 or total < 2 * TARGET, [f.file_size_in_bytes for f in files]
    # Snapshots: only those younger than the max age (plus the ones kept) survive 500 commits.
    assert len(t.metadata.snapshots) < 100, len(t.metadata.snapshots)
    # Metadata a reader opens stays bounded: manifests are merged, not one per commit.
    manifests = t.current_snapshot().manifests(t.io)
    assert len(manifests) <= 40, len(manifests)
    metadata_bytes = floe.metric("floe_iceberg_metadata_bytes", topic=topic)
    assert 0 < metadata_bytes < 2_000_000, metadata_bytes
    assert floe.metric("floe_iceberg_data_files", topic=topic) > 0

    # Read exactly: every offset once, values equal, by pyiceberg and by DuckDB.
    exact(floe, topic, produced)
    assert sorted(duckdb_offsets(floe, topic)) == sorted(produced), "DuckDB reads every offset once"
    # The summary offsets survived compaction and expiry: after a restart tiering resumes exactly.
    floe.restart()
    produce_rounds(floe, topic, 1, produced)
    exact(floe, topic, produced)


@pytest.mark.parametrize("failpoint", ["tiering.compact.written", "tiering.compact.committed"])
def test_a_kill_during_compaction_leaves_an_exact_table(floe_factory, failpoint):
    # Nothing is compacted while the small files pile up (compaction off) ...
    config = {**compact_config(max_age_ms=86_400_000), "floe.iceberg.compaction.enabled": "false"}
    floe = floe_factory("floe", overrides=COMPACT_BROKER, env={"FAILPOINTS": f"{failpoint}=return(abort)"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("compactkill"), partitions=2, config=config)
    produced: dict = {}
    commit_rounds(floe, topic, 12, produced)
    files_before = len(live_files(table(floe, topic)))
    assert files_before >= MIN_INPUT_FILES
    # ... then it is switched on, and the next commit's maintenance compacts and dies at the failpoint.
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    from clients import admin
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("floe.iceberg.compaction.enabled", "true", incremental_operation=AlterConfigOpType.SET)])
    a = admin(floe.bootstrap)  # kept: a dropped client cancels its futures
    for f in a.incremental_alter_configs([resource]).values():
        f.result(30)
    time.sleep(0.5)
    # One acknowledged batch: its commit's maintenance compacts, and the broker dies there.
    msgs = messages(0, 5)
    for o, m in zip(produce_all(floe.bootstrap, topic, msgs, partition=0), msgs):
        produced[(0, o)] = m
    floe.proc.wait(timeout=60)
    assert floe.proc.returncode != 0, "the failpoint aborted the broker"
    t = table(floe, topic)
    if failpoint == "tiering.compact.committed":
        assert t.current_snapshot().summary.operation.value == "replace", "the compaction before the kill was committed"
    else:
        assert t.current_snapshot().summary.operation.value == "append", "nothing was committed before the kill"
    # Readable as it is, no duplicate and no missing offset among what was tiered.
    rows, n = wait_for_rows(floe.data_dir, topic, 0, timeout=0)
    assert n == len(rows) and set(rows) <= set(produced)
    floe.start(env={})
    exact(floe, topic, produced)
    commit_rounds(floe, topic, floe.metric("floe_iceberg_commits_total", topic=topic) + 2, produced)
    exact(floe, topic, produced)
    wait_until(lambda: len(live_files(table(floe, topic))) < files_before, timeout=30, interval=0.3,
               what="compacted after the restart")
    exact(floe, topic, produced)
