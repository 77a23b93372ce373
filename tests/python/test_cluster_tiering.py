"""Iceberg tiering in a cluster: three brokers, one etcd, one shared warehouse and catalog.

All brokers point at the same SQLite catalog file and local warehouse directory (the
single-machine stand-in for S3 + a REST catalog), or at the test REST catalog
(`rest_catalog_server.py`). The table is read back independently with pyiceberg's
SqlCatalog. What is checked, on real processes and real clients:

- only a partition's leader tiers it: every snapshot names its committing broker
  (`floe.broker-id`) and each partition it tiers was led by that broker; partitions of one
  topic led by different brokers are committed to one table by several brokers, and every
  record lands exactly once (offsets per partition contiguous from 0, values as in the log);
- kill -9 of a partition's leader mid-stream (producers go on, the leader comes back): the
  new leader resumes from the table's committed offsets, nothing tiered twice or skipped;
- a leader paused while it tiers, replaced, resumed after the new leader committed:
  whatever it had in flight lands as a valid step or not at all;
- followers hold retention at the table's committed offsets: with the leader unable to
  commit (failpoint), followers keep every record (a topic without tiering, same retention,
  shows they would otherwise delete); once a new leader has tiered them, they delete.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from clients import admin, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from failpoints import assert_failpoints_armed
from floe_process import wait_until
from history import Workload, check

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")


class Lake:
    """The catalog and warehouse every broker shares, and an independent reader of it:
    a SQLite file and a directory (`sql`), or the test REST catalog (`rest`: a pyiceberg
    SqlCatalog behind the REST API, which answers 409 to a commit whose requirements fail)."""

    def __init__(self, kind: str, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.kind = kind
        self.rest = None
        tick = {"floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "1000"}
        if kind == "sql":
            self.settings = {"floe.iceberg.catalog-uri": f"sqlite:{directory / 'catalog.db'}",
                             "floe.iceberg.warehouse": str(directory / "warehouse"), **tick}
            self.db, self.name, self.warehouse = directory / "catalog.db", "floe", f"file://{directory / 'warehouse'}"
        else:
            from rest_catalog_server import RestCatalogServer
            self.rest = RestCatalogServer(directory).start()
            self.settings = {"floe.iceberg.catalog-type": "rest", "floe.iceberg.catalog-uri": self.rest.uri, **tick}
            self.db, self.name, self.warehouse = directory / "catalog.db", "rest", self.rest.warehouse

    def table(self, topic: str):
        if not self.db.exists():
            return None
        cat = pyiceberg_sql.SqlCatalog(self.name, uri=f"sqlite:///{self.db}", warehouse=self.warehouse)
        try:
            return cat.load_table(("kafka", topic))
        except Exception:  # noqa: BLE001 - not created yet
            return None

    def stop(self):
        if self.rest is not None:
            self.rest.stop()


@pytest.fixture(params=["sql", "rest"])
def shared_lake(request, tmp_path):
    lake = Lake(request.param, tmp_path / "lake")
    yield lake
    lake.stop()


@pytest.fixture
def sql_lake(tmp_path):
    return Lake("sql", tmp_path / "lake")


def _table(lake: Lake, topic: str):
    return lake.table(topic)


def _rows(lake: Lake, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row, duplicates included."""
    t = _table(lake, topic)
    if t is None:
        return []
    return [(r["partition"], r["offset"], r["value"]) for r in t.scan(selected_fields=("partition", "offset", "value")).to_arrow().to_pylist()]


def _commits(lake: Lake, topic: str) -> list[tuple[int, dict[int, tuple[int, int]]]]:
    """Per tiering commit (an `append` snapshot), oldest first: (committing broker,
    partition -> tiered range). Compaction's `replace` snapshots tier nothing: left out."""
    t = _table(lake, topic)
    if t is None:
        return []
    out = []
    for s in sorted(t.metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms)):
        if s.summary is not None and s.summary.operation.value != "append":
            continue
        props = s.summary.additional_properties if s.summary else {}
        ranges = {int(k.rsplit(".", 1)[1]): tuple(int(x) for x in v.split("-"))
                  for k, v in props.items() if k.startswith("floe.offsets.")}
        out.append((int(props.get("floe.broker-id", "-1")), ranges))
    return out


