"""A stopped broker's process ends promptly (issue #33): the time from its "floe stopped
cleanly" line (everything flushed and checkpointed) to the process's exit, with the web
console off and on, traffic first so the group coordinator, tiering and console have run.

Measured on the 2-core CI machine (debug and release builds): a few milliseconds. The
bound asserted (the median of three stops under 0.8 s) leaves room for a loaded machine
and still fails the 1.2-2.1 s the issue reported; the figures are printed (`-s`)."""

from __future__ import annotations

import statistics
import time
import urllib.request
from datetime import datetime

import pytest

from clients import consume_range, create_topic, produce_all, unique_topic

STOPPED = "floe stopped cleanly"
BOUND_S = 0.8


def stop_and_time(proc) -> float:
    """SIGTERMs `proc`; seconds from its STOPPED line's timestamp to the process's exit."""
    assert proc.stop() == 0, proc.stderr_text()
    exited = time.time()
    lines = [line for line in proc.stderr_text().splitlines() if STOPPED in line]
    assert lines, f"no `{STOPPED}` line\n{proc.stderr_text()}"
    # Logged as `2026-12-06T02:56:56.553365Z  INFO floe_broker::run: floe stopped cleanly`.
    stamp = datetime.fromisoformat(lines[-1].split()[0].replace("Z", "+00:00")).timestamp()
    return exited - stamp


@pytest.mark.parametrize("console", [False, True], ids=["no-console", "console"])
def test_process_exits_promptly_after_stopping_cleanly(floe_factory, tmp_path, console):
    from floe_process import free_port
    figures = []
    for run in range(3):
        proc = floe_factory(f"floe-{run}", start=False)
        if console:
            proc.console_port = free_port()
        proc.start()
        topic = create_topic(proc.bootstrap, unique_topic("stop"))
        produce_all(proc.bootstrap, topic, [{"value": f"v{i}".encode()} for i in range(20)])
        assert len(consume_range(proc.bootstrap, topic, 0, 20, **{"group.id": f"g{run}"})) == 20
        if console:
            urllib.request.urlopen(proc.console_url + "/", timeout=30).read()
        figures.append(stop_and_time(proc))
    median = statistics.median(figures)
    print(f"\nstopped cleanly -> exit ({'console on' if console else 'console off'}): "
          f"{', '.join(f'{f * 1000:.0f} ms' for f in figures)}; median {median * 1000:.0f} ms")
    assert median < BOUND_S, f"exit {figures} s after `{STOPPED}`"
