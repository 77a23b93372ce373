"""The consumer group protocol (KIP-848) end to end with confluent-kafka
(`group.protocol=consumer`): two members share a 6-partition topic and consume it
fully; one leaves (close → heartbeat with epoch -1) and the other takes over its
partitions and consumes what is produced afterwards."""

from __future__ import annotations

import threading
import uuid

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from clients import create_topic, produce_all, unique_topic
from floe_process import wait_until

PARTITIONS = 6
PER_PARTITION = 20


class Member:
    """A `group.protocol=consumer` member polling in a thread."""

    def __init__(self, bootstrap, topic, group):
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        })
        self.assigned: set[int] = set()
        self.records: set[tuple[int, int]] = set()
        self.values: set[bytes] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_assign(self, _c, ps):
        with self.lock:
            self.assigned |= {p.partition for p in ps}

    def _on_revoke(self, _c, ps):
        with self.lock:
            self.assigned -= {p.partition for p in ps}

    def _run(self):
        while not self.stop.is_set():
            for m in self.consumer.consume(num_messages=100, timeout=0.2):
                if m.error():
                    continue
                with self.lock:
                    self.records.add((m.partition(), m.offset()))
                    self.values.add(m.value())
        self.consumer.close()  # leaves the group: member epoch -1

    def owned(self) -> set[int]:
        with self.lock:
            return set(self.assigned)

    def seen(self) -> set[bytes]:
        with self.lock:
            return set(self.values)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), "consumer did not close"


def produce_round(bootstrap, topic, round_no) -> set[bytes]:
    values = set()
    for p in range(PARTITIONS):
        batch = [f"r{round_no}-p{p}-{i}".encode() for i in range(PER_PARTITION)]
        produce_all(bootstrap, topic, [{"value": v} for v in batch], partition=p)
        values |= set(batch)
    return values


def test_two_members_share_then_one_takes_over(floe_factory):
    floe = floe_factory("floe", overrides={"group.consumer.heartbeat.interval.ms": "500"})
    topic = create_topic(floe.bootstrap, unique_topic("kip848"), partitions=PARTITIONS)
    group = f"cg-{uuid.uuid4().hex[:8]}"
    first = produce_round(floe.bootstrap, topic, 0)
    a = Member(floe.bootstrap, topic, group)
    b = Member(floe.bootstrap, topic, group)
    try:
        wait_until(lambda: len(a.owned()) == 3 and len(b.owned()) == 3, timeout=30,
                   what="3 partitions for each member")
        assert a.owned() | b.owned() == set(range(PARTITIONS))
        assert not a.owned() & b.owned()
        wait_until(lambda: first <= a.seen() | b.seen(), timeout=30, what="every first-round record consumed")

        admin = AdminClient({"bootstrap.servers": floe.bootstrap})
        listed = admin.list_consumer_groups().result(timeout=10)
        mine = [g for g in listed.valid if g.group_id == group]
        assert mine and str(mine[0].type).endswith("CONSUMER"), (listed.valid, listed.errors)

        a.close()
        second = produce_round(floe.bootstrap, topic, 1)
        wait_until(lambda: b.owned() == set(range(PARTITIONS)), timeout=30, what="b to own every partition")
        wait_until(lambda: second <= b.seen(), timeout=30, what="b to consume every second-round record")
    finally:
        a.stop.set()
        b.close()