def _create(bootstrap: str, topic: str, partitions: int = 0, assignment: list[list[int]] | None = None,
            config: dict | None = None) -> str:
    a = admin(bootstrap)
    conf = {"min.insync.replicas": "2", **(config or {})}
    nt = (NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment, config=conf) if assignment
          else NewTopic(topic, num_partitions=partitions, replication_factor=3, config=conf))
    a.create_topics([nt], request_timeout=15)[topic].result(timeout=20)
    return topic


def _state(etcd, prefix: str, topic: str, p: int) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _log_start(b, topic: str, p: int) -> int:
    """The base offset of the broker's oldest segment of topic-p."""
    return min(int(f.stem) for f in b.partition_dir(topic, p).glob("*.log"))


def _high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1] for p in range(partitions)}
    finally:
        c.close()


def _wait_all_tiered(lake: Lake, topic: str, hws: dict[int, int], timeout: float = 90) -> list:
    """Waits until the table holds every offset below each partition's high watermark;
    fails at once on a duplicate row."""
    def done():
        rows = _rows(lake, topic)
        keys = [(p, o) for p, o, _ in rows]
        assert len(keys) == len(set(keys)), f"duplicate rows: {len(keys)} rows for {len(set(keys))} offsets"
        have = {p: sum(1 for q, _ in keys if q == p) for p in hws}
        return rows if all(have[p] >= hw for p, hw in hws.items()) else None
    return wait_until(done, timeout=timeout, interval=0.5, what=f"{topic}: every offset below the high watermark tiered")


def _assert_exactly_once(rows: list, log: dict[tuple[int, int], bytes], partitions: int):
    """Rows per partition are offsets 0..n-1, each once, holding what the log holds."""
    by_key = {(p, o): v for p, o, v in rows}
    assert len(by_key) == len(rows), "duplicate rows"
    for p in range(partitions):
        offsets = sorted(o for q, o in by_key if q == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous from 0"
    for k, v in log.items():
        assert by_key.get(k) == v, f"{k}: table has {by_key.get(k)!r}, log has {v!r}"


def test_only_leaders_tier_and_several_brokers_commit_to_one_table(floe_factory, etcd, shared_lake):
    lake = shared_lake
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=lake.settings)
    agreed_view(brokers, live=3)
    partitions = 6
    topic = _create(brokers[0].bootstrap, unique_topic("cltier"), partitions,
                    config={"floe.iceberg.enabled": "true", "segment.bytes": "8000"})
    leaders = {p: _state(etcd, prefix, topic, p)["leader"] for p in range(partitions)}
    assert len(set(leaders.values())) == 3, f"partitions led by every broker: {leaders}"
    produced = {}
    for p in range(partitions):
        values = [f"p{p}-{i:05d}".encode() + b"x" * 60 for i in range(400)]
        acked = produce_all(_bootstrap(brokers), topic, [{"value": v} for v in values], partition=p, **{"batch.size": 2000})
        for o, v in zip(acked, values):
            produced[(p, o)] = v
    rows = _wait_all_tiered(lake, topic, {p: 400 for p in range(partitions)})
    _assert_exactly_once(rows, produced, partitions)
    assert len(rows) == len(produced)
    # Only leaders committed, each only the partitions it leads; several brokers committed.
    commits = _commits(lake, topic)
    assert {b for b, _ in commits} == {1, 2, 3}, commits
    for broker, ranges in commits:
        for p in ranges:
            assert leaders[p] == broker, f"broker {broker} tiered {topic}-{p}, led by {leaders[p]}"
    # Each commit's ranges follow on from the one before for that partition: no overlap, no gap.
    nxt = {}
    for _, ranges in commits:
        for p, (first, last) in ranges.items():
            assert first == nxt.get(p, 0), f"{topic}-{p}: range {first}-{last} after {nxt.get(p, 0)}"
            nxt[p] = last + 1
    # Followers tier nothing: their committed-offset gauge is read from the table, but no
    # commit of theirs is counted.
    for b in brokers:
        assert b.metric("floe_iceberg_commits_total", topic=topic) == sum(
            1 for broker, _ in commits if broker == node_id(b))
    if lake.rest is not None:
        path = f"/v1/namespaces/kafka/tables/{topic}"
        statuses = [st for m, p, st in lake.rest.requests if m == "POST" and p == path]
        # Every accepted POST is a tiering commit or a compaction (a replace snapshot).
        replaces = sum(1 for s in _table(lake, topic).metadata.snapshots if s.summary.operation.value == "replace")
        assert statuses.count(200) == len(commits) + replaces, statuses
        print(f"REST commits: {statuses.count(200)} accepted, {statuses.count(409)} refused as stale (409)")


