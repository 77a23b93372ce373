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
                    a lost acknowledged record there is still `lost`). With
                    transactions, every commit/abort marker is a one-offset gap
                    (clients never see control records).

Transactions (KIP-98). A history may also hold transactions (`Txn`: one
transactional producer's begin .. commit/abort, its sends, its outcome), the
isolation level of each reader, the moment of each read, and a second final
drain at read_committed (`committed_drain`, up to the last stable offset once
no transaction is open). Every read of a read_committed reader, and the
committed drain, is checked against the transactions. A transaction's
*effective outcome* is its outcome when the producer learnt it (commit or
abort returned); an `unknown` one (commit raised, the producer was re-created
or its process died) counts as committed if any of its values is in the
committed drain and as aborted otherwise, and as aborted whenever its producer
never asked to commit (no EndTxn(commit) was ever sent for it).

- aborted_read (G1a): a read_committed read (a group consumer's, or the
                    committed drain's) returned a value of a transaction whose
                    effective outcome is aborted.
- intermediate_read (G1b): a read_committed reader saw a transaction's writes
                    in an intermediate state, one of
                    (a) it read a value of T before T's producer asked to
                        commit (read moment < `commit_requested_at`): T was
                        still open when the fetch returned it;
                    (b) within one reader session and one partition p, it read
                        some of T's records in p and skipped another of T's
                        records in p whose offset lies between the session's
                        first and last read in p.
- lso_read:         a read_committed reader read above the last stable offset,
                    one of
                    (a) at a read moment before T's `open_until` (a moment up to
                        which T was surely open: before its producer called
                        commit/abort, gave it up, or its transaction timeout
                        could expire), it read a record of another producer at
                        an offset above T's first offset in that partition: the
                        fetch happened while T was open with its first record
                        below that offset, so the LSO was at most T's first
                        offset;
                    (b) within one session and partition it read past every one
                        of T's records in p (they lie between its first and last
                        read in p) while reading none of them, and T is
                        committed: it passed T before T was decided.
- non_atomic:       a transaction of unknown outcome of which the committed
                    drain holds some values but not all (all-or-nothing).
- lost (extended):  a value of a committed transaction, or an acknowledged
                    non-transactional value, missing from the committed drain.
And `committed_unread` compares a read_committed group's commits with the
committed drain (the group never reads aborted records).

