"""Crash points (issue #6 §2.7): the broker aborts (`return(abort)`, a real
SIGABRT: no unwinding, no flush) at a failpoint inside a multi-step write
while idempotent acks=all producers and group consumers run; it restarts
without the failpoint and the history checker judges the result.

Each case asserts: the abort happened at that point; right after it the
checkpoints and producer snapshots are not ahead of the log end in the
segment files; after the restart no acknowledged record is lost or
duplicated and producers make progress; after a clean stop no `.tmp`,
`.deleted`, `.swap` or `.cleaned` file is left anywhere in the data dir.

Needs a `floe` built with `--features failpoints` (tests/run-all.sh does).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import Producer

from clients import create_topic, unique_topic
from failpoints import assert_failpoints_armed
from floe_process import wait_until
from history import Workload, check
from test_faults import _batches, _parse_checkpoint

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "log.segment.bytes": "65536",
    "log.flush.scheduler.interval.ms": "200",
    "log.retention.check.interval.ms": "200",
    "floe.iceberg.tick-ms": "100",
    "floe.iceberg.target-lag-ms": "300",
}

# Failpoint -> evaluations let through before the abort (so the workload is
# under way when it comes). Rolls come every few seconds at this rate;
# checkpoints are written twice per 200 ms maintenance tick; consumers commit
# twice a second; each segment deletion passes the point once per file.
CRASH_POINTS = {
    "log.segment.roll": 3,
    "producer.snapshot.write": 3,
    "log.checkpoint.write": 20,
    "log.checkpoint.renamed": 20,
    "log.retention.delete": 1,
    "group.offsets.write": 8,
    "tiering.iceberg.commit": 1,
    "tiering.iceberg.committed": 1,
}

STRAY_SUFFIXES = (".tmp", ".deleted", ".swap", ".cleaned")


def _strays(data_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if p.name.endswith(STRAY_SUFFIXES))


def _log_end_in_files(pdir: Path) -> int:
    """The log end offset the segment files hold: after the last whole batch of
    the last segment, or that segment's base offset when it has none."""
    segs = sorted(pdir.glob("*.log"), key=lambda p: int(p.stem))
    if not segs:
        return 0
    batches = _batches(segs[-1].read_bytes())
    return batches[-1][3] + 1 if batches else int(segs[-1].stem)


def _assert_nothing_ahead_of_the_log(data_dir: Path):
    """Checkpoints and producer snapshots never name an offset past the log end on disk."""
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        path = data_dir / name
        if not path.exists():
            continue
        for (topic, part), offset in _parse_checkpoint(path).items():
            end = _log_end_in_files(data_dir / f"{topic}-{part}")
            assert offset <= end, f"{name}: {topic}-{part} at {offset}, but the log ends at {end}"
    for pdir in (d for d in data_dir.iterdir() if d.is_dir() and list(d.glob("*.log"))):
        end = _log_end_in_files(pdir)
        for snap in pdir.glob("*.snapshot"):
            assert int(snap.stem) <= end, f"{snap} is ahead of the log end {end}"


def _fill_for_retention(bootstrap: str, topic: str):
    """~200 KB into a topic whose retention keeps 30 KB: retention deletes segments."""
    # Batches well below segment.bytes (an append larger than a segment is refused).
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 4000,
                  "message.timeout.ms": 10_000})
    for i in range(2000):
        p.produce(topic, value=f"fill-{i:05d}-".encode() + b"f" * 90)
        p.poll(0)
    p.flush(10)  # the broker may abort meanwhile: outcomes do not matter here


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_abort_at_crash_point_loses_nothing_acknowledged(floe_factory, point):
    skip = CRASH_POINTS[point]
    floe = floe_factory("floe", overrides=OVERRIDES,
                        env={"FAILPOINTS": f"{point}={skip}*off->return(abort)"})
    assert_failpoints_armed(floe)
    partitions = 4
    tiered = point.startswith("tiering.")
    topic = create_topic(floe.bootstrap, unique_topic(point.replace(".", "-")), partitions=partitions,
                         config={"floe.iceberg.enabled": "true"} if tiered else None)
    wl = Workload(floe.bootstrap, topic, partitions, producers=3, consumers=2, rate_per_producer=400).start()
    try:
        if point == "log.retention.delete":
            # Retention is only driven by the filler: let the workload get going first.
            wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")
            filler = create_topic(floe.bootstrap, unique_topic("fill"),
                                  config={"segment.bytes": "10000", "retention.bytes": "30000"})
            _fill_for_retention(floe.bootstrap, filler)
        wait_until(lambda: not floe.running, timeout=60, what=f"the abort at {point}")
        rc = floe.kill9()
        assert rc == -6, f"floe exited with {rc}, not SIGABRT"
        assert f"failpoint {point}: aborting" in floe.stderr_text()
        acked_at_crash = wl.acked_count()
        strays_at_crash = _strays(floe.data_dir)
        _assert_nothing_ahead_of_the_log(floe.data_dir)
        if tiered:
            from test_tiering import table_rows
            rows_at_crash = len(table_rows(floe.data_dir, topic)[0])

        floe.start(env={})
        wait_until(lambda: wl.acked_count() > acked_at_crash + 200, timeout=60,
                   what="acknowledgements after the restart")
        if tiered:
            # The tiering thread must commit again after the crash, from the catalog's offsets.
            wait_until(lambda: len(table_rows(floe.data_dir, topic)[0]) > rows_at_crash, timeout=60,
                       what="an Iceberg commit after the restart")
    finally:
        wl.stop()
    assert not wl.fatal_errors, f"producer fatal errors: {wl.fatal_errors}"
    history = wl.drain()
    verdict = check(history)
    assert verdict.ok, verdict.summary()
    assert acked_at_crash > 0, "nothing was acknowledged before the abort: the case proves little"

    if tiered:
        rows, n = table_rows(floe.data_dir, topic)
        assert n == len(rows), f"{n - len(rows)} duplicate rows in the Iceberg table"
        drained = {(part, off): val for part, off, val in history.drain}
        wrong = [k for k, r in rows.items() if drained.get(k) != r["value"]]
        assert not wrong, f"table rows that differ from the log: {wrong[:5]}"

    floe.stop()
    strays = _strays(floe.data_dir)
    if tiered:
        # Parquet files of the commit the abort cut short are orphans, removed by the
        # tiering thread's orphan sweep once old enough; anything else must be gone.
        strays = [s for s in strays if not s.startswith("iceberg/")]
    assert not strays, f"stray files after recovery and a clean stop: {strays}"
    print(f"{point}: abort after {acked_at_crash} acks; stray files at the crash: {strays_at_crash or 'none'}\n"
          f"{verdict.summary()}")
