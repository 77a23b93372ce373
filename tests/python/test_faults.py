"""Fault tests (issue #6): each runs a real workload, injects a fault, and ends
with the history checker (history.py).

Short forms run in the test command. The soak form runs the kill -9 loop for
FLOE_SOAK_SECONDS (e.g. 3600) and writes its verdict to FLOE_SOAK_REPORT:

    FLOE_SOAK_SECONDS=3600 FLOE_SOAK_REPORT=soak.json \\
        .venv/bin/python -m pytest tests/python/test_faults.py -k kill9_loop --timeout=0 -s
"""

from __future__ import annotations

import json
import os
import random
import time

from clients import create_topic, unique_topic
from floe_process import wait_until
from history import Workload, check

SOAK_SECONDS = float(os.environ.get("FLOE_SOAK_SECONDS", "0"))
SHORT_KILLS = int(os.environ.get("FLOE_FAULT_KILLS", "6"))


def _seed() -> int:
    seed = int(os.environ.get("FLOE_FAULT_SEED", str(random.randrange(1 << 30))))
    print(f"fault seed: {seed} (FLOE_FAULT_SEED={seed} replays the same fault schedule)")
    return seed


def test_kill9_loop_loses_nothing_acknowledged(floe_factory):
    """Idempotent acks=all producers and group consumers run while the broker is
    SIGKILLed at random moments and restarted on the same data dir and port."""
    rng = random.Random(_seed())
    floe = floe_factory("floe", overrides={"group.initial.rebalance.delay.ms": "0",
                                           "log.segment.bytes": "262144"})
    partitions = 4
    topic = create_topic(floe.bootstrap, unique_topic("kill9loop"), partitions=partitions)
    wl = Workload(floe.bootstrap, topic, partitions, producers=3, consumers=2, rate_per_producer=400).start()
    wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")

    kills = 0
    started = time.monotonic()
    soak = SOAK_SECONDS > 0
    try:
        while (time.monotonic() - started < SOAK_SECONDS) if soak else (kills < SHORT_KILLS):
            time.sleep(rng.uniform(0.5, 4.0))
            floe.kill9()
            kills += 1
            time.sleep(rng.uniform(0.0, 1.0))  # down for a moment: requests pile up in the clients
            floe.start()
            before = wl.acked_count()
            # Producers must make progress after every restart (librdkafka retries, idempotently).
            wait_until(lambda: wl.acked_count() > before + 100, timeout=60,
                       what=f"acknowledgements after restart {kills}")
            assert not wl.fatal_errors, f"producer fatal errors: {wl.fatal_errors}"
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0, f"{wl.unflushed_at_stop} sends without an outcome after 60 s"
    assert not wl.fatal_errors, f"producer fatal errors: {wl.fatal_errors}"
    history = wl.drain()
    verdict = check(history)
    elapsed = time.monotonic() - started
    print(f"kill -9 loop: {kills} kills in {elapsed:.0f}s\n{verdict.summary()}")
    report = os.environ.get("FLOE_SOAK_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"kills": kills, "seconds": round(elapsed), "valid": verdict.ok,
                       "counts": verdict.counts,
                       "findings": {k: len(getattr(verdict, k)) for k in verdict.VIOLATIONS
                                    + ("unacked_read", "unacked_missing")}}, f, indent=2)
    assert verdict.ok, verdict.summary()
    assert kills >= (1 if soak else SHORT_KILLS)
    assert verdict.counts["acked"] > 1000, verdict.counts
    assert verdict.counts["read"] > 0, "the group consumers read nothing"
    assert verdict.counts["commits"] > 0, "the group consumers committed nothing"