The checker is pure: it looks only at the history, so its own tests feed it
synthetic histories with each violation. `Workload` drives real
confluent-kafka producers and group consumers and records the history;
`TxnWorkload` adds transactional producers (begin, produce, commit or abort)
and drains at both isolation levels.
"""

from __future__ import annotations

import bisect
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

# -------------------------------------------------------------------- history


READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
OUTCOMES = ("open", "committed", "aborted", "unknown")


@dataclass
class Txn:
    """One transaction of one transactional producer, as its client saw it.

    Times are `time.monotonic()` seconds (one clock for every thread and process
    of a test on Linux). `outcome` is what commit/abort told the producer:
    "committed" or "aborted" when the call returned, "unknown" when it raised or
    the producer was given up (re-created, killed), "open" while it runs (the
    checker treats a still-open one as unknown).
    """

    txn: str                                  # a unique name, e.g. "t0.17"
    producer: str                             # the transactional producer ("t0": one transactional.id)
    sends: list[tuple[int, bytes]] = field(default_factory=list)  # (partition, value) in send order
    outcome: str = "open"
    begun_at: float | None = None             # just before begin_transaction
    commit_requested_at: float | None = None  # just before the first commit_transaction call
    # A moment up to which the transaction was surely open (see the module doc, lso_read):
    # the first commit/abort call, the moment it was given up, or begun_at + transaction
    # timeout, whichever came first. None: no time-based checks for it.
    open_until: float | None = None


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

    # -- transactions (all optional: a history without them is checked as before)
    # txn name -> Txn; every transactional send is also in `sends`
    txns: dict[str, Txn] = field(default_factory=dict)
    # reader (session "c0/3", or its consumer "c0") or group -> READ_COMMITTED / READ_UNCOMMITTED;
    # absent: read_uncommitted (not checked against transactions)
    isolation: dict[str, str] = field(default_factory=dict)
    # (reader, partition, offset) -> the moment the read returned (after its fetch)
    read_at: dict[tuple[str, int, int], float] = field(default_factory=dict)
    # (partition, offset, value): everything a read_committed consumer reads from log start
    # to the last stable offset, taken when no transaction is open
    committed_drain: list[tuple[int, int, bytes]] = field(default_factory=list)
    # partition -> (log start offset, last stable offset) seen by the committed drain
    committed_drain_bounds: dict[int, tuple[int, int]] = field(default_factory=dict)

    def record_send(self, producer: str, partition: int, value: bytes):
        self.sends.append((producer, partition, value))

    def record_ack(self, producer: str, partition: int, offset: int, value: bytes):
        self.acks.append((producer, partition, offset, value))

    def record_read(self, reader: str, partition: int, offset: int, value: bytes, at: float | None = None):
        self.reads.append((reader, partition, offset, value))
        if at is not None:
            self.read_at[(reader, partition, offset)] = at

    def begin_txn(self, txn: str, producer: str, at: float | None = None) -> Txn:
        t = Txn(txn, producer, begun_at=at)
        self.txns[txn] = t
        return t

    def record_txn_send(self, txn: str, partition: int, value: bytes):
        t = self.txns[txn]
        t.sends.append((partition, value))
        self.record_send(t.producer, partition, value)

    def isolation_of(self, reader: str) -> str:
        """The isolation level of a reader session ("c0/3"), else of its consumer ("c0")."""
        if reader in self.isolation:
            return self.isolation[reader]
        return self.isolation.get(reader.split("/", 1)[0], READ_UNCOMMITTED)


@dataclass
class Verdict:
    lost: list = field(default_factory=list)
    duplicate: list = field(default_factory=list)
    inconsistent: list = field(default_factory=list)
    nonmonotonic: list = field(default_factory=list)
    phantom: list = field(default_factory=list)
    committed_unread: list = field(default_factory=list)
    aborted_read: list = field(default_factory=list)
    intermediate_read: list = field(default_factory=list)
    lso_read: list = field(default_factory=list)
    non_atomic: list = field(default_factory=list)
    unacked_read: list = field(default_factory=list)
    unacked_missing: list = field(default_factory=list)
    gaps: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    VIOLATIONS = ("lost", "duplicate", "inconsistent", "nonmonotonic", "phantom", "committed_unread",
                  "aborted_read", "intermediate_read", "lso_read", "non_atomic")

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


def _drain_order(v: Verdict, name: str, drain: list, bounds: dict) -> dict[int, list[int]]:
    """Checks that a drain read each partition once, in offset order, within its bounds;
    returns partition -> the offsets it saw."""
    by_part: dict[int, list[int]] = defaultdict(list)
    for part, off, _ in drain:
        by_part[part].append(off)
    for part, (lo, hi) in sorted(bounds.items()):
        offs = by_part.get(part, [])
        if any(b <= a for a, b in zip(offs, offs[1:])) or (offs and (offs[0] < lo or offs[-1] >= hi)):
            v.nonmonotonic.append((name, part, f"offsets not increasing within {lo}..{hi - 1}",
                                   offs[:3], offs[-3:]))
    return by_part


def check(h: History) -> Verdict:
    """Checks a history; see the module docs for what each finding means."""
    v = Verdict()
    sent = {val for _, _, val in h.sends}
    acked: dict[bytes, tuple[int, int]] = {}
    for producer, part, off, val in h.acks:
        if val in acked and acked[val] != (part, off):
            v.inconsistent.append(("acked twice at different offsets", val, acked[val], (part, off)))
        acked[val] = (part, off)

    # Every (partition, offset) -> the values seen there, from acks, all reads and both drains.
    at: dict[tuple[int, int], set[bytes]] = defaultdict(set)
    # Every value -> the (partition, offset) places it was seen in the log.
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for _, part, off, val in h.acks:
        at[(part, off)].add(val)
    for _, part, off, val in h.reads:
        at[(part, off)].add(val)
        where[val].add((part, off))
    for part, off, val in h.drain + h.committed_drain:
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
    # The drains read each partition once, in offset order, within their bounds; offsets
    # the read_uncommitted drain did not see are gaps (information: a damaged range the
    # broker skips, or a transaction marker).
    by_part = _drain_order(v, "drain", h.drain, h.drain_bounds)
    _drain_order(v, "committed drain", h.committed_drain, h.committed_drain_bounds)
    for part, (lo, hi) in sorted(h.drain_bounds.items()):
        seen = set(by_part.get(part, []))
        v.gaps += _ranges(part, [o for o in range(lo, hi) if o not in seen])

    # A group's last commit per partition: every drained record below it was read by some
    # consumer; a read_committed group is held to the committed drain (it never sees aborts).
    read_places = {(part, off) for _, part, off, _ in h.reads}
    last_commit: dict[tuple[str, int], int] = {}
    for group, part, off in h.commits:
        last_commit[(group, part)] = max(off, last_commit.get((group, part), -1))
    for (group, part), upto in last_commit.items():
        rc = h.isolation.get(group) == READ_COMMITTED and h.committed_drain_bounds
        for dpart, off, val in (h.committed_drain if rc else h.drain):
            if dpart == part and off < upto and (part, off) not in read_places:
                v.committed_unread.append((group, part, off, val))

    for val in sent - acked.keys():
        (v.unacked_read if val in where else v.unacked_missing).append(val)

    v.counts = {"sent": len(sent), "acked": len(acked), "failed": len(h.failures),
                "read": len(h.reads), "drained": len(h.drain), "commits": len(h.commits)}
    if h.txns or h.committed_drain_bounds:
        _check_transactions(h, v, acked, where)
    return v


def _effective_outcomes(h: History, in_committed_drain: set[bytes]) -> dict[str, str]:
    """Transaction -> "committed" or "aborted" as far as the history can tell, or
    "unknown" (unknown outcome and no committed drain to decide it)."""
    out = {}
    for name, t in h.txns.items():
        if t.outcome in ("committed", "aborted"):
            out[name] = t.outcome
        elif t.commit_requested_at is None:
            out[name] = "aborted"  # no EndTxn(commit) was ever sent for it
        elif h.committed_drain_bounds:
            out[name] = "committed" if any(val in in_committed_drain for _, val in t.sends) else "aborted"
        else:
            out[name] = "unknown"
    return out


def _check_transactions(h: History, v: Verdict, acked: dict, where: dict):
    """The transactional findings (module doc): aborted_read, intermediate_read,
    lso_read, non_atomic, and lost against the committed drain."""
    in_cd = {val for _, _, val in h.committed_drain}
    effective = _effective_outcomes(h, in_cd)
    txn_of: dict[bytes, str] = {val: name for name, t in h.txns.items() for _, val in t.sends}
    # Each transaction's offsets per partition, where the log shows them.
    txn_offsets: dict[tuple[str, int], list[int]] = defaultdict(list)
    for name, t in h.txns.items():
        for part, val in t.sends:
            txn_offsets[(name, part)] += sorted(o for p, o in where.get(val, ()) if p == part)
            if val in acked and acked[val][0] == part and acked[val][1] not in txn_offsets[(name, part)]:
                txn_offsets[(name, part)].append(acked[val][1])
    for offs in txn_offsets.values():
        offs.sort()
    txns_in_part: dict[int, list[str]] = defaultdict(list)
    for (name, part), offs in txn_offsets.items():
        if offs:
            txns_in_part[part].append(name)

    # Every read_committed read: the group consumers' sessions, and the committed drain.
    rc_reads = [(r, part, off, val) for r, part, off, val in h.reads if h.isolation_of(r) == READ_COMMITTED]
    rc_reads += [("committed-drain", part, off, val) for part, off, val in h.committed_drain]

    # G1a: a read_committed read of an aborted transaction's value.
    for reader, part, off, val in rc_reads:
        name = txn_of.get(val)
        if name is not None and effective[name] == "aborted":
            v.aborted_read.append((reader, part, off, val, name, h.txns[name].outcome))

    # Per session and partition: the offsets read, and its first and last.
    session: dict[tuple[str, int], set[int]] = defaultdict(set)
    for reader, part, off, _ in rc_reads:
        session[(reader, part)].add(off)
    for (reader, part), offs in sorted(session.items()):
        lo, hi = min(offs), max(offs)
        for name in txns_in_part.get(part, ()):
            within = [o for o in txn_offsets[(name, part)] if lo <= o <= hi]
            if not within:
                continue
            read_some = any(o in offs for o in within)
            skipped = [o for o in within if o not in offs]
            if not skipped or effective[name] == "aborted":
                continue
            if read_some:  # G1b (b): some of T's records in p, not all
                v.intermediate_read.append(("partial", reader, part, name, skipped))
            elif effective[name] == "committed" and lo < skipped[0] and skipped[-1] < hi:
                v.lso_read.append(("passed a transaction before its commit", reader, part, name, skipped))

    # Time-based: reads whose moment shows a transaction was still open. Only a transaction
    # begun before the read can matter (its first record existed before the fetch), so each
    # partition's transactions are searched by begin time.
    first_offset = {(name, part): offs[0] for (name, part), offs in txn_offsets.items() if offs}
    timed: dict[int, list[tuple[float, float, str]]] = defaultdict(list)  # (begun, open until, txn)
    for part, names in txns_in_part.items():
        for name in names:
            t = h.txns[name]
            if t.open_until is not None:
                timed[part].append((t.begun_at if t.begun_at is not None else float("-inf"), t.open_until, name))
        timed[part].sort()
    longest = {part: max((u - b for b, u, _ in ts), default=0.0) for part, ts in timed.items()}
    for reader, part, off, val in rc_reads:
        t_read = h.read_at.get((reader, part, off))
        if t_read is None:
            continue
        own = txn_of.get(val)
        if own is not None:
            t = h.txns[own]
            if (effective[own] != "aborted" and t.commit_requested_at is not None
                    and t_read < t.commit_requested_at):
                v.intermediate_read.append(("read before its commit was asked", reader, part, off, val, own))
        ts = timed.get(part, [])
        i = bisect.bisect_left(ts, (t_read,))
        while i > 0:
            i -= 1
            begun, until, name = ts[i]
            if begun < t_read - longest[part]:
                break
            if name != own and t_read < until and first_offset[(name, part)] < off:
                v.lso_read.append(("read above an open transaction's first offset", reader, part, off, val,
                                   name, first_offset[(name, part)]))

    # All or nothing, and nothing committed lost.
    if h.committed_drain_bounds:
        for name, t in h.txns.items():
            visible = [(part, val) for part, val in t.sends if val in in_cd]
            if t.outcome in ("open", "unknown") and visible and len(visible) < len(t.sends):
                v.non_atomic.append((name, f"{len(visible)} of {len(t.sends)} values visible",
                                     [val for part, val in t.sends if val not in in_cd][:5]))
            if t.outcome == "committed":
                for part, val in t.sends:
                    if val not in in_cd:
                        v.lost.append((part, acked.get(val, (part, None))[1], val, name))
        for val, (part, off) in acked.items():
            if val not in txn_of and val not in in_cd:
                v.lost.append((part, off, val, "read_committed"))

    tally = defaultdict(int)
    for name, t in h.txns.items():
        tally[t.outcome] += 1
        if t.outcome in ("open", "unknown"):
            tally[f"unknown_{effective[name]}"] += 1
    v.counts.update({f"txn_{k}": n for k, n in tally.items()})
    v.counts["txns"] = len(h.txns)
    v.counts["committed_drained"] = len(h.committed_drain)
    v.counts["read_committed_reads"] = len(rc_reads)


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
        self.consumer_isolation = READ_COMMITTED  # librdkafka's default
        self.read_label: str | None = None  # the isolation level recorded, when not the real one

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

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": self.consumer_isolation, **CONSUMER_CONF})
        with self._lock:
            # What the history says the reader's isolation level is (a negative control may
            # read at read_uncommitted and claim read_committed, to prove the checker fails).
            self.history.isolation[name] = self.read_label or self.consumer_isolation
            self.history.isolation[self.group] = self.read_label or self.consumer_isolation
        c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        pending: dict[int, int] = {}
        last_commit = time.monotonic()
        try:
            while not self._stop_consuming.is_set():
                msgs = c.consume(num_messages=500, timeout=0.2)
                now = time.monotonic()  # after the fetch that returned these records
                reader = f"{name}/{session[0]}"
                with self._lock:
                    for m in msgs:
                        if m.error():
                            continue
                        self.history.record_read(reader, m.partition(), m.offset(), m.value(), at=now)
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


# -------------------------------------------------------------------- transactional workload

TXN_TIMEOUT_MS = 30_000

TXN_PRODUCER_CONF = {
    "linger.ms": 5,
    "transaction.timeout.ms": TXN_TIMEOUT_MS,
    # librdkafka wants message.timeout.ms <= transaction.timeout.ms; long enough that
    # records wait out a broker restart instead of failing.
    "message.timeout.ms": TXN_TIMEOUT_MS - 5_000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "socket.connection.setup.timeout.ms": 5000,
}


class TxnWorkload(Workload):
    """K transactional producers (confluent-kafka, one `transactional.id` each), each
    looping begin -> produce 1..N values over the partitions -> commit, or abort with
    `abort_probability`; `plain_producers` idempotent non-transactional producers beside
    them (records an open transaction holds back from read_committed readers); group
    consumers at `consumer_isolation`; and drains at both isolation levels.

    Robust to broker kill -9: retriable errors are retried; an abortable one aborts the
    transaction; a fatal one, or retries running out, gives the producer up (its open
    transaction's outcome becomes unknown, or stays committed/aborted if known) and a new
    producer with the same transactional.id calls init_transactions, which fences the old
    one and aborts what it left open. A transaction whose commit was asked but did not
    return is unknown even if a later abort returned.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, txn_producers: int = 3,
                 plain_producers: int = 1, consumers: int = 2, values_per_txn: tuple[int, int] = (1, 20),
                 abort_probability: float = 0.2, consumer_isolation: str = READ_COMMITTED,
                 read_label: str | None = None, seed: int = 0, plain_rate: float = 100.0,
                 group: str | None = None):
        super().__init__(bootstrap, topic, partitions, producers=plain_producers, consumers=consumers,
                         group=group, rate_per_producer=plain_rate)
        self.n_txn_producers = txn_producers
        self.values_per_txn = values_per_txn
        self.abort_probability = abort_probability
        self.consumer_isolation = consumer_isolation
        self.read_label = read_label
        self.seed = seed
        self.recreated = 0  # producers given up and re-created
        self.txn_errors: list[str] = []  # the errors that made a producer be given up (information)

    # -- transactional producers -------------------------------------------
    def _txn_producer_loop(self, k: int):
        name = f"t{k}"
        txn_id = f"{self.topic}-txn-{k}"
        rng = random.Random(self.seed * 1009 + k)
        p = None
        seq = 0
        left_open = False  # the last producer was given up with a transaction possibly open
        while not self._stop_producing.is_set():
            if p is None:
                p = self._new_txn_producer(name, txn_id, give_up_at_stop=True)
                if p is None:
                    break
                left_open = False
            seq += 1
            now = time.monotonic()
            with self._lock:
                t = self.history.begin_txn(f"{name}.{seq}", name, at=now)
            t.open_until = now + TXN_TIMEOUT_MS / 1000
            if not self._run_txn(p, t, rng):
                t.open_until = min(t.open_until, time.monotonic())
                if t.outcome == "open":
                    t.outcome = "unknown"
                self._give_up(p)
                with self._lock:
                    self.recreated += 1
                p = None
                left_open = True
            time.sleep(rng.uniform(0, 0.02))
        if p is None and left_open:
            # Fence the given-up producer so its transaction is aborted now, not at its timeout.
            p = self._new_txn_producer(name, txn_id, give_up_at_stop=False)
        if p is not None:
            self._give_up(p)

    def _new_txn_producer(self, name: str, txn_id: str, give_up_at_stop: bool):
        """A producer whose init_transactions returned (retried until then); None if the
        workload was stopped meanwhile (with `give_up_at_stop`) or after a minute."""
        from confluent_kafka import KafkaException, Producer

        def on_error(err):
            if err.fatal():
                with self._lock:
                    self.txn_errors.append(f"{name} fatal: {err}")

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (give_up_at_stop and self._stop_producing.is_set()):
            p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": txn_id,
                          "error_cb": on_error, **TXN_PRODUCER_CONF})
            while time.monotonic() < deadline:
                try:
                    p.init_transactions(10)
                    return p
                except KafkaException as e:
                    err = e.args[0]
                    if not err.retriable() or err.fatal():
                        with self._lock:
                            self.txn_errors.append(f"{name} init_transactions: {err}")
                        break
                    if give_up_at_stop and self._stop_producing.is_set():
                        break
            self._give_up(p)
            time.sleep(0.2)
        return None

    def _give_up(self, p):
        """Drops a producer: what it still queues is purged (never sent)."""
        try:
            p.purge(in_queue=True, in_flight=False)
            p.poll(0)
        except Exception:  # a fatal producer may refuse: it is dropped either way
            pass
        del p

    def _on_delivery(self, name: str):
        def on_delivery(err, msg):
            with self._lock:
                if err is None:
                    self.history.record_ack(name, msg.partition(), msg.offset(), msg.value())
                else:
                    self.history.failures.append((name, msg.value(), str(err)))
        return on_delivery

    def _run_txn(self, p, t: Txn, rng: random.Random) -> bool:
        """Runs one transaction to its end; False when the producer must be given up."""
        from confluent_kafka import KafkaException
        try:
            p.begin_transaction()
        except KafkaException as e:
            with self._lock:
                self.txn_errors.append(f"{t.txn} begin_transaction: {e.args[0]}")
                del self.history.txns[t.txn]  # nothing was sent in it
            return False
        failed = None
        on_delivery = self._on_delivery(t.producer)
        for i in range(rng.randint(*self.values_per_txn)):
            part = rng.randrange(self.partitions)
            value = f"{t.txn}-{i:03d}-".encode() + self.pad
            while failed is None:
                try:
                    p.produce(self.topic, value=value, partition=part, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
                except KafkaException as e:  # an abortable or fatal error state: end the transaction
                    failed = e.args[0]
            if failed is not None:
                break
            with self._lock:
                self.history.record_txn_send(t.txn, part, value)
            p.poll(0)
        if failed is not None and failed.fatal():
            return False
        if failed is None and rng.random() >= self.abort_probability:
            return self._commit(p, t)
        if failed is None:
            # Deliver before aborting: abort_transaction purges what is still queued, and an
            # aborted transaction is only worth checking if its records are in the log.
            p.flush(10)
        return self._abort(p, t)

    def _retry(self, call, what: str, t: Txn):
        """Calls `call(timeout)` until it returns (True), a non-retriable error or one that
        asks for an abort (the error), or a minute passed (the last error)."""
        from confluent_kafka import KafkaException
        deadline = time.monotonic() + 60
        while True:
            try:
                call(10)
                return True
            except KafkaException as e:
                err = e.args[0]
                if (not err.retriable() or err.fatal() or err.txn_requires_abort()
                        or time.monotonic() > deadline):
                    with self._lock:
                        self.txn_errors.append(f"{t.txn} {what}: {err}")
                    return err

    def _commit(self, p, t: Txn) -> bool:
        now = time.monotonic()
        t.commit_requested_at = now
        t.open_until = min(t.open_until, now)
        got = self._retry(p.commit_transaction, "commit_transaction", t)
        if got is True:
            t.outcome = "committed"
            return True
        t.outcome = "unknown"  # EndTxn(commit) may have been applied
        if got.txn_requires_abort() and not got.fatal():
            return self._retry(p.abort_transaction, "abort_transaction after commit", t) is True
        return False

    def _abort(self, p, t: Txn) -> bool:
        t.open_until = min(t.open_until, time.monotonic())
        if self._retry(p.abort_transaction, "abort_transaction", t) is True:
            t.outcome = "aborted"
            return True
        return False

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> "TxnWorkload":
        super().start()
        for i in range(self.n_txn_producers):
            self._spawn(self._txn_producer_loop, i)
        return self

    def txn_count(self, outcome: str = "committed") -> int:
        with self._lock:
            return sum(1 for t in self.history.txns.values() if t.outcome == outcome)

    def stop(self, flush_timeout: float = 60.0):
        """Stops beginning transactions, lets each producer end its current one (commit or
        abort, retried, or given up and fenced), then stops the plain producers and consumers."""
        self._stop_producing.set()
        for t in self._threads:
            if t.name.startswith("_txn_producer_loop"):
                t.join(150)
                if t.is_alive():
                    raise AssertionError(f"{t.name} did not end its transaction in 150 s")
        super().stop(flush_timeout)

    def drain(self, timeout: float = 60.0) -> History:
        """Waits until no transaction is open (the last stable offset at the high watermark),
        then reads every partition from log start at read_uncommitted into `drain` and at
        read_committed into `committed_drain`."""
        drain_both(self.bootstrap, self.topic, self.partitions, self.history, timeout)
        return self.history


def _drain_consumer(bootstrap: str, isolation: str):
    from confluent_kafka import Consumer
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "history-drain",
                     "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100,
                     "isolation.level": isolation, "enable.partition.eof": True})


