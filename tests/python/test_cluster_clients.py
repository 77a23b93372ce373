"""Clients other than librdkafka follow leadership changes in a cluster.

kafka-python and kafkajs have their own metadata, retry and group code (and strict
decoders). Each runs as an application of its own (`failover_app_kafka_python.py`,
`tests/js/failover_app.mjs`): an idempotent acks=all producer and a group consumer,
printing every send, acknowledgement, read and every error that reached the
application. Underneath, three brokers lose and regain leadership:

1. kill -9 of the leader of a busy partition (restarted once another replica leads);
2. SIGTERM of the broker that coordinates the group (controlled shutdown: its
   leaderships, `__consumer_offsets` among them, move first), then a restart.

Then the application stops producing, reads on until it has every acknowledged value,
and the history checker judges what it printed plus a final drain. What the issue asks:
no error beyond retriable ones reaches the application, and nothing acknowledged is lost,
duplicated or reordered. (librdkafka is judged the same way by test_cluster_replication.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from clients import admin, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from floe_process import wait_until
from history import READ_UNCOMMITTED, History, check, drain_partition

HERE = Path(__file__).resolve().parent
JS_DIR = HERE.parent / "js"
PARTITIONS = 3


class App:
    """One client application as a child process, its JSON lines collected as they come."""

    def __init__(self, argv: list[str], cwd: Path):
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self.garbage: list[str] = []
        self._lock = threading.Lock()
        self._stdout = threading.Thread(target=self._read, daemon=True)
        self._stdout.start()
        self._stderr_lines: list[str] = []
        threading.Thread(target=lambda: self._stderr_lines.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                self.garbage.append(line)
                continue
            with self._lock:
                self.events.append(ev)

    def count(self, kind: str) -> int:
        with self._lock:
            return sum(1 for e in self.events if e["ev"] == kind)

    def stop(self, timeout: float = 120) -> int:
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._stdout.join(timeout=10)
        return rc

    def stderr(self) -> str:
        return "".join(self._stderr_lines)[-5000:]


def _kafka_python(bootstrap: str, topic: str, group: str) -> App:
    return App([sys.executable, str(HERE / "failover_app_kafka_python.py"), bootstrap, topic, group], HERE)


def _kafkajs(bootstrap: str, topic: str, group: str) -> App:
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.skip("kafkajs is not installed (tests/run-all.sh runs npm ci in tests/js)")
    return App(["node", str(JS_DIR / "failover_app.mjs"), bootstrap, topic, group], JS_DIR)


def _state(etcd, prefix: str, topic: str, p: int) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _full_isr(etcd, prefix, brokers, topic):
    ids = sorted(node_id(b) for b in brokers)
    for p in range(PARTITIONS):
        wait_until(lambda p=p: sorted(_state(etcd, prefix, topic, p)["isr"]) == ids, timeout=60, interval=0.3,
                   what=f"{topic}-{p} to have a full ISR again")


@pytest.mark.parametrize("start_app", [_kafka_python, _kafkajs], ids=["kafka-python", "kafkajs"])
def test_a_client_follows_leadership_through_a_kill_and_a_controlled_shutdown(floe_factory, etcd, start_app):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    bootstrap = ",".join(b.bootstrap for b in brokers)
    topic = unique_topic("clientfailover")
    a = admin(bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                              config={"min.insync.replicas": "2"})], request_timeout=15)[topic].result(timeout=20)
    group = f"{topic}-group"
    app = start_app(bootstrap, topic, group)
    try:
        wait_until(lambda: app.count("ack") >= 100 and app.count("read") >= 50, timeout=90,
                   what=f"the application's first acknowledgements and reads\n{app.stderr()}")

        # 1. kill -9 of partition 0's leader; another in-sync replica leads at a new epoch.
        before = _state(etcd, prefix, topic, 0)
        victim = _by_id(brokers, before["leader"])
        victim.kill9()
        wait_until(lambda: (s := _state(etcd, prefix, topic, 0))["leader"] not in (-1, node_id(victim))
                   and s["leader_epoch"] > before["leader_epoch"], timeout=30, what="a new leader of partition 0")
        acks = app.count("ack")
        wait_until(lambda: app.count("ack") > acks + 100, timeout=90,
                   what=f"acknowledgements after the kill\n{app.stderr()}")
        victim.start()
        agreed_view(brokers, live=3)
        _full_isr(etcd, prefix, brokers, topic)

        # 2. Controlled shutdown of the group coordinator (the leader of __consumer_offsets).
        coordinator = _by_id(brokers, _state(etcd, prefix, "__consumer_offsets", 0)["leader"])
        assert coordinator.stop() == 0, "a clean stop"
        acks, reads = app.count("ack"), app.count("read")
        wait_until(lambda: app.count("ack") > acks + 100 and app.count("read") > reads + 100, timeout=90,
                   what=f"acknowledgements and reads after the coordinator stopped\n{app.stderr()}")
        coordinator.start()
        agreed_view(brokers, live=3)
    finally:
        rc = app.stop()
    assert rc == 0, f"the application exited with {rc}\n{app.stderr()}"
    assert not app.garbage, app.garbage[:5]
    assert [e for e in app.events if e["ev"] == "done"], f"the application did not finish\n{app.stderr()}"

    errors = [e for e in app.events if e["ev"] == "error"]
    # kafkajs reports a consumer crash it recovers from itself (it restarts the consumer,
    # the application's code sees no exception) as an event: counted, not fatal.
    fatal = [e for e in errors if not e["retriable"] and not e.get("recovered")]
    print(f"errors seen by the application: {len(errors)} ({len(fatal)} neither retriable nor recovered by the "
          f"client): {errors[:5]}")
    assert not fatal, fatal[:5]

    h = History()
    for e in app.events:
        if e["ev"] == "send":
            h.record_send("app", -1, e["v"].encode())
        elif e["ev"] == "ack":
            h.record_ack("app", e["p"], e["o"], e["v"].encode())
        elif e["ev"] == "read":
            h.record_read(e["r"], e["p"], e["o"], e["v"].encode())
    for p in range(PARTITIONS):
        lo, hi, recs = drain_partition(bootstrap, topic, p, READ_UNCOMMITTED)
        h.drain_bounds[p] = (lo, hi)
        h.drain += recs
    verdict = check(h)
    print(verdict.summary())
    assert verdict.ok, verdict.summary()
    assert verdict.counts["acked"] > 300, verdict.counts
    # The group read everything acknowledged (across its rebalances), and nothing else.
    read_values = {v for _, _, _, v in h.reads}
    acked_values = {v for _, _, _, v in h.acks}
    assert acked_values <= read_values, f"{len(acked_values - read_values)} acknowledged values never read"
