"""Transactions (KIP-98) with confluent-kafka (librdkafka) against a real floe.

- commit and abort visibility: read_committed consumers see committed records
  only, read_uncommitted see everything, and the last stable offset (the
  read_committed high watermark) holds back at an open transaction;
- fencing: a second producer with the same transactional.id aborts the first
  one's open transaction and the first one cannot commit;
- a hung transaction (its producer SIGSTOPped) is aborted after
  transaction.timeout.ms, so read_committed consumers move on;
- consume-transform-produce with send_offsets_to_transaction: offsets are
  committed with the output, and are invisible (UNSTABLE) while open;
- crash points in the middle of a commit: after a restart the transaction
  completes in the direction decided, with a marker on every partition.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from clients import CLIENT_TIMEOUT_S, committed_watermark, create_topic, uncommitted_watermark, unique_topic
from failpoints import assert_failpoints_armed
from floe_process import wait_until

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}


def txn_producer(bootstrap: str, txn_id: str, **conf) -> Producer:
    base = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 5,
        "message.timeout.ms": 20000,
    }
    base.update(conf)
    p = Producer(base)
    p.init_transactions(CLIENT_TIMEOUT_S)
    return p


def read(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int | None = None,
         settle_s: float = 1.0) -> list:
    """Every record of `topic` visible at `isolation`, read from offset 0 of each partition.
    Reads until `expect` records arrived (or, without `expect`, until nothing new came for `settle_s`)."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "txn-reader",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "enable.partition.eof": True,
    })
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        last_new = time.monotonic()
        while time.monotonic() < deadline:
            if expect is not None and len(out) >= expect:
                break
            if expect is None and time.monotonic() - last_new > settle_s:
                break
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(m)
                last_new = time.monotonic()
        return out
    finally:
        c.close()


def values(msgs) -> list[str]:
    return sorted(m.value().decode() for m in msgs)


def produce_txn(p: Producer, topic: str, partitions: int, label: str, n: int):
    for i in range(n):
        p.produce(topic, key=f"{label}-{i}".encode(), value=f"{label}-{i}".encode(), partition=i % partitions)
    p.flush(CLIENT_TIMEOUT_S)


def test_committed_records_are_visible_to_read_committed_and_aborted_ones_are_not(floe_factory):
    floe = floe_factory("floe", overrides=OVERRIDES)
    topic = create_topic(floe.bootstrap, unique_topic("txn"), partitions=2)
    p = txn_producer(floe.bootstrap, "vis-1")
    p.begin_transaction()
    produce_txn(p, topic, 2, "c1", 10)
    p.commit_transaction(CLIENT_TIMEOUT_S)
    p.begin_transaction()
    produce_txn(p, topic, 2, "a1", 5)
    p.abort_transaction(CLIENT_TIMEOUT_S)
    p.begin_transaction()
    produce_txn(p, topic, 2, "c2", 3)
    p.commit_transaction(CLIENT_TIMEOUT_S)

    committed = read(floe.bootstrap, topic, 2, "read_committed", expect=13)
    assert values(committed) == sorted([f"c1-{i}" for i in range(10)] + [f"c2-{i}" for i in range(3)])
    everything = read(floe.bootstrap, topic, 2, "read_uncommitted", expect=18)
    assert values(everything) == sorted([f"c1-{i}" for i in range(10)] + [f"a1-{i}" for i in range(5)]
                                        + [f"c2-{i}" for i in range(3)])
    # Nothing more arrives, at either level, once everything is read (markers are not records).
    assert len(read(floe.bootstrap, topic, 2, "read_committed")) == 13
    # Three markers per partition: the log end is past every record, and the LSO is there too.
    for part in range(2):
        assert committed_watermark(floe.bootstrap, topic, part) == uncommitted_watermark(floe.bootstrap, topic, part)


def test_an_open_transaction_holds_the_last_stable_offset(floe_factory):
    floe = floe_factory("floe", overrides=OVERRIDES)
    topic = create_topic(floe.bootstrap, unique_topic("lso"))
    plain = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all"})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(CLIENT_TIMEOUT_S)
    p = txn_producer(floe.bootstrap, "lso-1")
    p.begin_transaction()
    produce_txn(p, topic, 1, "open", 4)
    # Records after the open transaction's first one stay invisible to read_committed,
    # even non-transactional ones.
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(CLIENT_TIMEOUT_S)
    assert uncommitted_watermark(floe.bootstrap, topic, 0) == 6
    assert committed_watermark(floe.bootstrap, topic, 0) == 1
    assert values(read(floe.bootstrap, topic, 1, "read_committed")) == ["before"]
    assert len(read(floe.bootstrap, topic, 1, "read_uncommitted", expect=6)) == 6
    p.commit_transaction(CLIENT_TIMEOUT_S)
    wait_until(lambda: committed_watermark(floe.bootstrap, topic, 0) == 7, 10, what="LSO past the commit marker")
    assert values(read(floe.bootstrap, topic, 1, "read_committed", expect=6)) == sorted(
        ["before", "after"] + [f"open-{i}" for i in range(4)])


