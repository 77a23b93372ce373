"""A history checker for fault tests, in the spirit of Jepsen's Kafka checker.

A fault test records a `History`: every send and every acknowledgement of its
producers (partition, offset, value), every record its group consumers read
and every offset they committed, and a final drain of every partition from
the log start. `check(history)` turns that into a `Verdict`:

violations (any of them fails a test):
- lost:             acknowledged, but not in the final drain
- duplicate:        one value at two (partition, offset) places
- inconsistent:     one (partition, offset) seen holding two values
                    (across acknowledgements and reads)
- nonmonotonic:     a producer's acknowledged offsets, or a consumer's read
                    offsets, going backwards (or repeating) within a partition
- phantom:          a value read that no producer ever sent
- committed_unread: below a group's last committed offset, a drained record no
                    group consumer ever read (a commit covering unread data)
information (allowed: a crash can lose an ack, not the write):
- unacked_read:     sent, never acknowledged (failed or unknown), yet read
- unacked_missing:  sent, never acknowledged, and not in the log
- gaps:             offset ranges between log start and high watermark the
                    drain did not see (a damaged range the broker steps over;
                    a lost acknowledged record there is still `lost`)

The checker is pure: it looks only at the history, so its own tests feed it
synthetic histories with each violation. `Workload` drives real
confluent-kafka producers and group consumers and records the history.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

# -------------------------------------------------------------------- history


@dataclass
class History:
    """What clients did and saw. Values are unique byte strings (one per send)."""

    # (producer, partition, value) in send order per producer
    sends: list[tuple[str, int, bytes]] = field(default_factory=list)
    # (producer, partition, offset, value) in acknowledgement order per producer
    acks: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    # (producer, value, error text): sends the client gave up on
    failures: list[tuple[str, bytes, str]] = field(default_factory=list)
    # (reader, partition, offset, value) in read order per reader; a reader is one
    # consumer session between (re)assignments, e.g. "c0/3"
    reads: list[tuple[str, int, int, bytes]] = field(default_factory=list)
    # (group, partition, offset): offsets a consumer committed successfully
    commits: list[tuple[str, int, int]] = field(default_factory=list)
    # (partition, offset, value): everything from log start to the high watermark
    drain: list[tuple[int, int, bytes]] = field(default_factory=list)
    # partition -> (log start offset, high watermark) seen by the drain
    drain_bounds: dict[int, tuple[int, int]] = field(default_factory=dict)

    def record_send(self, producer: str, partition: int, value: bytes):
        self.sends.append((producer, partition, value))

    def record_ack(self, producer: str, partition: int, offset: int, value: bytes):
        self.acks.append((producer, partition, offset, value))


@dataclass
class Verdict:
    lost: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    inconsistent: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    phantom: list = field(default_factory=list)
    committed_unread: list = field(default_factory=list)
    unacked_read: list = field(default_factory=list)
    unacked_missing: list = field(default_factory=list)
    gaps: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    VIOLATIONS = ("lost", "duplicate", "inconsistent", "nonmonotonic", "phantom", "committed_unread")

    @property
    def ok(self) -> bool:
        return not any(getattr(self, k) for k in self.VIOLATIONS)

    def summary(self) -> str:
        parts = [f"{k}={len(getattr(self, k))}" for k in self.VIOLATIONS + ("unacked_read", "unacked_missing", "gaps")]
        head = ("valid" if self.ok else "INVALID") + ": " + " ".join(parts)
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        lines = [head, counts]
        for k in self.VIOLATIONS:
            items = getattr(self, k)
            if items:
                lines.append(f"  {k} (first 5): {items[:5]}")
        if self.gaps:
            lines.append(f"  gaps in the drain: {self.gaps[:10]}")
        return "\n".join(lines)


def _ranges(part: int, offsets: list[int]) -> list[tuple[int, int, int]]:
    """Sorted offsets as (partition, first, last) runs."""
    out: list[tuple[int, int, int]] = []
    for o in offsets:
        if out and out[-1][2] == o - 1:
            out[-1] = (part, out[-1][1], o)
        else:
            out.append((part, o, o))
    return out


def check(h: History) -> Verdict:
    """Checks a history; see the module docs for what each finding means."""
    v = Verdict()
    sent = {val for _, _, val in h.sends}
    acked: dict[bytes, tuple[int, int]] = {}
    for producer, part, off, val in h.acks:
        if val in acked and acked[val] != (part, off):
            v.inconsistent.append(("acked twice at different offsets", val, acked[val], (part, off)))
        acked[val] = (part, off)

    # Every (partition, offset) -> the values seen there, from acks and all reads.
    at: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    # Every value -> the (partition, offset) places it was seen in the log.
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for _, part, off, val in h.acks:
        at[(part, off)].add(val)
    for _, part, off, val in h.reads:
        at[(part, off)].add(val)
        where[val].add((part, off))
    for part, off, val in h.drain:
        at[(part, off)].add(val)
        where[val].add((part, off))

    for place, vals in sorted(at.items()):
        if len(vals) > 1:
            v.inconsistent.append((place, sorted(vals)))
    for val, places in where.items():
        if len(places) > 1:
            v.duplicate.append((val, sorted(places)))
        if val not in sent:
            v.phantom.append((val, sorted(places)))

    drained = {val: (part, off) for part, off, val in h.drain}
    for val, (part, off) in acked.items():
        if val not in drained:
            v.lost.append((part, off, val))

    # Producers: acknowledged offsets strictly increase per partition, in ack order.
    last_ack: dict[tuple[str, int], int] = {}
    for producer, part, off, val in h.acks:
        prev = last_ack.get((producer, part))
        if prev is not None and off <= prev:
            v.nonmonotonic.append(("producer", producer, part, prev, off))
        last_ack[(producer, part)] = off
    # Consumers: read offsets strictly increase per partition within one reader session.
    last_read: dict[tuple[str, int], int] = {}
    for reader, part, off, val in h.reads:
        prev = last_read.get((reader, part))
        if prev is not None and off <= prev:
            v.nonmonotonic.append(("consumer", reader, part, prev, off))
        last_read[(reader, part)] = off
    # The drain reads each partition once, in offset order, within its bounds;
    # offsets it did not see are gaps (information: a damaged range the broker skips).
    by_part: dict[int, list[int]] = defaultdict(list)
    for part, off, _ in h.drain:
        by_part[part].append(off)
    for part, (lo, hi) in sorted(h.drain_bounds.items()):
        offs = by_part.get(part, [])
        if any(b <= a for a, b in zip(offs, offs[1:])) or (offs and (offs[0] < lo or offs[-1] >= hi)):
            v.nonmonotonic.append(("drain", part, f"offsets not increasing within {lo}..{hi - 1}",
                                   offs[:3], offs[-3:]))
        seen = set(offs)
        missing = [o for o in range(lo, hi) if o not in seen]
        v.gaps += _ranges(part, missing)

    # A group's last commit per partition: every drained record below it was read by some consumer.
    read_places = {(part, off) for _, part, off, _ in h.reads}
    last_commit: dict[tuple[str, int], int] = {}
    for group, part, off in h.commits:
        last_commit[(group, part)] = max(off, last_commit.get((group, part), -1))
    for (group, part), upto in last_commit.items():
        for dpart, off, val in h.drain:
            if dpart == part and off < upto and (part, off) not in read_places:
                v.committed_unread.append((group, part, off, val))

    for val in sent - acked.keys():
        (v.unacked_read if val in where else v.unacked_missing).append(val)

    v.counts = {"sent": len(sent), "acked": len(acked), "failed": len(h.failures),
                "read": len(h.reads), "drained": len(h.drain), "commits": len(h.commits)}
    return v


# -------------------------------------------------------------------- workload

PRODUCER_CONF = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.num.messages": 200,
    # Long enough that records wait out a broker restart instead of failing.
    "message.timeout.ms": 120_000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "socket.connection.setup.timeout.ms": 5000,
}

CONSUMER_CONF = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "fetch.wait.max.ms": 100,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
}


class Workload:
    """N idempotent acks=all producers writing unique values round-robin over a
    topic's partitions, M group consumers reading and committing; records a History.

    `start()` runs everything on threads; `stop()` stops sending, waits for
    every outstanding send to be acknowledged or failed, stops the consumers;
    `drain()` reads every partition from its log start to its high watermark.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, producers: int = 3,
                 consumers: int = 2, group: str | None = None, rate_per_producer: float = 500.0,
                 value_pad: int = 40):
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.n_producers = producers
        self.n_consumers = consumers
        self.group = group or f"{topic}-checker"
        self.rate = rate_per_producer
        self.pad = b"." * value_pad
        self.history = History()
        self.fatal_errors: list[str] = []
        self._lock = threading.Lock()  # guards self.history (client callbacks run on our threads)
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self._producers = []
        self.unflushed_at_stop = 0

    # -- producers ---------------------------------------------------------
    def _producer_loop(self, pid: int):
        from confluent_kafka import Producer
        name = f"p{pid}"

        def on_error(err):
            if err.fatal():
                with self._lock:
                    self.fatal_errors.append(f"{name}: {err}")

        p = Producer({"bootstrap.servers": self.bootstrap, "error_cb": on_error, **PRODUCER_CONF})
        self._producers.append(p)

        def on_delivery(err, msg):
            with self._lock:
                if err is None:
                    self.history.record_ack(name, msg.partition(), msg.offset(), msg.value())
                else:
                    self.history.failures.append((name, msg.value(), str(err)))

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop_producing.is_set():
            part = seq % self.partitions
            value = f"{name}-{seq:08d}-".encode() + self.pad
            try:
                p.produce(self.topic, value=value, partition=part, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.05)
                continue
            with self._lock:
                self.history.record_send(name, part, value)
            seq += 1
            p.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()

    # -- consumers ---------------------------------------------------------
    def _consumer_loop(self, cid: int):
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
        session = [0]
        name = f"c{cid}"

        def on_assign(c, parts):
            session[0] += 1

        def on_revoke(c, parts):
            session[0] += 1

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, **CONSUMER_CONF})
        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        pending: dict[int, int] = {}
        last_commit = time.monotonic()
        try:
            while not self._stop_consuming.is_set():
                msgs = c.consume(num_messages=500, timeout=0.2)
                reader = f"{name}/{session[0]}"
                with self._lock:
                    for m in msgs:
                        if m.error():
                            continue
                        self.history.reads.append((reader, m.partition(), m.offset(), m.value()))
                        pending[m.partition()] = m.offset() + 1
                if pending and time.monotonic() - last_commit > 0.5:
                    tps = [TopicPartition(self.topic, part, off) for part, off in pending.items()]
                    try:
                        result = c.commit(offsets=tps, asynchronous=False)
                    except KafkaException:
                        result = []  # broker down or rebalancing: commit again later
                    with self._lock:
                        for tp in result or []:
                            if tp.error is None:
                                self.history.commits.append((self.group, tp.partition, tp.offset))
                                if pending.get(tp.partition) == tp.offset:
                                    del pending[tp.partition]
                    last_commit = time.monotonic()
        finally:
            try:
                c.close()
            except KafkaException:
                pass
            _ = KafkaError

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> "Workload":
        for i in range(self.n_consumers):
            self._spawn(self._consumer_loop, i)
        for i in range(self.n_producers):
            self._spawn(self._producer_loop, i)
        return self

    def _spawn(self, fn, i):
        t = threading.Thread(target=fn, args=(i,), daemon=True, name=f"{fn.__name__}-{i}")
        t.start()
        self._threads.append(t)

    def acked_count(self) -> int:
        with self._lock:
            return len(self.history.acks)

    def stop(self, flush_timeout: float = 60.0):
        """Stops sending and waits for every outstanding send's outcome; then stops consumers."""
        self._stop_producing.set()
        producers = [t for t in self._threads if t.name.startswith("_producer_loop")]
        for t in producers:
            t.join(10)
        self.unflushed_at_stop = sum(p.flush(flush_timeout) for p in self._producers)
        self._producers.clear()  # destroys them: no reconnect attempts after the test
        time.sleep(1.0)  # let consumers catch up a little before they stop
        self._stop_consuming.set()
        for t in self._threads:
            t.join(20)

    def drain(self, timeout: float = 60.0) -> History:
        """Reads every partition from its log start to its high watermark into the history."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.group}-drain",
                      "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100})
        try:
            for part in range(self.partitions):
                lo, hi = c.get_watermark_offsets(TopicPartition(self.topic, part), timeout=30)
                self.history.drain_bounds[part] = (lo, hi)
                if hi <= lo:
                    continue
                c.assign([TopicPartition(self.topic, part, lo)])
                deadline = time.monotonic() + timeout
                got = 0
                while got < hi - lo:
                    if time.monotonic() > deadline:
                        raise AssertionError(f"drain of partition {part}: {got}/{hi - lo} records in {timeout}s")
                    for m in c.consume(num_messages=1000, timeout=0.5):
                        if m.error():
                            if m.error().code() == KafkaError._PARTITION_EOF:
                                continue
                            raise KafkaException(m.error())
                        if m.offset() >= hi:
                            continue
                        self.history.drain.append((part, m.offset(), m.value()))
                        got += 1
                c.unassign()
        finally:
            c.close()
        return self.history
