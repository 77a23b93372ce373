"""Disk errors through failpoints (issue #6 §2.4): an fsync or a write that
fails takes the log directory offline, loudly; nothing the failed call
covered is acknowledged, and a restart recovers everything acknowledged.

Needs a `floe` built with `--features failpoints` (tests/run-all.sh does).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from clients import admin, consume_all, create_topic, unique_topic, watermarks
from failpoints import assert_failpoints_armed
from floe_process import wait_until
from history import History, check
from test_faults import _batches

OFFLINE_LINE = "LOG DIRECTORY OFFLINE"


def _produce_one_by_one(floe, topic: str, h: History, n: int, prefix: str) -> list:
    """Sends n records one at a time (acks=all, no retries); returns each send's error code or None."""
    p = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all", "retries": 0,
                  "message.timeout.ms": 10_000, "linger.ms": 0})
    outcomes = []

    def on_delivery(err, msg):
        if err is None:
            h.record_ack("p0", msg.partition(), msg.offset(), msg.value())
        else:
            h.failures.append(("p0", msg.value(), str(err)))
        outcomes.append(None if err is None else err.code())

    for i in range(n):
        value = f"{prefix}-{i:04d}".encode()
        h.record_send("p0", 0, value)
        p.produce(topic, value=value, partition=0, on_delivery=on_delivery)
        assert p.flush(15) == 0, "no delivery report within 15 s"
    return outcomes


def _restart_and_check(floe, topic: str, h: History):
    """Kill -9, restart with the failpoints disarmed (the fault was one disk
    error, not a broken disk: left armed, a counted failpoint fires again on
    its Nth hit after the restart, and for a tick-driven one that is a race
    with the test), then check the history."""
    floe.kill9()
    floe.start(env={})
    lo, hi = watermarks(floe.bootstrap, topic)
    h.drain_bounds[0] = (lo, hi)
    for m in consume_all(floe.bootstrap, topic):
        h.drain.append((0, m.offset(), m.value()))
    verdict = check(h)
    assert verdict.ok, verdict.summary()
    return verdict


@pytest.mark.parametrize("point", ["log.segment.flush", "log.segment.append"])
def test_io_error_takes_the_log_dir_offline(floe_factory, point):
    """The failpoint fires once, after a few good appends (flush.messages=1, so
    each append fsyncs). That produce gets KAFKA_STORAGE_ERROR; so does every
    later produce and offset lookup, though the failpoint is off again: the
    directory is offline. Metadata still answers, the metric says so, the log
    says it once. After a restart every acknowledged record is there, once."""
    # Each good append fsyncs three files (.log, .index, .timeindex): 8 appends pass.
    skip = 24 if point == "log.segment.flush" else 8
    floe = floe_factory("floe", env={"FAILPOINTS": f"{point}={skip}*off->1*return->off"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("eio"), config={"flush.messages": "1"})
    h = History()

    outcomes = _produce_one_by_one(floe, topic, h, 12, "before")
    good = outcomes.index(KafkaError.KAFKA_STORAGE_ERROR) if KafkaError.KAFKA_STORAGE_ERROR in outcomes else None
    assert good is not None and good > 0, f"outcomes {outcomes}: want acks, then KAFKA_STORAGE_ERROR"
    assert all(o is None for o in outcomes[:good]), outcomes
    assert all(o == KafkaError.KAFKA_STORAGE_ERROR for o in outcomes[good:]), \
        f"after the failure every produce must be refused (offline), got {outcomes[good:]}"

    # Offset lookups are refused too; Metadata and the metric still answer.
    with pytest.raises(KafkaException) as lookup:
        watermarks(floe.bootstrap, topic)
    assert lookup.value.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR, lookup.value
    assert topic in admin(floe.bootstrap).list_topics(timeout=10).topics
    assert floe.metric("floe_log_dir_offline", dir=str(floe.data_dir)) == 1
    assert floe.stderr_text().count(OFFLINE_LINE) == 1, "the offline transition is logged exactly once"
    assert "os error 5" in floe.stderr_text(), "the log names the errno (EIO)"

    if point == "log.segment.append":
        # The short write was cut back: the segment holds whole batches only.
        for seg in floe.segment_files(topic):
            data = seg.read_bytes()
            batches = _batches(data)
            assert (batches[-1][1] if batches else 0) == len(data), f"{seg}: a partial batch stayed"

    verdict = _restart_and_check(floe, topic, h)
    assert verdict.counts["acked"] == good
    if point == "log.segment.append":
        assert not verdict.unacked_read, "a refused short write must not be readable"
    # Online again after the restart.
    assert _produce_one_by_one(floe, topic, h, 3, "after") == [None] * 3
    print(f"{point}: {good} acknowledged, then refused\n{verdict.summary()}")


def test_full_disk_refuses_the_append_but_stays_online(floe_factory):
    """ENOSPC on a write that is cut back cleanly is a refusal, not a failure of
    the directory: the produce gets KAFKA_STORAGE_ERROR, the next one succeeds
    (the disk-full test in test_faults.py does the same on a real full tmpfs)."""
    floe = floe_factory("floe", env={"FAILPOINTS": "log.segment.append=3*off->1*return(enospc)->off"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("enospc"))
    h = History()
    outcomes = _produce_one_by_one(floe, topic, h, 6, "r")
    assert outcomes == [None, None, None, KafkaError.KAFKA_STORAGE_ERROR, None, None], outcomes
    assert floe.metric("floe_log_dir_offline", dir=str(floe.data_dir)) == 0
    verdict = _restart_and_check(floe, topic, h)
    assert not verdict.unacked_read, "the refused record must not be in the log"


def test_failed_checkpoint_rename_takes_the_log_dir_offline(floe_factory):
    """The maintenance thread's checkpoint rename fails (its 9th checkpoint
    write: 2 for each internal topic created at startup, `__transaction_state`
    and `__consumer_offsets`, 2 at topic creation, then 2 per 200 ms tick): the
    directory goes offline although no request failed, and produce is refused
    from then on; a restart recovers every acknowledged record."""
    floe = floe_factory("floe", overrides={"log.flush.scheduler.interval.ms": "200"},
                        env={"FAILPOINTS": "log.checkpoint.write=8*off->1*return->off"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("rename"))
    h = History()
    before = _produce_one_by_one(floe, topic, h, 5, "before")
    wait_until(lambda: floe.metric("floe_log_dir_offline", dir=str(floe.data_dir)) == 1, timeout=30,
               what="the directory to go offline after the failed rename")
    assert "rename into place" in floe.stderr_text() and floe.stderr_text().count(OFFLINE_LINE) == 1
    assert _produce_one_by_one(floe, topic, h, 3, "offline") == [KafkaError.KAFKA_STORAGE_ERROR] * 3
    verdict = _restart_and_check(floe, topic, h)
    assert verdict.counts["acked"] == before.count(None)
    assert _produce_one_by_one(floe, topic, h, 2, "after") == [None] * 2
