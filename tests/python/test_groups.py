"""Consumer groups end to end: confluent-kafka members failing over (range and
cooperative-sticky), committed offsets across a broker restart, the initial rebalance
delay, and kafka-python / aiokafka groups."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import create_topic, produce_all, unique_topic
from floe_process import wait_until

HERE = Path(__file__).parent
PARTITIONS = 6
PER_PARTITION = 40


class Member:
    """A group member in a subprocess; its JSON events are collected by a thread."""

    def __init__(self, bootstrap, topic, group, strategy, instance_id=None):
        args = [bootstrap, topic, group, strategy] + ([instance_id] if instance_id else [])
        self.proc = subprocess.Popen([sys.executable, str(HERE / "group_member.py"), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events: list[dict] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for e in list(self.events):
            if e["event"] == "assign":
                owned |= set(e["partitions"])
            elif e["event"] == "revoke":
                owned -= set(e["partitions"])
        return owned

    def records(self) -> set[tuple[int, int]]:
        return {(e["p"], e["o"]) for e in list(self.events) if e["event"] == "record"}

    def kill9(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def committed(bootstrap, group, topic) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def produce_round(bootstrap, topic, round_no):
    for p in range(PARTITIONS):
        produce_all(bootstrap, topic, [{"value": f"r{round_no}-p{p}-{i}".encode()} for i in range(PER_PARTITION // 2)],
                    partition=p)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_failover_after_session_timeout_and_restart(floe_factory, strategy):
    floe = floe_factory("floe", overrides={"group.initial.rebalance.delay.ms": "1000"})
    topic = create_topic(floe.bootstrap, unique_topic("grp"), partitions=PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce_round(floe.bootstrap, topic, 0)
    members = [Member(floe.bootstrap, topic, group, strategy) for _ in range(3)]
    history: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        wait_until(lambda: all(len(m.owned()) == 2 for m in members), timeout=30, what="2 partitions for each of 3 members")
        owned = [m.owned() for m in members]
        assert set().union(*owned) == set(range(PARTITIONS)), owned
        victim, survivors = members[0], members[1:]
        lost = victim.owned()
        wait_until(lambda: len(set().union(*(m.records() for m in members))) == PARTITIONS * PER_PARTITION // 2,
                   timeout=30, what="first round consumed")
        victim.kill9()
        killed_at = time.monotonic()
        produce_round(floe.bootstrap, topic, 1)

        def survivors_own_everything():
            for p, o in committed(floe.bootstrap, group, topic).items():
                history[p].append(o)
            return set().union(*(m.owned() for m in survivors)) == set(range(PARTITIONS))

        wait_until(survivors_own_everything, timeout=30, interval=0.5, what=f"survivors to take {lost}")
        took = time.monotonic() - killed_at
        assert took >= 5, f"partitions moved after {took:.1f}s, before the 6 s session timeout"
        everything = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}

        def all_consumed_and_committed():
            c = committed(floe.bootstrap, group, topic)
            for p, o in c.items():
                history[p].append(o)
            return everything <= set().union(*(m.records() for m in members)) and all(
                o == PER_PARTITION for o in c.values())

        wait_until(all_consumed_and_committed, timeout=30, interval=0.5, what="every record consumed and committed")
    finally:
        for m in members:
            m.kill9()
    for p, offsets in history.items():
        offsets = [o for o in offsets if o >= 0]
        assert offsets == sorted(offsets), f"committed offset of partition {p} moved backwards: {offsets}"

    before = committed(floe.bootstrap, group, topic)
    floe.restart()
    after = wait_until(lambda: _committed_or_none(floe.bootstrap, group, topic), timeout=20, what="offsets after restart")
    assert after == before == {p: PER_PARTITION for p in range(PARTITIONS)}


def _committed_or_none(bootstrap, group, topic):
    try:
        return committed(bootstrap, group, topic)
    except Exception:  # COORDINATOR_LOAD_IN_PROGRESS surfaces as a timeout on a short call
        return None


def test_first_assignment_within_initial_rebalance_delay(floe_factory):
    delay_ms = 3000
    floe = floe_factory("floe", overrides={"group.initial.rebalance.delay.ms": str(delay_ms)})
    topic = create_topic(floe.bootstrap, unique_topic("delay"), partitions=2)
    assigned = []
    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": f"d-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest"})  # librdkafka's default session timeout: 45 s
    try:
        started = time.monotonic()
        c.subscribe([topic], on_assign=lambda _c, ps: assigned.append(time.monotonic() - started))
        deadline = time.monotonic() + 15
        while not assigned and time.monotonic() < deadline:
            c.poll(0.05)
        assert assigned, "no assignment within 15 s"
        assert assigned[0] <= (delay_ms + 1000) / 1000, f"first assignment after {assigned[0]:.2f}s"
    finally:
        c.close()


def test_kafka_python_group(floe):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP

    topic = create_topic(floe.bootstrap, unique_topic("kpyg"), partitions=2)
    producer = KafkaProducer(bootstrap_servers=floe.bootstrap, enable_idempotence=False)
    for i in range(40):
        producer.send(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.flush(timeout=30)
    producer.close()
    group = f"kpy-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=1000)
    try:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 40 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(40))
        consumer.commit()
        assert consumer.committed(KTP(topic, 0)) == 20 and consumer.committed(KTP(topic, 1)) == 20
    finally:
        consumer.close()


def test_aiokafka_group(floe):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    topic = create_topic(floe.bootstrap, unique_topic("aiog"), partitions=2)
    for p in range(2):
        produce_all(floe.bootstrap, topic, [{"value": f"p{p}-{i}".encode()} for i in range(15)], partition=p)

    async def run():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=floe.bootstrap, group_id=f"aio-{uuid.uuid4().hex[:8]}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 30 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    got.extend(records)
            await consumer.commit()
            return got, [await consumer.committed(ATP(topic, p)) for p in range(2)]
        finally:
            await consumer.stop()

    got, offsets = asyncio.run(run())
    assert len(got) == 30
    assert offsets == [15, 15]


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(floe):
    """KIP-345: a static member (group.instance.id) that dies and comes back within its
    session timeout gets its partitions back; the other member sees no rebalance."""
    topic = create_topic(floe.bootstrap, unique_topic("static"), partitions=PARTITIONS)
    group = f"static-{uuid.uuid4().hex[:8]}"
    a = Member(floe.bootstrap, topic, group, "range", instance_id="static-a")
    b = Member(floe.bootstrap, topic, group, "range", instance_id="static-b")
    members = [a, b]
    try:
        wait_until(lambda: len(a.owned()) + len(b.owned()) == PARTITIONS and a.owned() and b.owned(),
                   timeout=30, what="both static members assigned")
        # Let the group settle: no assignment change for a moment.
        events_a = len([e for e in a.events if e["event"] in ("assign", "revoke")])
        time.sleep(1.5)
        assert len([e for e in a.events if e["event"] in ("assign", "revoke")]) == events_a
        b_owned = b.owned()
        b.kill9()
        b2 = Member(floe.bootstrap, topic, group, "range", instance_id="static-b")
        members.append(b2)
        wait_until(lambda: b2.owned() == b_owned, timeout=20, what="restarted static member gets its partitions")
        # Stay past the point where a rebalance would have reached member a.
        time.sleep(2.0)
        churn = [e for e in a.events[events_a:] if e["event"] in ("assign", "revoke")]
        assert churn == [], f"member a went through a rebalance: {churn}"
        produce_round(floe.bootstrap, topic, 0)
        wait_until(lambda: {p for p, _ in b2.records()} == b_owned, timeout=20,
                   what="restarted static member consumes its partitions")
    finally:
        for m in members:
            m.kill9()


def test_a_stable_group_survives_a_coordinator_restart_without_a_rebalance(floe_factory):
    """The group's members, generation and assignments are in `__consumer_offsets` (Kafka's
    GroupMetadataValue with its members): after a kill -9 and restart of the broker the group
    is Stable again with the same members, whose heartbeats and commits go on in their
    generation; nobody's partitions are revoked or reassigned."""
    floe = floe_factory("floe", overrides={"group.initial.rebalance.delay.ms": "0"})
    topic = create_topic(floe.bootstrap, unique_topic("keep"), partitions=4)
    group = f"keep-{uuid.uuid4().hex[:8]}"
    for p in range(4):
        produce_all(floe.bootstrap, topic, [{"value": f"a-{p}-{i}".encode()} for i in range(5)], partition=p)
    events: list[tuple[int, str, list[int]]] = []

    def consumer(n: int) -> Consumer:
        c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group, "client.id": f"keeper-{n}",
                      "session.timeout.ms": 30000, "heartbeat.interval.ms": 300, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "partition.assignment.strategy": "range"})
        c.subscribe([topic], on_assign=lambda _c, ps: events.append((n, "assign", [p.partition for p in ps])),
                    on_revoke=lambda _c, ps: events.append((n, "revoke", [p.partition for p in ps])))
        return c

    consumers = [consumer(0), consumer(1)]
    seen: list[set[str]] = [set(), set()]

    def poll_all(seconds: float):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for n, c in enumerate(consumers):
                for m in c.consume(num_messages=50, timeout=0.1):
                    if m.error() is None:
                        seen[n].add(m.value().decode())

    def owned(n: int) -> set[int]:
        parts: set[int] = set()
        for who, kind, ps in events:
            if who == n:
                parts = parts | set(ps) if kind == "assign" else parts - set(ps)
        return parts

    try:
        wait_until(lambda: (poll_all(0.3), owned(0) | owned(1) == set(range(4)) and owned(0) and owned(1))[1],
                   timeout=30, what="both members assigned")
        wait_until(lambda: (poll_all(0.3), len(seen[0] | seen[1]) == 20)[1], timeout=30, what="the first records")
        for c in consumers:
            c.commit(asynchronous=False)
        before = list(events)
        member_ids = {c.memberid() for c in consumers}
        assignment = (owned(0), owned(1))

        floe.kill9()
        floe.start()
        # Heartbeats every 300 ms: well past the first ones to reach the reloaded coordinator.
        poll_all(6)
        for p in range(4):
            produce_all(floe.bootstrap, topic, [{"value": f"b-{p}-{i}".encode()} for i in range(5)], partition=p)
        wait_until(lambda: (poll_all(0.3), len(seen[0] | seen[1]) == 40)[1], timeout=30, what="the records after the restart")
        # A commit names the member and its generation: the reloaded group must know both.
        for c in consumers:
            c.commit(asynchronous=False)
        poll_all(1)
        assert events == before, f"a rebalance after the restart: {events[len(before):]}"
        assert {c.memberid() for c in consumers} == member_ids
        assert (owned(0), owned(1)) == assignment
        # Each member read the new records of its own partitions only.
        for n in range(2):
            assert {v for v in seen[n] if v.startswith("b-")} == {f"b-{p}-{i}" for p in assignment[n] for i in range(5)}
    finally:
        for c in consumers:
            c.close()
    check = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = check.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
    finally:
        check.close()
    assert {tp.partition: tp.offset for tp in tps} == {p: 10 for p in range(4)}
