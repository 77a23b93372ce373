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
import struct
import subprocess
import time

import pytest
from confluent_kafka import TopicPartition

from clients import consume_all, consume_range, consumer, create_topic, produce_all, unique_topic, watermarks
from floe_process import wait_until
from history import History, Workload, check

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


# ------------------------------------------------------------ torn and damaged files

def _batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(position, end, base offset, last offset) of the whole batches at the start of `data`."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        last_delta = struct.unpack_from(">i", data, pos + 23)[0]
        end = pos + 12 + length
        if length < 49 or end > len(data):
            break
        out.append((pos, end, base, base + last_delta))
        pos = end
    return out


def _acked_history(acks: dict[int, bytes]) -> History:
    h = History()
    for off, val in sorted(acks.items()):
        h.record_send("p0", 0, val)
        h.record_ack("p0", 0, off, val)
    return h


@pytest.mark.parametrize("damage", ["truncate-random", "append-garbage", "zero-last-4k"])
def test_damaged_active_segment_and_indexes_after_kill9(floe_factory, damage):
    """After a kill -9: damage the active segment and the indexes; startup
    truncates to the last whole batch before the damage, rebuilds the indexes,
    serves exactly that prefix, and takes new writes at the next offset."""
    rng = random.Random(_seed())
    floe = floe_factory("floe")
    topic = create_topic(floe.bootstrap, unique_topic("torn"), config={"segment.bytes": "40000",
                                                                         "index.interval.bytes": "1000"})
    base_ts = 1_750_000_000_000
    msgs = [{"value": f"v{i:05d}-".encode() + b"x" * 60, "timestamp": base_ts + i * 10} for i in range(2000)]
    offsets = produce_all(floe.bootstrap, topic, msgs, **{"batch.num.messages": 20, "linger.ms": 20})
    acks = {off: m["value"] for off, m in zip(offsets, msgs)}
    floe.kill9()

    segs = floe.segment_files(topic)
    assert len(segs) >= 3, f"expected several segments, got {segs}"
    active = segs[-1]
    data = active.read_bytes()
    batches = _batches(data)
    assert batches and batches[-1][1] == len(data), "the active segment should end on a batch boundary"
    if damage == "truncate-random":
        cut = rng.randrange(1, len(data))
        with open(active, "r+b") as f:
            f.truncate(cut)
        limit = cut
    elif damage == "append-garbage":
        with open(active, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 5000))))
        limit = len(data)
    else:
        with open(active, "r+b") as f:
            f.seek(max(0, len(data) - 4096))
            f.write(b"\0" * min(4096, len(data)))
        limit = len(data) - 4096
    surviving = [b for b in batches if b[1] <= limit]
    expected_end = surviving[-1][3] + 1 if surviving else int(active.stem)
    # Damage every index of the partition too: torn, garbage, missing.
    pdir = floe.partition_dir(topic)
    for i, f in enumerate(sorted(pdir.glob("*.index")) + sorted(pdir.glob("*.timeindex"))):
        if i % 3 == 0:
            f.unlink()
        elif i % 3 == 1:
            with open(f, "r+b") as fh:
                fh.truncate(max(0, f.stat().st_size // 2 - 3))
        else:
            f.write_bytes(bytes(rng.randrange(256) for _ in range(f.stat().st_size or 64)))

    floe.start()
    assert watermarks(floe.bootstrap, topic) == (0, expected_end), f"damage at byte {limit} of {active.name}"
    got = consume_range(floe.bootstrap, topic, 0, expected_end)
    assert [m.value() for m in got] == [msgs[i]["value"] for i in range(expected_end)]
    # The time index answers again (ListOffsets by timestamp), across segments.
    c = consumer(floe.bootstrap)
    try:
        for i in sorted({0, 1, expected_end // 3, expected_end // 2, expected_end - 1}):
            (r,) = c.offsets_for_times([TopicPartition(topic, 0, base_ts + i * 10 - 5)], timeout=30)
            assert r.offset == i, f"offsets_for_times for record {i}: got {r.offset}"
    finally:
        c.close()
    more = [{"value": f"after-{i}".encode()} for i in range(300)]
    new_offsets = produce_all(floe.bootstrap, topic, more)
    assert new_offsets == list(range(expected_end, expected_end + 300))
    # Checker: every acknowledged record before the damage point, and every new one, is there once.
    h = _acked_history({o: v for o, v in acks.items() if o < expected_end})
    for o, m in zip(new_offsets, more):
        h.record_send("p1", 0, m["value"])
        h.record_ack("p1", 0, o, m["value"])
    for m in consume_all(floe.bootstrap, topic):
        h.drain.append((0, m.offset(), m.value()))
    h.drain_bounds[0] = (0, expected_end + 300)
    verdict = check(h)
    assert verdict.ok, verdict.summary()
    lost_to_damage = len(acks) - expected_end
    print(f"{damage}: cut at byte {limit}/{len(data)}; {expected_end} records survive, "
          f"{lost_to_damage} acknowledged records were in the damaged tail\n{verdict.summary()}")


# ------------------------------------------------------------ disk full

@pytest.fixture
def small_fs(tmp_path):
    """A 16 MiB tmpfs (unmounted at teardown); skips if this machine cannot mount one."""
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _free_bytes(path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _parse_checkpoint(path) -> dict:
    lines = path.read_text().splitlines()
    assert lines[0] == "0", f"{path}: version line {lines[0]!r}"
    count = int(lines[1])
    assert len(lines) == 2 + count, f"{path}: {count} entries announced, {len(lines) - 2} present"
    return {tuple(line.split()[:2]): int(line.split()[2]) for line in lines[2:]}


def test_disk_full_fails_produce_cleanly_and_resumes(floe_factory, small_fs):
    """The data dir on a 16 MiB tmpfs: produce until it is full. Produce gets
    KAFKA_STORAGE_ERROR, no partial batch is left in a segment, the checkpoints
    stay parseable; after space is freed producing resumes; nothing acknowledged is lost."""
    from confluent_kafka import KafkaError, Producer

    floe = floe_factory("floe", data_dir=small_fs / "data",
                        overrides={"log.segment.bytes": "1048576", "log.flush.scheduler.interval.ms": "200"})
    topic = create_topic(floe.bootstrap, unique_topic("full"), partitions=2)
    filler = small_fs / "filler"
    with open(filler, "wb") as f:  # leave ~3 MiB for the log
        f.write(b"\0" * max(0, _free_bytes(small_fs) - 3 * 1024 * 1024))

    h = History()
    errors: list = []

    def on_delivery(err, msg):
        if err is None:
            h.record_ack("p0", msg.partition(), msg.offset(), msg.value())
        else:
            h.failures.append(("p0", msg.value(), str(err)))
            errors.append(err.code())

    def produce_round(prefix: str, n: int, timeout_ms: int):
        p = Producer({"bootstrap.servers": floe.bootstrap, "acks": "all", "retries": 0,
                      "message.timeout.ms": timeout_ms, "linger.ms": 5, "batch.num.messages": 50})
        for i in range(n):
            value = f"{prefix}-{i:06d}-".encode() + os.urandom(1000)
            while True:
                try:
                    p.produce(topic, value=value, partition=i % 2, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
            h.record_send("p0", i % 2, value)
            p.poll(0)
        assert p.flush(60) == 0

    # ~5 MiB into ~3 MiB of space: the disk fills part-way.
    produce_round("fill", 5000, 10_000)
    acked_before = len(h.acks)
    assert 500 < acked_before < 5000, f"{acked_before} of 5000 acknowledged: the disk did not fill part-way"
    assert errors and all(e == KafkaError.KAFKA_STORAGE_ERROR for e in errors), \
        f"produce on a full disk failed with {sorted(set(errors))}, want KAFKA_STORAGE_ERROR"
    assert floe.running, "the broker died on a full disk"

    # No partial batch in any segment; the checkpoints parse.
    for part in range(2):
        for seg in floe.segment_files(topic, part):
            data = seg.read_bytes()
            batches = _batches(data)
            assert (batches[-1][1] if batches else 0) == len(data), \
                f"{seg} holds {len(data) - (batches[-1][1] if batches else 0)} bytes of a partial batch"
    for name in ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint"):
        _parse_checkpoint(floe.data_dir / name)

    # Free the space: producing resumes.
    filler.unlink()
    errors.clear()
    produce_round("after", 500, 30_000)
    assert not errors, f"produce still failing after space was freed: {sorted(set(errors))}"
    assert len(h.acks) == acked_before + 500

    # A crash now, then the checker over everything acknowledged.
    floe.kill9()
    floe.start()
    for part in range(2):
        lo, hi = watermarks(floe.bootstrap, topic, part)
        h.drain_bounds[part] = (lo, hi)
        for m in consume_range(floe.bootstrap, topic, lo, hi - lo, partition=part):
            h.drain.append((part, m.offset(), m.value()))
    verdict = check(h)
    print(f"disk full: {acked_before} acknowledged before full, {len(h.failures)} refused\n{verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert not verdict.unacked_read, f"{len(verdict.unacked_read)} refused records are in the log"


# ------------------------------------------------------------ bit rot in sealed segments

def _floe_verify(data_dir) -> subprocess.CompletedProcess:
    from floe_process import floe_bin
    return subprocess.run([floe_bin(), "verify", "--data-dir", str(data_dir)], capture_output=True, text=True,
                          timeout=60)


def _produce_segments(floe, prefix: str):
    topic = create_topic(floe.bootstrap, unique_topic(prefix), config={"segment.bytes": "20000"})
    msgs = [{"value": f"v{i:05d}-".encode() + b"y" * 60} for i in range(2000)]
    offsets = produce_all(floe.bootstrap, topic, msgs, **{"batch.num.messages": 20, "linger.ms": 20})
    return topic, {o: m["value"] for o, m in zip(offsets, msgs)}


def _rot(seg, batch_index: int, how: str) -> tuple[int, int, int]:
    """Damages one batch of `seg` in place; returns (position, first offset, last offset)."""
    data = bytearray(seg.read_bytes())
    pos, end, first, last = _batches(bytes(data))[batch_index]
    if how == "payload":
        data[end - 10] ^= 0x40  # inside the last record: the CRC no longer matches
    else:
        data[pos + 8:pos + 12] = struct.pack(">i", 0x7F000000)  # the length field: framing lost
    seg.write_bytes(bytes(data))
    return pos, first, last


def test_bit_rot_in_sealed_segments_is_reported_not_truncated(floe_factory):
    """After a crash, startup recovery scans the sealed segments: damaged ranges
    are logged with file, bytes and offsets, counted in a metric, stepped over
    when serving, and nothing after them is truncated. `floe verify` lists the
    same ranges; tiering skips and reports them."""
    floe = floe_factory("floe")
    topic, acks = _produce_segments(floe, "rot")
    floe.kill9()
    segs = floe.segment_files(topic)
    assert len(segs) >= 5, segs
    damaged = [_rot(segs[1], 3, "payload"), _rot(segs[2], 2, "length")]
    hidden = {o for _, first, last in damaged for o in range(first, last + 1)}

    r = _floe_verify(floe.data_dir)
    print(r.stdout)
    assert r.returncode == 1, f"floe verify exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    for (pos, first, last), seg in zip(damaged, segs[1:3]):
        assert f"offsets {first}..={last} in {seg}" in r.stdout and f"bytes {pos}.." in r.stdout, r.stdout

    floe.start(overrides={"floe.iceberg.enabled": "true", "floe.iceberg.tick-ms": "300"})
    assert watermarks(floe.bootstrap, topic) == (0, 2000), "later data was truncated"
    assert floe.metric("floe_log_corrupt_ranges", topic=topic, partition="0") == 2
    log = floe.stderr_text()
    for _, first, last in damaged:
        assert f"first_offset={first} last_offset=Some({last})" in log, "startup did not log the damaged range"

    h = _acked_history(acks)
    got = consume_range(floe.bootstrap, topic, 0, 2000 - len(hidden))
    for m in got:
        h.drain.append((0, m.offset(), m.value()))
    h.drain_bounds[0] = (0, 2000)
    verdict = check(h)
    print(verdict.summary())
    # Exactly the damaged batches are missing; everything else is served, unchanged.
    assert sorted(o for _, o, _ in verdict.lost) == sorted(hidden)
    assert [(first, last) for _, first, last in verdict.gaps] == [(f, lst) for _, f, lst in damaged]
    assert not (verdict.duplicate or verdict.inconsistent or verdict.nonmonotonic or verdict.phantom)
    assert produce_all(floe.bootstrap, topic, [{"value": b"after-rot"}]) == [2000]

    # Tiering steps over the damaged ranges and reports them.
    wait_until(lambda: floe.metric("floe_iceberg_skipped_batches_total", topic=topic) >= 2, timeout=60,
               what="tiering to report the damaged ranges")
    assert "skipping a damaged range of a segment" in floe.stderr_text()

    # A clean restart reports the damage again (the damaged segment stays below the recovery point).
    assert floe.restart() == 0
    assert floe.metric("floe_log_corrupt_ranges", topic=topic, partition="0") == 2
    assert watermarks(floe.bootstrap, topic) == (0, 2001)


def test_bit_rot_below_the_recovery_point_found_by_verify_and_tiering(floe_factory):
    """After a clean shutdown the segments are trusted at startup (as in Kafka):
    `floe verify` finds the damage, tiering refuses to tier the batch and reports it."""
    floe = floe_factory("floe")
    topic, _ = _produce_segments(floe, "rot-clean")
    assert floe.stop() == 0
    seg = floe.segment_files(topic)[1]
    pos, first, last = _rot(seg, 4, "payload")
    r = _floe_verify(floe.data_dir)
    assert r.returncode == 1 and f"offsets {first}..={last} in {seg} bytes {pos}.." in r.stdout, r.stdout
    assert "1 corrupt ranges" in r.stdout

    floe.start(overrides={"floe.iceberg.enabled": "true", "floe.iceberg.tick-ms": "300"})
    assert watermarks(floe.bootstrap, topic) == (0, 2000)
    wait_until(lambda: floe.metric("floe_iceberg_skipped_batches_total", topic=topic) >= 1, timeout=60,
               what="tiering to report the corrupt batch")
    log = floe.stderr_text()
    assert "skipping a record batch whose CRC does not match" in log
    assert f"first_offset={first} last_offset={last}" in log
    # A clean data dir verifies clean.
    clean = floe_factory("clean")
    _produce_segments(clean, "ok")
    assert clean.stop() == 0
    r = _floe_verify(clean.data_dir)
    assert r.returncode == 0 and "no corruption" in r.stdout, r.stdout
