"""Transactions under faults, judged by the history checker (history.py, issue 13):

- the transactional workload (TxnWorkload: transactional producers committing and
  aborting, a plain producer, read_committed group consumers) while the broker is
  killed -9 and restarted, then both drains; the checker must find no aborted read
  (G1a), intermediate read (G1b), read above the LSO, non-atomic or lost transaction;
- a negative control on real data: consumers reading at read_uncommitted but
  recorded as read_committed, so the checker must report aborted reads;
- a consume-transform-produce application (ctp_app.py, a subprocess) killed -9
  at random moments and restarted: the committed output holds every input exactly
  once; and the same with the broker killed -9 once mid-run.

The soak form of the first test runs for FLOE_SOAK_SECONDS and writes its verdict
to FLOE_SOAK_REPORT (tests/soak.sh's transactional phase):

    FLOE_SOAK_SECONDS=600 FLOE_SOAK_REPORT=txn.json .venv/bin/python -m pytest \\
        tests/python/test_transactions_history.py -k broker_kill9_loop --timeout=0 -s
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from floe_process import wait_until
from history import READ_COMMITTED, READ_UNCOMMITTED, History, TxnWorkload, check, drain_both, end_offset

SOAK_SECONDS = float(os.environ.get("FLOE_SOAK_SECONDS", "0"))
SHORT_KILLS = int(os.environ.get("FLOE_FAULT_KILLS", "4"))
CTP_APP = Path(__file__).with_name("ctp_app.py")

OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "log.segment.bytes": "262144",
}


def _seed() -> int:
    seed = int(os.environ.get("FLOE_FAULT_SEED", str(random.randrange(1 << 30))))
    print(f"fault seed: {seed} (FLOE_FAULT_SEED={seed} replays the same fault schedule)")
    return seed


def _txn_counts(v) -> str:
    c = v.counts
    return (f"transactions: {c.get('txns', 0)} ({c.get('txn_committed', 0)} committed, "
            f"{c.get('txn_aborted', 0)} aborted, {c.get('txn_unknown', 0)} unknown: "
            f"{c.get('txn_unknown_committed', 0)} of them committed, {c.get('txn_unknown_aborted', 0)} aborted)")


# ------------------------------------------------------------ transactional workload, broker kill -9

def test_transactions_under_a_broker_kill9_loop_are_valid(floe_factory):
    """Transactional producers, a plain producer and read_committed group consumers run
    while the broker is SIGKILLed and restarted; the history has no transactional anomaly."""
    seed = _seed()
    rng = random.Random(seed)
    floe = floe_factory("floe", overrides=OVERRIDES)
    partitions = 3
    topic = create_topic(floe.bootstrap, unique_topic("txnkill"), partitions=partitions)
    wl = TxnWorkload(floe.bootstrap, topic, partitions, txn_producers=3, plain_producers=1, consumers=2,
                     abort_probability=0.2, seed=seed).start()
    wait_until(lambda: wl.txn_count("committed") >= 20, timeout=60, what="first committed transactions")

    kills = 0
    started = time.monotonic()
    soak = SOAK_SECONDS > 0
    try:
        while (time.monotonic() - started < SOAK_SECONDS) if soak else (kills < SHORT_KILLS):
            time.sleep(rng.uniform(0.5, 3.0))
            floe.kill9()
            kills += 1
            time.sleep(rng.uniform(0.0, 1.0))
            floe.start()
            before = wl.txn_count("committed")
            wait_until(lambda: wl.txn_count("committed") > before + 5, timeout=90,
                       what=f"transactions to commit after restart {kills}")
    finally:
        wl.stop()
    history = wl.drain()
    verdict = check(history)
    elapsed = time.monotonic() - started
    print(f"transactional kill -9 loop: {kills} kills in {elapsed:.0f}s, {wl.recreated} producers re-created\n"
          f"{_txn_counts(verdict)}\n{verdict.summary()}")
    if wl.txn_errors:
        print(f"producer errors ({len(wl.txn_errors)}, first 10): {wl.txn_errors[:10]}")
    report = os.environ.get("FLOE_SOAK_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"kills": kills, "seconds": round(elapsed), "valid": verdict.ok,
                       "producers_recreated": wl.recreated, "counts": verdict.counts,
                       "findings": {k: len(getattr(verdict, k)) for k in verdict.VIOLATIONS
                                    + ("unacked_read", "unacked_missing")}}, f, indent=2)
    assert verdict.ok, verdict.summary()
    assert kills >= (1 if soak else SHORT_KILLS)
    assert verdict.counts["txn_committed"] >= 20 and verdict.counts["txn_aborted"] >= 3, verdict.counts
    assert verdict.counts["read_committed_reads"] > verdict.counts["committed_drained"], \
        "the group consumers read nothing at read_committed"
    assert wl.unflushed_at_stop == 0, f"{wl.unflushed_at_stop} plain sends without an outcome"


def test_the_checker_finds_aborted_reads_of_a_consumer_at_read_uncommitted(floe_factory):
    """Negative control on real data: the group consumers read at read_uncommitted but the
    history says read_committed, so the checker must report aborted reads (G1a). Told the
    truth, the same history is valid."""
    seed = _seed()
    floe = floe_factory("floe", overrides=OVERRIDES)
    topic = create_topic(floe.bootstrap, unique_topic("txnlie"), partitions=2)
    wl = TxnWorkload(floe.bootstrap, topic, 2, txn_producers=2, plain_producers=1, consumers=1,
                     abort_probability=0.5, consumer_isolation=READ_UNCOMMITTED, read_label=READ_COMMITTED,
                     seed=seed).start()
    try:
        wait_until(lambda: wl.txn_count("aborted") >= 10 and wl.txn_count("committed") >= 10, timeout=60,
                   what="aborted and committed transactions")
        time.sleep(1.0)  # the consumer catches up with the aborted records
    finally:
        wl.stop()
    history = wl.drain()
    verdict = check(history)
    print(f"{_txn_counts(verdict)}\n{verdict.summary()}")
    assert verdict.aborted_read, "reads at read_uncommitted labelled read_committed: the checker found no G1a"
    assert all(r[0].startswith("c0/") for r in verdict.aborted_read), "only the lying consumer read aborted data"
    history.isolation = {k: READ_UNCOMMITTED for k in history.isolation}
    truthful = check(history)
    assert truthful.ok, truthful.summary()


# ------------------------------------------------------------ consume-transform-produce, killed -9

class App:
    """The ctp_app.py subprocess: started, killed -9 and restarted by the test."""

    def __init__(self, floe, source: str, sink: str, log: Path, stderr: Path, max_batch: int, work_ms: int):
        self.floe = floe
        self.args = [source, sink, f"{source}-app", f"{source}-app-txn"]
        self.log = log
        self.stderr = stderr
        self.max_batch = max_batch
        self.work_ms = work_ms
        self.proc: subprocess.Popen | None = None
        self.instances = 0
        self.exits: list[int] = []  # exit codes of instances that stopped by themselves

    @property
    def group(self) -> str:
        return self.args[2]

    def start(self):
        self.instances += 1
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(CTP_APP), self.floe.bootstrap, *self.args,
                                          f"a{self.instances}", str(self.log), str(self.max_batch),
                                          str(self.work_ms)],
                                         stdin=subprocess.DEVNULL, stdout=err, stderr=err)

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def keep_running(self):
        """Restarts the app if it exited (it exits 3 on an error it cannot retry)."""
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
            self.start()


def _group_position(bootstrap: str, group: str, topic: str, partitions: int) -> int | None:
    """Sum of the group's committed offsets (stable ones: a plain OffsetFetch)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": READ_UNCOMMITTED})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=5)
        return sum(max(tp.offset, 0) for tp in got)
    except KafkaException:
        return None
    finally:
        c.close()