def end_offset(bootstrap: str, topic: str, part: int, isolation: str) -> int | None:
    """The high watermark (read_uncommitted) or the last stable offset (read_committed);
    None if the broker did not answer."""
    from confluent_kafka import KafkaException, TopicPartition
    c = _drain_consumer(bootstrap, isolation)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, part), timeout=10, cached=False)[1]
    except KafkaException:
        return None
    finally:
        c.close()


def drain_partition(bootstrap: str, topic: str, part: int, isolation: str, timeout: float = 60.0):
    """(log start, end offset, [(partition, offset, value)]) read from log start up to the
    end offset at `isolation`. Markers and (at read_committed) aborted records take offsets
    but are never returned, so the read ends at the end-of-partition event, not at a count."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    c = _drain_consumer(bootstrap, isolation)
    out = []
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=30, cached=False)
        if hi <= lo:
            return lo, hi, out
        c.assign([TopicPartition(topic, part, lo)])
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} drain of {topic}/{part}: no end after {len(out)} "
                                     f"records of {lo}..{hi} in {timeout}s")
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= hi:
                            return lo, hi, out
                        continue
                    raise KafkaException(m.error())
                if m.offset() < hi:
                    out.append((part, m.offset(), m.value()))
    finally:
        c.close()


def drain_both(bootstrap: str, topic: str, partitions: int, h: History, timeout: float = 60.0):
    """Waits until no transaction is open on `topic` (each partition's last stable offset at
    its high watermark, at most the transaction timeout + 30 s), then drains every partition
    at read_uncommitted into `h.drain` and at read_committed into `h.committed_drain`."""
    from floe_process import wait_until

    def stable(part: int) -> bool:
        hw = end_offset(bootstrap, topic, part, READ_UNCOMMITTED)
        return hw is not None and end_offset(bootstrap, topic, part, READ_COMMITTED) == hw

    for part in range(partitions):
        wait_until(lambda part=part: stable(part),
                   timeout=TXN_TIMEOUT_MS / 1000 + 30, interval=0.5,
                   what=f"the last stable offset of {topic}/{part} to reach its high watermark")
    for part in range(partitions):
        lo, hi, recs = drain_partition(bootstrap, topic, part, READ_UNCOMMITTED, timeout)
        h.drain_bounds[part] = (lo, hi)
        h.drain += recs
        lo, hi, recs = drain_partition(bootstrap, topic, part, READ_COMMITTED, timeout)
        h.committed_drain_bounds[part] = (lo, hi)
        h.committed_drain += recs
