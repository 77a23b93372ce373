"""Kill -9 tests of shared mode (`floe.iceberg.storage=shared`, issue #16,
docs/shared-mode.md 3.1 and stage 8): the Iceberg table is the only copy of a
partition's old records, and a crash at the local-deletion step, at the tiering
commits that gate it, or while a fetch is served from the table, must lose
nothing acknowledged and serve nothing twice.

- Local deletion: the broker aborts (`return(abort)`, a real SIGABRT) at
  `log.local_retention.taken`, `log.retention.delete`, `tiering.iceberg.commit`,
  `tiering.iceberg.committed` or `tiering.log.committed` while an idempotent
  workload (`history.Workload`) and a transactional one (`history.TxnWorkload`)
  write two shared topics whose small segments leave local disk continuously
  (`local.retention.ms=0`); it restarts on the same data dir and the workloads go on. Throughout, the local
  log start offset (ListOffsets -4) is never above what the table holds and the
  log start offset (-2) stays 0; after the restart local deletion goes on; the
  history checker is valid over drains from offset 0 at both isolation levels,
  which cross the table/log boundary (the table-rebuild fetch path is counted).
- Table-served fetches: a confluent-kafka consumer assigned at offset 0 backfills
  a partition whose first records are in the table only, while the broker is
  SIGKILLed mid-backfill (or aborts at `shared.read.rebuilt`, a rebuild in
  flight) and restarts; the consumer's own loop reads on, and what it read equals
  an independent drain: no gap, no duplicate, no reordering.

Table retention under kill -9 is `test_shared_retention.py`'s. Each case crashes
once; `FLOE_SHARED_CRASH_CYCLES=n` crashes n times at the same point.

Needs a `floe` built with `--features failpoints` (tests/run-all.sh does).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

import kwire
from clients import create_topic, produce_all, unique_topic
from failpoints import assert_failpoints_armed
from floe_process import wait_until
from history import READ_UNCOMMITTED, TxnWorkload, Workload, check, drain_both, drain_partition

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")

CYCLES = int(os.environ.get("FLOE_SHARED_CRASH_CYCLES", "1"))
PARTITIONS = 2

BROKER = {
    "floe.iceberg.tick-ms": "100",
    "floe.iceberg.target-lag-ms": "300",
    "log.retention.check.interval.ms": "200",
    "log.flush.scheduler.interval.ms": "200",
    "group.initial.rebalance.delay.ms": "0",
}

TOPIC = {
    "floe.iceberg.enabled": "true",
    "floe.iceberg.storage": "shared",
    # Batches of the workloads' producers reach ~13 KB after a restart (200 records): below this.
    "segment.bytes": "32768",
    "local.retention.ms": "0",
    "retention.ms": "-1",
}

# Failpoint -> evaluations let through before the abort, so that segments have
# left local disk already when it comes. `log.retention.delete` passes once per
# file (.log, .index, .timeindex) of each segment deleted; the tiering points
# once per commit of either topic (`tiering.log.committed`: the `__log` commits).
POINTS = {
    "log.local_retention.taken": 4,
    "log.retention.delete": 12,
    "tiering.iceberg.commit": 6,
    "tiering.iceberg.committed": 6,
    "tiering.log.committed": 4,
}


def catalog(data_dir: Path):
    ice = data_dir / "iceberg"
    return pyiceberg_sql.SqlCatalog(
        "floe", uri=f"sqlite:///{ice / 'catalog.db'}", warehouse=f"file://{ice / 'warehouse'}")


def table_ends(data_dir: Path, topic: str) -> dict[int, int]:
    """Partition -> the committed table end (`floe.next-offset.<p>` of the current snapshot)."""
    try:
        t = catalog(data_dir).load_table(("kafka", topic))
    except Exception:  # noqa: BLE001 - not created yet
        return {}
    snap = t.current_snapshot()
    if snap is None:
        return {}
    props = snap.summary.additional_properties
    return {int(k.rsplit(".", 1)[1]): int(v) for k, v in props.items() if k.startswith("floe.next-offset.")}


def list_offsets(floe, topic: str, partition: int) -> tuple[int, int] | None:
    """(log start offset -2, local log start offset -4), or None while the broker is down."""
    try:
        out = []
        with kwire.KafkaConn(floe.host, floe.port) as conn:
            for ts in (-2, -4):
                r = kwire.parse_list_offsets_v8(conn.call_flexible(
                    kwire.API_LIST_OFFSETS, 8, kwire.list_offsets_v8(topic, partition, ts)))
                err, _ts, off = r[(topic, partition)]
                if err != 0:
                    return None
                out.append(off)
        return out[0], out[1]
    except (OSError, ConnectionError, EOFError):
        return None


class Watch:
    """Polls every partition's log start and local log start offsets, then the table
    ends, on a thread. The table end only grows, so a local log start above the end
    read after it is an offset neither on local disk nor in the table."""

    def __init__(self, floe, topics: list[str], partitions: int):
        self.floe, self.topics, self.partitions = floe, topics, partitions
        self.max_local: dict[tuple[str, int], int] = {}
        self.violations: list[str] = []
        self.regressions: list[tuple] = []  # local log start lower than seen before (a reload): information
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="watch")

    def start(self) -> "Watch":
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(30)

    def local_start(self, topic: str, partition: int) -> int:
        got = list_offsets(self.floe, topic, partition)
        return -1 if got is None else got[1]

    def _run(self):
        while not self._stop.is_set():
            for topic in self.topics:
                seen = {p: list_offsets(self.floe, topic, p) for p in range(self.partitions)}
                ends = table_ends(self.floe.data_dir, topic)
                for p, got in seen.items():
                    if got is None:
                        continue
                    start, local = got
                    self.samples += 1
                    if start != 0:
                        self.violations.append(f"{topic}/{p}: log start offset {start}, not 0")
                    if local > ends.get(p, 0) and local > 0:
                        self.violations.append(f"{topic}/{p}: local log start {local} above the table end {ends.get(p)}")
                    prev = self.max_local.get((topic, p), 0)
                    if local < prev:
                        self.regressions.append((topic, p, prev, local))
                    self.max_local[(topic, p)] = max(prev, local)
            self._stop.wait(0.3)


def abort_count(floe, point: str) -> int:
    return floe.stderr_text(limit=10_000_000).count(f"failpoint {point}: aborting")


@pytest.mark.parametrize("point", list(POINTS))
def test_kill_at_local_deletion_loses_nothing_acknowledged(floe_factory, point):
    armed = {"FAILPOINTS": f"{point}={POINTS[point]}*off->return(abort)"}
    floe = floe_factory("floe", overrides=BROKER, env=armed)
    assert_failpoints_armed(floe)
    plain = create_topic(floe.bootstrap, unique_topic("shc-idem"), partitions=PARTITIONS, config=TOPIC)
    txn = create_topic(floe.bootstrap, unique_topic("shc-txn"), partitions=PARTITIONS, config=TOPIC)
    wl = Workload(floe.bootstrap, plain, PARTITIONS, producers=2, consumers=1, rate_per_producer=300).start()
    twl = TxnWorkload(floe.bootstrap, txn, PARTITIONS, txn_producers=2, plain_producers=1, consumers=1,
                      seed=POINTS[point], plain_rate=150).start()
    watch = Watch(floe, [plain, txn], PARTITIONS).start()
    acked = lambda: wl.acked_count() + twl.acked_count()  # noqa: E731
    before = {}
    try:
        for cycle in range(CYCLES):
            wait_until(lambda: not floe.running, timeout=90, what=f"abort {cycle + 1} at {point}")
            assert floe.kill9() == -6, "not a SIGABRT"
            assert abort_count(floe, point) == cycle + 1
            at_crash = acked()
            assert at_crash > 0, "nothing acknowledged before the abort: the case proves little"
            before = dict(watch.max_local)
            floe.start(env=armed if cycle + 1 < CYCLES else {})
            # Re-armed, the broker may abort again before anything more is acknowledged.
            wait_until(lambda: acked() > at_crash + 300 or not floe.running, timeout=90,
                       what="acknowledgements after the restart")
        wait_until(lambda: acked() > at_crash + 300, timeout=90, what="acknowledgements after the last restart")
        # Local deletion goes on after the restart: past every local log start seen before the crash.
        for topic in (plain, txn):
            for p in range(PARTITIONS):
                wait_until(lambda: watch.local_start(topic, p) > before.get((topic, p), 0), timeout=90, interval=0.3,
                           what=f"{topic}/{p}: local deletion past {before.get((topic, p), 0)} after the restart")
    finally:
        watch.stop()
        twl.stop()
        wl.stop()
    assert not wl.fatal_errors, wl.fatal_errors
    assert not watch.violations, watch.violations[:10]
    assert watch.samples > 0

    drain_both(floe.bootstrap, plain, PARTITIONS, wl.history)
    drain_both(floe.bootstrap, txn, PARTITIONS, twl.history)
    for topic, h in ((plain, wl.history), (txn, twl.history)):
        for p in range(PARTITIONS):
            assert h.drain_bounds[p][0] == 0 and h.committed_drain_bounds[p][0] == 0, "drains from offset 0"
            assert list_offsets(floe, topic, p)[1] > 0, f"{topic}/{p}: nothing below the local log start"
        verdict = check(h)
        assert verdict.ok, f"{topic}: {verdict.summary()}"
        print(f"{point} {topic}: {verdict.summary()}")
    assert twl.txn_count("committed") > 0 and twl.txn_count("aborted") > 0
    assert floe.metric("floe_fetch_bytes_total", path="table-rebuild") > 0, "the drains read nothing from the table"
    print(f"{point}: local log start regressions after a restart (files reloaded): {watch.regressions or 'none'}")


FILL = 6000
BACKFILL = {
    **BROKER,
    # A small cache: the consumer's next fetch misses it, so every few fetches rebuild from the table.
    "floe.iceberg.shared.cache-bytes": "65536",
}


class Backfill:
    """A plain consumer (assign at offset 0, no group commits) reading on its own thread,
    slowly (a small fetch and prefetch queue), recording (offset, value) in read order."""

    def __init__(self, bootstrap: str, topic: str):
        self.read: list[tuple[int, bytes]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("backfill"),
                            "enable.auto.commit": False, "auto.offset.reset": "error",
                            "isolation.level": READ_UNCOMMITTED, "max.partition.fetch.bytes": 16384,
                            "queued.max.messages.kbytes": 32, "fetch.wait.max.ms": 100,
                            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})
        self._c.assign([TopicPartition(topic, 0, 0)])
        self._thread = threading.Thread(target=self._run, daemon=True, name="backfill")

    def start(self) -> "Backfill":
        self._thread.start()
        return self

    def last(self) -> int:
        return self.read[-1][0] if self.read else -1

    def _run(self):
        while not self._stop.is_set():
            for m in self._c.consume(num_messages=100, timeout=0.2):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        self.errors.append(str(m.error()))
                    continue
                self.read.append((m.offset(), m.value()))
            time.sleep(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        self._c.close()


@pytest.mark.parametrize("crash", ["sigkill", "shared.read.rebuilt"])
def test_kill_during_a_table_served_backfill(floe_factory, crash):
    armed = {"FAILPOINTS": "shared.read.rebuilt=6*off->return(abort)"} if crash != "sigkill" else {}
    floe = floe_factory("floe", overrides=BACKFILL, env=armed)
    if armed:
        assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("shc-fill"), config=TOPIC)
    wl = Workload(floe.bootstrap, topic, 1, producers=1, consumers=1, rate_per_producer=150)
    # FILL records first, acknowledged and recorded as one more producer's, tiered and gone locally.
    values = [f"fill-{i:06d}-".encode() + b"." * 80 for i in range(FILL)]
    offsets = produce_all(floe.bootstrap, topic, [{"value": v} for v in values], **{"linger.ms": 5, "batch.size": 16000})
    for v, o in zip(values, offsets):
        wl.history.record_send("fill", 0, v)
        wl.history.record_ack("fill", 0, o, v)
    wait_until(lambda: (list_offsets(floe, topic, 0) or (0, 0))[1] >= FILL * 9 // 10, timeout=90, interval=0.3,
               what="the filled records to leave local disk")
    local_start = list_offsets(floe, topic, 0)[1]
    wl.start()
    bf = Backfill(floe.bootstrap, topic).start()
    kills_at = []
    try:
        for cycle in range(CYCLES):
            if armed:
                wait_until(lambda: not floe.running, timeout=90, what=f"abort {cycle + 1} at shared.read.rebuilt")
                assert floe.kill9() == -6, "not a SIGABRT"
                assert abort_count(floe, "shared.read.rebuilt") == cycle + 1
            else:
                target = local_start * (cycle + 1) // (CYCLES + 2)
                wait_until(lambda: bf.last() >= target, timeout=90, what=f"the backfill past {target}")
                floe.kill9()
            at_kill = bf.last()
            assert at_kill < local_start - 1, f"the backfill was done ({at_kill}) before the crash: not mid-backfill"
            kills_at.append(at_kill)
            acked_at_kill = wl.acked_count()
            floe.start(env=armed if cycle + 1 < CYCLES else {})
            wait_until(lambda: wl.acked_count() > acked_at_kill + 100 or not floe.running, timeout=90,
                       what="acknowledgements after the restart")
        wait_until(lambda: wl.acked_count() > acked_at_kill + 100, timeout=90, what="acknowledgements after the last restart")
        wait_until(lambda: bf.last() >= local_start, timeout=120, what="the backfill to cross the local log start")
        crossed = floe.metric("floe_fetch_bytes_total", path="table-rebuild")
        assert crossed > 0, "after the restart the backfill was not served from the table"
    finally:
        wl.stop()
    assert not wl.fatal_errors, wl.fatal_errors
    drain_both(floe.bootstrap, topic, 1, wl.history)
    hw = wl.history.drain_bounds[0][1]
    wait_until(lambda: bf.last() >= hw - 1 or bf.errors, timeout=90, what=f"the backfill to reach {hw}")
    bf.stop()
    assert not bf.errors, bf.errors[:5]

    # An independent drain after the end: the backfill read exactly it, in order, once.
    _lo, _hi, independent = drain_partition(floe.bootstrap, topic, 0, READ_UNCOMMITTED)
    want = [(o, v) for _p, o, v in independent if o < hw]
    got = bf.read[:len(want)]
    firsts = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w][:1]
    assert got == want, (f"backfill differs from the drain: {len(got)} vs {len(want)} records, "
                         f"first difference {firsts}")
    for o, v in bf.read:
        wl.history.record_read("backfill", 0, o, v)
    verdict = check(wl.history)
    assert verdict.ok, verdict.summary()
    print(f"{crash}: backfill {len(bf.read)} records, crashed after it read up to {kills_at}, "
          f"local log start {local_start}; {verdict.summary()}")