def test_a_killed_leader_hands_tiering_over_exactly_once(floe_factory, etcd, sql_lake):
    lake = sql_lake
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=lake.settings)
    agreed_view(brokers, live=3)
    partitions = 3
    topic = _create(brokers[0].bootstrap, unique_topic("cltierkill"), partitions,
                    config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
    wl = Workload(_bootstrap(brokers), topic, partitions, producers=2, consumers=0, rate_per_producer=300).start()
    try:
        # The first leader of partition 0 has committed some of it.
        first = _state(etcd, prefix, topic, 0)
        wait_until(lambda: any(0 in r for b, r in _commits(lake, topic) if b == first["leader"]),
                   timeout=60, interval=0.5, what=f"a commit of {topic}-0 by its leader")
        victim = _by_id(brokers, first["leader"])
        victim.kill9()
        wait_until(lambda: (s := _state(etcd, prefix, topic, 0))["leader"] not in (-1, first["leader"])
                   and s["leader_epoch"] > first["leader_epoch"], timeout=30, what=f"a new leader of {topic}-0")
        new_leader = _state(etcd, prefix, topic, 0)["leader"]
        # The new leader tiers partition 0 from where the table says.
        wait_until(lambda: any(0 in r for b, r in _commits(lake, topic) if b == new_leader),
                   timeout=60, interval=0.5, what=f"a commit of {topic}-0 by the new leader {new_leader}")
        before = wl.acked_count()
        wait_until(lambda: wl.acked_count() > before + 300, timeout=60, what="acknowledgements after the kill")
        victim.start()
        agreed_view(brokers, live=3)
        wait_until(lambda: all(sorted(_state(etcd, prefix, topic, p)["isr"]) == [1, 2, 3] for p in range(partitions)),
                   timeout=60, interval=0.3, what="full ISRs again")
        assert not wl.fatal_errors, wl.fatal_errors
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0
    history = wl.drain()
    verdict = check(history)
    assert verdict.ok, verdict.summary()
    log = {(p, o): v for p, o, v in history.drain}
    hws = {p: hi for p, (_, hi) in history.drain_bounds.items()}
    assert all(lo == 0 for lo, _ in history.drain_bounds.values()), history.drain_bounds
    rows = _wait_all_tiered(lake, topic, hws)
    _assert_exactly_once(rows, log, partitions)
    acked = {(p, o): v for _, p, o, v in history.acks}
    assert all(log[k] == v for k, v in acked.items())
    assert len(rows) == sum(hws.values())
    # Partition 0 was committed by both leaders, in order, without overlap or gap.
    commits = _commits(lake, topic)
    p0 = [(b, r[0]) for b, r in commits if 0 in r]
    assert {b for b, _ in p0} >= {first["leader"], new_leader}, p0
    nxt = {}
    for _, ranges in commits:
        for p, (lo, hi) in ranges.items():
            assert lo == nxt.get(p, 0), f"{topic}-{p}: range {lo}-{hi} after {nxt.get(p, 0)}"
            nxt[p] = hi + 1
    print(f"{verdict.counts['acked']} acked; {len(commits)} commits; partition 0 by {[b for b, _ in p0]}")


def test_followers_hold_retention_until_the_table_has_the_records(floe_factory, etcd, sql_lake):
    lake = sql_lake
    settings = {**lake.settings, "log.retention.check.interval.ms": "200"}
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides=settings)
    # Broker 1 cannot commit: as the leader it tiers nothing, so the table stays empty.
    b1 = _by_id(brokers, 1)
    b1.stop()
    b1.start(env={"FAILPOINTS": "tiering.iceberg.commit=return"})
    assert_failpoints_armed(b1)
    agreed_view(brokers, live=3)
    retention = {"segment.bytes": "4000", "retention.ms": "1000"}
    tiered = _create(brokers[0].bootstrap, unique_topic("clfloor"), assignment=[[1, 2, 3]],
                     config={"floe.iceberg.enabled": "true", **retention})
    control = _create(brokers[0].bootstrap, unique_topic("clplain"), assignment=[[1, 2, 3]], config=retention)
    assert _state(etcd, prefix, tiered, 0)["leader"] == 1
    values = [f"v{i:05d}".encode() + b"x" * 80 for i in range(400)]
    small = {"batch.size": 1000}  # batches below segment.bytes
    offsets = produce_all(_bootstrap(brokers), tiered, [{"value": v} for v in values], **small)
    produce_all(_bootstrap(brokers), control, [{"value": v} for v in values], **small)
    followers = [_by_id(brokers, 2), _by_id(brokers, 3)]
    # Retention runs on the followers: the control topic's old segments go.
    wait_until(lambda: all(_log_start(f, control, 0) > 0 for f in followers), timeout=60, interval=0.3,
               what="followers to apply retention to the topic without tiering")
    wait_until(lambda: "failpoint tiering.iceberg.commit" in b1.stderr_text(), timeout=30, interval=0.3,
               what="the leader to try (and fail) to commit")
    assert _rows(lake, tiered) == []
    assert all(_log_start(f, tiered, 0) == 0 for f in followers), "a follower deleted records the table does not have"
    # The leader dies; a follower takes over and tiers everything, from offset 0.
    b1.kill9()
    wait_until(lambda: _state(etcd, prefix, tiered, 0)["leader"] in (2, 3), timeout=30, what="a new leader")
    new_leader = _state(etcd, prefix, tiered, 0)["leader"]
    rows = _wait_all_tiered(lake, tiered, {0: 400})
    _assert_exactly_once(rows, dict(zip(((0, o) for o in offsets), values)), 1)
    assert {b for b, _ in _commits(lake, tiered)} == {new_leader}
    # Now the table has them, retention goes on: on the new leader and on the follower,
    # never past the table's committed offset.
    wait_until(lambda: all(_log_start(f, tiered, 0) > 0 for f in followers), timeout=60, interval=0.3,
               what="retention of tiered segments on both live replicas")
    assert all(_log_start(f, tiered, 0) <= 400 for f in followers)