def test_a_second_instance_fences_the_first_and_aborts_its_transaction(floe_factory):
    floe = floe_factory("floe", overrides=OVERRIDES)
    topic = create_topic(floe.bootstrap, unique_topic("fence"))
    zombie = txn_producer(floe.bootstrap, "fence-1")
    zombie.begin_transaction()
    produce_txn(zombie, topic, 1, "zombie", 3)
    successor = txn_producer(floe.bootstrap, "fence-1")
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(CLIENT_TIMEOUT_S)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), fenced.value
    successor.begin_transaction()
    produce_txn(successor, topic, 1, "successor", 2)
    successor.commit_transaction(CLIENT_TIMEOUT_S)
    assert values(read(floe.bootstrap, topic, 1, "read_committed", expect=2)) == ["successor-0", "successor-1"]
    assert len(read(floe.bootstrap, topic, 1, "read_uncommitted")) == 5


HUNG_PRODUCER = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, topic = sys.argv[1], sys.argv[2]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "hung-1", "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"hung-{i}".encode(), partition=0)
    p.flush(30)
    print("ready", flush=True)
    sys.stdin.read()
""")


def test_a_hung_transaction_is_aborted_by_its_timeout(floe_factory):
    floe = floe_factory("floe", overrides=OVERRIDES)
    topic = create_topic(floe.bootstrap, unique_topic("hung"))
    proc = subprocess.Popen([sys.executable, "-c", HUNG_PRODUCER, floe.bootstrap, topic],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        assert committed_watermark(floe.bootstrap, topic, 0) == 0, "held at the open transaction"
        wait_until(lambda: committed_watermark(floe.bootstrap, topic, 0) == 4, 15,
                   what="the coordinator to abort the timed-out transaction")
        assert time.monotonic() - started < 15
        other = txn_producer(floe.bootstrap, "after-hung")
        other.begin_transaction()
        produce_txn(other, topic, 1, "later", 2)
        other.commit_transaction(CLIENT_TIMEOUT_S)
        assert values(read(floe.bootstrap, topic, 1, "read_committed", expect=2)) == ["later-0", "later-1"]
        assert "aborting a timed-out transaction" in floe.stderr_text()
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_consume_transform_produce_commits_offsets_with_the_output(floe_factory):
    floe = floe_factory("floe", overrides=OVERRIDES)
    source = create_topic(floe.bootstrap, unique_topic("in"))
    sink = create_topic(floe.bootstrap, unique_topic("out"))
    plain = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all"})
    for i in range(50):
        plain.produce(source, value=str(i).encode(), partition=0)
    plain.flush(CLIENT_TIMEOUT_S)

    group = "ctp-app"
    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    p = txn_producer(floe.bootstrap, "ctp-1")
    c.subscribe([source])
    seen = 0
    aborted_once = False
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while seen < 50 and time.monotonic() < deadline:
        msgs = [m for m in c.consume(num_messages=10, timeout=0.5) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(sink, value=b"x" + m.value(), partition=0)
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), CLIENT_TIMEOUT_S)
        if not aborted_once:
            # While open, the offsets are pending: a plain OffsetFetch shows the old commit (none)
            # and a stable one (read_committed asks with require_stable, KIP-447) is refused
            # with UNSTABLE_OFFSET_COMMIT until the transaction ends.
            plain_view = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group, "isolation.level": "read_uncommitted"})
            assert plain_view.committed([TopicPartition(source, 0)], timeout=CLIENT_TIMEOUT_S)[0].offset < 0
            plain_view.close()
            stable_view = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group, "isolation.level": "read_committed"})
            with pytest.raises(KafkaException):
                stable_view.committed([TopicPartition(source, 0)], timeout=2)
            stable_view.close()
            p.abort_transaction(CLIENT_TIMEOUT_S)
            aborted_once = True
            # Rewind to the last committed position and do it again.
            c.seek(TopicPartition(source, 0, 0))
            continue
        p.commit_transaction(CLIENT_TIMEOUT_S)
        seen += len(msgs)
    c.close()
    assert seen == 50
    out = read(floe.bootstrap, sink, 1, "read_committed", expect=50)
    assert sorted(int(m.value()[1:]) for m in out) == list(range(50)), "every input exactly once"
    check = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group})
    assert check.committed([TopicPartition(source, 0)], timeout=CLIENT_TIMEOUT_S)[0].offset == 50
    check.close()


@pytest.mark.parametrize("point", ["txn.end.prepared", "txn.markers.between", "txn.end.before_complete"])
def test_a_crash_during_commit_completes_it_after_restart(floe_factory, point):
    floe = floe_factory("floe", overrides=OVERRIDES, env={"FAILPOINTS": f"{point}=return(abort)"})
    assert_failpoints_armed(floe)
    topic = create_topic(floe.bootstrap, unique_topic("crash"), partitions=3)
    p = txn_producer(floe.bootstrap, f"crash-{point}", **{"message.timeout.ms": 5000, "transaction.timeout.ms": 60000})
    p.begin_transaction()
    produce_txn(p, topic, 3, "doomed-or-not", 9)
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    wait_until(lambda: not floe.running, 10, what=f"floe to abort at {point}")
    floe.start(env={})
    # The decision (commit) was durable before the crash: it completes at startup.
    for part in range(3):
        wait_until(lambda part=part: committed_watermark(floe.bootstrap, topic, part) == uncommitted_watermark(floe.bootstrap, topic, part),
                   20, what=f"LSO of partition {part} to reach its log end")
    assert len(read(floe.bootstrap, topic, 3, "read_committed", expect=9)) == 9
    assert "completing a prepared transaction" in floe.stderr_text()