def _app_history(log: Path) -> History:
    """The app's transactions from its log; one still open when its instance died is unknown,
    and so is one whose commit was asked without a `committed` line."""
    h = History()
    for line in log.read_text().splitlines():
        ev = json.loads(line)
        kind, at, txn = ev["ev"], ev["at"], ev.get("txn")
        if kind == "begin":
            h.begin_txn(txn, "app", at=at)
        elif kind == "send":
            h.record_txn_send(txn, ev["p"], ev["v"].encode())
        elif kind == "ack":
            h.record_ack("app", ev["p"], ev["o"], ev["v"].encode())
        elif kind == "commit":
            h.txns[txn].commit_requested_at = at
            h.txns[txn].open_until = at
        elif kind == "committed":
            h.txns[txn].outcome = "committed"
        elif kind == "abort" and txn is not None:
            t = h.txns[txn]
            t.open_until = at if t.open_until is None else t.open_until
        elif kind == "aborted" and txn is not None and h.txns[txn].commit_requested_at is None:
            h.txns[txn].outcome = "aborted"
    for t in h.txns.values():
        if t.outcome == "open":
            t.outcome = "unknown"
    return h


def _run_ctp(floe, tmp_path: Path, rng: random.Random, app_kills: int, broker_kill_after: int | None):
    partitions, n = 3, 2000
    source = create_topic(floe.bootstrap, unique_topic("ctp-in"), partitions=partitions)
    sink = create_topic(floe.bootstrap, unique_topic("ctp-out"), partitions=partitions)
    inputs = [f"in-{i:05d}" for i in range(n)]
    p = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all", "linger.ms": 20})
    for i, v in enumerate(inputs):
        p.produce(source, key=v.encode(), value=v.encode(), partition=i % partitions)
    assert p.flush(CLIENT_TIMEOUT_S) == 0

    # 5 ms of work per record: at least 10 s of processing for the 2,000 inputs, however fast the
    # broker commits, so that every planned kill lands before the app is done.
    app = App(floe, source, sink, tmp_path / "ctp-app.log", tmp_path / "ctp-app.stderr", max_batch=10, work_ms=5)
    app.start()
    kills = broker_kills = 0
    position = 0

    def progressed():
        app.keep_running()
        now = _group_position(floe.bootstrap, app.group, source, partitions)
        return now is not None and now > position and now

    try:
        for k in range(app_kills):
            if position >= n:
                break
            # Kill at a random moment after this instance committed something.
            position = wait_until(progressed, timeout=90, interval=0.1, what=f"the app to commit (kill {k + 1})")
            if position >= n:
                break
            time.sleep(rng.uniform(0.0, 1.5))
            app.kill9()
            kills += 1
            app.start()
            if broker_kill_after is not None and kills == broker_kill_after:
                position = wait_until(progressed, timeout=90, interval=0.1, what="the app to commit before the broker kill")
                time.sleep(rng.uniform(0.0, 1.0))
                floe.kill9()
                broker_kills += 1
                time.sleep(rng.uniform(0.0, 1.0))
                floe.start()

        def done():
            app.keep_running()
            return _group_position(floe.bootstrap, app.group, source, partitions) == n

        wait_until(done, timeout=120, interval=0.2, what="the app to commit every input")
    finally:
        app.kill9()
    h = _app_history(app.log)
    drain_both(floe.bootstrap, sink, partitions, h)
    verdict = check(h)
    out = collections.Counter(val.decode().split("|")[0] for _, _, val in h.committed_drain)
    print(f"consume-transform-produce: {app.instances} app instances, {kills} app kills, {broker_kills} broker kills, "
          f"exits by itself {app.exits}\n{_txn_counts(verdict)}\n{verdict.summary()}")
    missing = [v for v in inputs if out[v] == 0]
    twice = {v: c for v, c in out.items() if c > 1}
    extra = [v for v in out if v not in set(inputs)]
    assert not missing and not twice and not extra, \
        f"not exactly once: {len(missing)} missing {missing[:5]}, {len(twice)} more than once {list(twice.items())[:5]}, extra {extra[:5]}"
    assert verdict.ok, verdict.summary()
    assert _group_position(floe.bootstrap, app.group, source, partitions) == n
    for part in range(partitions):
        assert end_offset(floe.bootstrap, sink, part, READ_COMMITTED) == end_offset(floe.bootstrap, sink, part,
                                                                                    READ_UNCOMMITTED)
    return kills, broker_kills, verdict


def test_consume_transform_produce_killed9_repeatedly_outputs_each_input_exactly_once(floe_factory, tmp_path):
    rng = random.Random(_seed())
    floe = floe_factory("floe", overrides=OVERRIDES)
    kills, _, verdict = _run_ctp(floe, tmp_path, rng, app_kills=4, broker_kill_after=None)
    assert kills >= 3, f"the app finished after {kills} kills: too fast to be killed mid-run"
    assert verdict.counts["txn_unknown"] >= 1, "no kill left a transaction open"


def test_consume_transform_produce_with_a_broker_kill9_outputs_each_input_exactly_once(floe_factory, tmp_path):
    rng = random.Random(_seed())
    floe = floe_factory("floe", overrides=OVERRIDES)
    kills, broker_kills, _ = _run_ctp(floe, tmp_path, rng, app_kills=2, broker_kill_after=1)
    assert broker_kills == 1 and kills >= 1
