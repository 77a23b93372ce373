"""A real third-party stream processor against floe (issue 13, acceptance bullet 2):
Quix Streams (PyPI `quixstreams`, built on confluent-kafka) runs a stateful
exactly-once application (quix_counter_app.py: a count per key in a RocksDB store
whose changelog topic is compacted). The app is killed -9 and its local state is
wiped before each restart, so the counts must come back from the changelog topic;
the committed output must hold every input exactly once with the exact count.

Needs, and skips without, an interpreter with quixstreams: FLOE_QUIX_PYTHON, else
this one. quixstreams 3.28 pins confluent-kafka < 2.13 while
tests/python/requirements.txt has a newer one, so it lives in its own venv, which
tests/run-all.sh makes (.venv-quix) and passes in FLOE_QUIX_PYTHON:
    python3 -m venv .venv-quix && .venv-quix/bin/pip install quixstreams==3.28.1
    FLOE_QUIX_PYTHON=.venv-quix/bin/python pytest tests/python/test_stream_framework.py
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from floe_process import wait_until
from history import READ_COMMITTED, drain_partition

QUIX_PYTHON = os.environ.get("FLOE_QUIX_PYTHON", sys.executable)
APP = Path(__file__).with_name("quix_counter_app.py")


def _quix_version() -> str | None:
    r = subprocess.run([QUIX_PYTHON, "-c", "import quixstreams; print(quixstreams.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


pytestmark = pytest.mark.skipif(_quix_version() is None,
                                reason=f"no quixstreams for {QUIX_PYTHON} (set FLOE_QUIX_PYTHON; see the module doc)")


def _group_position(bootstrap: str, group: str, topic: str, partitions: int) -> int | None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        return sum(max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                          timeout=5))
    except KafkaException:
        return None
    finally:
        c.close()


def test_quix_streams_stateful_exactly_once_with_state_restored_from_the_changelog(floe_factory, tmp_path):
    floe = floe_factory("floe", overrides={"group.initial.rebalance.delay.ms": "0"})
    rng = random.Random()
    partitions, n, keys = 2, 600, 6
    source = create_topic(floe.bootstrap, unique_topic("quix-in"), partitions=partitions)
    sink = create_topic(floe.bootstrap, unique_topic("quix-out"), partitions=partitions)
    group = f"{source}-counter"
    inputs = [(f"k{i % keys}", f"in-{i:05d}") for i in range(n)]
    p = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all", "linger.ms": 20})
    for key, value in inputs:
        p.produce(source, key=key.encode(), value=value.encode(), partition=int(key[1:]) % partitions)
    assert p.flush(CLIENT_TIMEOUT_S) == 0

    state_dir = tmp_path / "quix-state"
    stderr = open(tmp_path / "quix-app.stderr", "ab")

    def start():
        return subprocess.Popen([QUIX_PYTHON, str(APP), floe.bootstrap, source, sink, group, str(state_dir)],
                                stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr)

    app = start()
    kills = 0
    try:
        for target in (n // 4, n // 2):
            wait_until(lambda: (_group_position(floe.bootstrap, group, source, partitions) or 0) >= target,
                       timeout=120, interval=0.2, what=f"the app to commit {target} inputs")
            time.sleep(rng.uniform(0.0, 1.0))
            app.send_signal(signal.SIGKILL)
            app.wait()
            kills += 1
            shutil.rmtree(state_dir, ignore_errors=True)  # the state must come back from the changelog
            app = start()
        wait_until(lambda: _group_position(floe.bootstrap, group, source, partitions) == n, timeout=180,
                   interval=0.2, what="the app to commit every input")
    finally:
        app.send_signal(signal.SIGKILL)
        app.wait()
        stderr.close()

    out = []
    for part in range(partitions):
        out += [json.loads(v) for _, _, v in drain_partition(floe.bootstrap, sink, part, READ_COMMITTED)[2]]
    seen = collections.Counter(o["in"] for o in out)
    assert sorted(seen) == sorted(v for _, v in inputs) and set(seen.values()) == {1}, \
        f"not exactly once: {[v for _, v in inputs if seen[v] != 1][:10]}"
    # The count each input was given is its rank among its key's inputs: the state survived.
    expected, per_key = {}, collections.Counter()
    for key, value in inputs:
        per_key[key] += 1
        expected[value] = per_key[key]
    wrong = [(o["in"], o["n"], expected[o["in"]]) for o in out if o["n"] != expected[o["in"]]]
    print(f"quixstreams {_quix_version()}: {kills} kills with the state wiped, {len(out)} outputs")
    assert not wrong, f"counts not restored from the changelog (input, got, want): {wrong[:10]}"