def test_a_paused_leader_resumed_after_its_replacement_tiered_adds_nothing_twice(floe_factory, etcd, sql_lake):
    """The leader is SIGSTOPped while it tiers continuously (wherever its pass is: planning,
    writing Parquet, committing), replaced, and resumed after the new leader has committed
    the partition: whatever it had in flight either lands as a valid step or fails."""
    lake = sql_lake
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={**lake.settings, "floe.iceberg.target-lag-ms": "200"})
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("cltierpause"), 1,
                    config={"floe.iceberg.enabled": "true", "segment.bytes": "20000"})
    wl = Workload(_bootstrap(brokers), topic, 1, producers=2, consumers=0, rate_per_producer=300).start()
    try:
        first = _state(etcd, prefix, topic, 0)
        old = _by_id(brokers, first["leader"])
        wait_until(lambda: sum(1 for b, r in _commits(lake, topic) if b == first["leader"]) >= 2,
                   timeout=60, interval=0.3, what="commits by the first leader")
        old.proc.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: _state(etcd, prefix, topic, 0)["leader"] not in (-1, first["leader"]), timeout=30,
                       what="a new leader while the old one is paused")
            new_leader = _state(etcd, prefix, topic, 0)["leader"]
            wait_until(lambda: any(b == new_leader for b, _ in _commits(lake, topic)), timeout=60, interval=0.3,
                       what=f"a commit by the new leader {new_leader}")
        finally:
            old.proc.send_signal(signal.SIGCONT)
        agreed_view(brokers, live=3)
        wait_until(lambda: sorted(_state(etcd, prefix, topic, 0)["isr"]) == [1, 2, 3], timeout=60, interval=0.3,
                   what="the old leader back in the ISR")
        assert not wl.fatal_errors, wl.fatal_errors
    finally:
        wl.stop()
    history = wl.drain()
    verdict = check(history)
    assert verdict.ok, verdict.summary()
    log = {(p, o): v for p, o, v in history.drain}
    rows = _wait_all_tiered(lake, topic, {0: history.drain_bounds[0][1]})
    _assert_exactly_once(rows, log, 1)
    nxt = 0
    commits = _commits(lake, topic)
    for _, ranges in commits:
        lo, hi = ranges[0]
        assert lo == nxt, f"range {lo}-{hi} after {nxt}"
        nxt = hi + 1
    assert "offsets may be duplicated" not in old.stderr_text()
    stale = old.stderr_text().count("another writer tiered this partition since the plan")
    print(f"{len(commits)} commits by {[b for b, _ in commits]}; the resumed leader's stale commits refused: {stale}")
