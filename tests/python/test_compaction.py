"""Log compaction end to end, with confluent-kafka against a real floe.

A `cleanup.policy=compact` topic with small segments, `min.cleanable.dirty.ratio`
0.01 and a short `delete.retention.ms` gets many updates of many keys and some
tombstones; the cleaner (backoff 100 ms) compacts it. Then a consumer reading
from the beginning must find every key's latest value at the very offset the
producer's acknowledgement gave it, no superseded value, offsets strictly
increasing, and the log far smaller than what was written; tombstoned keys
vanish once `delete.retention.ms` has passed. A keyless record is refused with
INVALID_RECORD. A broker aborted (the honest kill -9) at a step of the segment
swap comes back with a consistent log, which the next clean finishes; so does one
whose power is cut (the FUSE rig of test_power_loss.py) while the cleaner works.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from failpoints import assert_failpoints_armed
from floe_process import FloeStartError, wait_until
from test_power_loss import powerloss_fs  # noqa: F401 - the fixture

KEYS = 60
ROUNDS = 12
TOMBSTONED = [f"key-{i}" for i in range(0, KEYS, 6)]
RETENTION_MS = 1500

BROKER = {"log.cleaner.backoff.ms": "100", "log.retention.check.interval.ms": "200"}
TOPIC = {
    "cleanup.policy": "compact",
    "segment.bytes": "32768",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(RETENTION_MS),
}


def create_topic(floe, name: str, config: dict):
    admin = AdminClient({"bootstrap.servers": floe.bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        f.result(timeout=10)


def produce(floe, topic: str, records) -> tuple[dict, int]:
    """Produces (key, value) pairs in order; returns {key: (offset, value)} of
    the last acknowledged record of each key, and the value bytes written."""
    acked: dict[str, tuple[int, bytes | None]] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            key = msg.key().decode()
            if key not in acked or acked[key][0] < msg.offset():
                acked[key] = (msg.offset(), msg.value())

    p = Producer({"bootstrap.servers": floe.bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 16384})
    written = 0
    for key, value in records:
        p.produce(topic, key=key.encode(), value=value, on_delivery=on_delivery)
        written += len(value or b"")
        p.poll(0)
    assert p.flush(15) == 0
    assert not errors, errors
    return acked, written


def updates(rounds: int = ROUNDS):
    for r in range(rounds):
        for k in range(KEYS):
            yield f"key-{k}", f"key-{k} round {r} ".encode() + b"x" * 200


def consume_all(floe, topic: str) -> list[tuple[int, str, bytes | None]]:
    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join to wait for
    rows = []
    try:
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 1.0:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            rows.append((msg.offset(), msg.key().decode(), msg.value()))
            idle_since = time.monotonic()
    finally:
        c.close()
    return rows


def log_bytes(floe, topic: str) -> int:
    return sum(p.stat().st_size for p in floe.segment_files(topic))


def assert_latest_at_acked_offsets(rows, acked, tombstones_gone: bool):
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets)), "offsets strictly increasing"
    seen = {key: (offset, value) for offset, key, value in rows}
    for key, (offset, value) in acked.items():
        if value is None and tombstones_gone:
            assert key not in seen, f"{key} was deleted: its tombstone must be gone"
        else:
            assert seen.get(key) == (offset, value), f"{key}: latest value at offset {offset}"


def test_compaction_keeps_the_latest_value_of_each_key_at_its_offset(floe_factory):
    floe = floe_factory("floe", overrides=BROKER)
    topic = "compacted"
    create_topic(floe, topic, TOPIC)
    acked, written = produce(floe, topic, updates())
    acked_t, _ = produce(floe, topic, [(k, None) for k in TOMBSTONED])
    acked.update(acked_t)
    # One more record after the segment.ms roll, so the tombstones' segment is sealed.
    time.sleep(0.5)
    acked_l, _ = produce(floe, topic, [("last", b"v")])
    acked.update(acked_l)

    def compacted():
        rows = consume_all(floe, topic)
        keys = [k for _, k, _ in rows if k != "last"]
        return rows if len(keys) == len(set(keys)) else None
    rows = wait_until(compacted, timeout=20, interval=0.3, what="one record per key")
    assert floe.metric("floe_log_cleaner_runs_total") >= 1
    assert_latest_at_acked_offsets(rows, acked, tombstones_gone=False)
    assert floe.metric("floe_log_cleaner_written_bytes_total") < floe.metric("floe_log_cleaner_read_bytes_total")
    assert floe.metric("floe_log_cleaner_seconds_since_last_run") >= 0
    text = floe.metrics_text()
    assert f'floe_log_cleaner_dirty_ratio{{partition="0",topic="{topic}"}}' in text, text
    assert log_bytes(floe, topic) < written / 4, "the log shrank"

    # Past delete.retention.ms, the tombstones go too (no new data needed).
    def tombstones_gone():
        rows = consume_all(floe, topic)
        return rows if not any(value is None for _, _, value in rows) else None
    rows = wait_until(tombstones_gone, timeout=RETENTION_MS / 1000 + 15, interval=0.5, what="tombstones removed")
    assert_latest_at_acked_offsets(rows, acked, tombstones_gone=True)
    assert not {k for _, k, _ in rows} & set(TOMBSTONED)

    # A restart finds the same compacted log, and appends go on at the log end.
    floe.restart()
    assert consume_all(floe, topic) == rows
    acked_after, _ = produce(floe, topic, [("key-1", b"after restart")])
    assert acked_after["key-1"][0] == acked["last"][0] + 1


def test_a_keyless_record_is_refused_by_a_compacted_topic(floe):
    create_topic(floe, "compacted-keys", {"cleanup.policy": "compact"})
    create_topic(floe, "plain", {})
    errors = []
    p = Producer({"bootstrap.servers": floe.bootstrap, "retries": 0})
    p.produce("compacted-keys", value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    p.produce("plain", value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(10) == 0
    codes = sorted([e.code() if e else None for e in errors], key=str)
    assert KafkaError.INVALID_RECORD in codes, errors
    assert None in codes, "a delete-policy topic still takes keyless records"
    # librdkafka does not show the response's error_message; the broker logs it.
    assert "Compacted topic cannot accept message without key in topic partition compacted-keys-0" in floe.stderr_text()


@pytest.mark.parametrize("point", ["cleaner.swap.index_renamed", "cleaner.swap.renamed", "cleaner.old.deleted"])
def test_an_abort_during_the_swap_leaves_a_consistent_log(floe_factory, point):
    # The data goes in with the cleaner off; the restart arms the abort and turns it on.
    floe = floe_factory("floe", overrides={**BROKER, "log.cleaner.enable": "false"})
    topic = "compacted"
    create_topic(floe, topic, TOPIC)
    acked, _ = produce(floe, topic, updates(rounds=6))
    time.sleep(0.5)
    acked.update(produce(floe, topic, [("last", b"v")])[0])
    floe.stop()
    try:
        floe.start(overrides=BROKER, env={"FAILPOINTS": f"{point}=return(abort)"})
    except FloeStartError:
        pass  # the cleaner may reach the failpoint before the listener check
    wait_until(lambda: not floe.running, timeout=20, what=f"the abort at {point}")
    assert_failpoints_armed(floe)
    assert f"failpoint {point}: aborting" in floe.stderr_text()

    floe.start(env={})
    # Old segments or cleaned ones, never a mix: every acknowledged latest value is where it was.
    assert_latest_at_acked_offsets(consume_all(floe, topic), acked, tombstones_gone=False)
    assert not [p for p in floe.partition_dir(topic).iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]

    def compacted():
        rows = consume_all(floe, topic)
        keys = [k for _, k, _ in rows]
        return rows if len(keys) == len(set(keys)) else None
    rows = wait_until(compacted, timeout=20, interval=0.3, what="compacted after restart")
    assert_latest_at_acked_offsets(rows, acked, tombstones_gone=False)


def test_power_cuts_while_cleaning_keep_every_acknowledged_latest_value(floe_factory, powerloss_fs):
    """The power-loss rig (test_power_loss.py): with `flush.messages=1` every acknowledged
    record is durable, so however a kill -9 and a power cut (some of them torn) fall on
    the cleaner's work (offset map, cleaned files, the swap's renames, the checkpoint),
    the restarted broker must serve every key's latest acknowledged value at its offset,
    and leave no cleaner file behind."""
    from test_power_loss import _seed, _start_on

    rng = random.Random(_seed())
    floe = _start_on(floe_factory, powerloss_fs, BROKER)
    topic = "compacted"
    create_topic(floe, topic, {**TOPIC, "flush.messages": "1"})
    acked: dict = {}
    runs = 0
    for cycle in range(4):
        fresh, _ = produce(floe, topic, updates(rounds=4))
        acked.update(fresh)  # later offsets than anything acknowledged before
        time.sleep(rng.uniform(0.0, 0.8))  # the cleaner (backoff 100 ms) is at the new segments
        runs += floe.metric("floe_log_cleaner_runs_total")
        floe.kill9()
        dropped = powerloss_fs.cut(rng.randrange(1, 1 << 62) if cycle % 2 else None)
        print(f"cycle {cycle}: cleaner runs so far {runs}, cut dropped {dropped}")
        floe.start()
        assert_latest_at_acked_offsets(consume_all(floe, topic), acked, tombstones_gone=False)
        assert not [p for p in floe.partition_dir(topic).iterdir() if p.suffix in (".cleaned", ".swap")]
    assert runs >= 1, "the cleaner never ran before a cut"

    def compacted():
        rows = consume_all(floe, topic)
        keys = [k for _, k, _ in rows]
        return rows if len(keys) == len(set(keys)) else None
    rows = wait_until(compacted, timeout=30, interval=0.3, what="compacted after the last cut")
    assert_latest_at_acked_offsets(rows, acked, tombstones_gone=False)
