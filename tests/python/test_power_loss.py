"""Power loss (issue #6 §2.2): the broker's data directory on floe-powerloss-fs,
a FUSE filesystem that keeps every change not yet fsynced in memory and drops
it on a "cut" (tests/powerloss-fs/src/disk.rs has the model: a file's bytes are
durable after fsync of the file, a directory entry after fsync of the directory).

A cycle: SIGKILL the broker at a random moment, cut the power (unsynced
changes are gone, the mount comes back with only durable state), start the
broker again on what survived. The history checker (history.py) then looks at
everything the clients were told.

- `flush.messages=1` (log.flush.interval.messages=1): an append is fsynced
  before it is acknowledged, so no acknowledged record may be lost.
- Flushing off (Kafka's defaults): acknowledged records can be lost, and the
  checker must see it. That is the negative control: it proves the rig drops
  data and the checker notices.

Environment: FLOE_POWERLOSS_CYCLES (default 5) cycles in the flush.messages=1
test; FLOE_FAULT_SEED replays a schedule; FLOE_POWERLOSS_FS_BIN names the
filesystem binary (default: beside FLOE_BIN, else in the cargo target dir).
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

from clients import CLIENT_TIMEOUT_S, admin, committed_watermark, create_topic, produce_all, unique_topic
from floe_process import REPO_ROOT, floe_bin, wait_until
from history import Workload, check

CYCLES = int(os.environ.get("FLOE_POWERLOSS_CYCLES", "5"))
# The negative control repeats its cycle until the checker reports a loss, at most this often.
CONTROL_ATTEMPTS = 4


def _seed() -> int:
    seed = int(os.environ.get("FLOE_FAULT_SEED", str(random.randrange(1 << 30))))
    print(f"power-loss seed: {seed} (FLOE_FAULT_SEED={seed} replays the same schedule)")
    return seed


def powerloss_fs_bin() -> str:
    explicit = os.environ.get("FLOE_POWERLOSS_FS_BIN")
    if explicit:
        return explicit
    beside = Path(floe_bin()).parent / "floe-powerloss-fs"
    if beside.exists():
        return str(beside)
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return str(Path(target) / "debug" / "floe-powerloss-fs")


class PowerLossFs:
    """One floe-powerloss-fs process: its mount point and its control socket."""

    def __init__(self, workdir: Path):
        self.mountpoint = workdir / "mnt"
        self.control = workdir / "control.sock"
        self.log_path = workdir / "powerloss-fs.log"
        self.mountpoint.mkdir()
        binary = powerloss_fs_bin()
        assert os.access(binary, os.X_OK), \
            f"{binary} not found (cargo build -p floe-powerloss-fs, or set FLOE_POWERLOSS_FS_BIN)"
        self._log = open(self.log_path, "ab", buffering=0)
        self.proc = subprocess.Popen([binary, "--mountpoint", str(self.mountpoint), "--control", str(self.control)],
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        # The control socket appears once the mount is up.
        wait_until(lambda: self.control.exists() or self.proc.poll() is not None, timeout=30,
                   what="floe-powerloss-fs to mount")
        assert self.proc.poll() is None, f"floe-powerloss-fs exited:\n{self.log_text()}"

    def command(self, cmd: str) -> dict:
        """Sends one control command; returns the reply's key=value fields."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(str(self.control))
            s.sendall(cmd.encode() + b"\n")
            reply = s.makefile("r").readline().strip()
        assert reply.startswith("ok"), f"{cmd}: {reply!r}\n{self.log_text()}"
        return {k: int(v) for k, v in (f.split("=") for f in reply.split()[1:])}

    def cut(self, torn_seed: int | None = None) -> dict:
        """Power cut: every unsynced change is dropped; the mount is fresh afterwards.
        With `torn_seed`, a random part of the unsynced changes (whole pages, lengths,
        single directory entries) reaches the disk first, as a real disk's cache may."""
        return self.command("cut" if torn_seed is None else f"cut torn {torn_seed}")

    def close(self):
        """Unmounts and stops the filesystem process; safe to call twice."""
        if self._log.closed:
            return
        if self.proc.poll() is None:
            try:
                self.command("quit")
                self.proc.wait(timeout=20)
            except Exception:  # noqa: BLE001 - teardown: make sure nothing is left mounted
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["umount", "-l", str(self.mountpoint)], capture_output=True, check=False)
        self._log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # For conftest's failure report, which lists each process's log.
    name = "floe-powerloss-fs"

    def stderr_text(self) -> str:
        return self.log_text()[-60_000:]

    def kill9(self):
        """floe_factory's teardown kills every listed process; close() unmounts instead."""
        self.close()


@pytest.fixture
def powerloss_fs(request, tmp_path, floe_factory):
    if not os.path.exists("/dev/fuse") or os.geteuid() != 0:
        pytest.skip("the power-loss rig mounts a FUSE filesystem: needs /dev/fuse and root")
    fs = PowerLossFs(tmp_path)
    # conftest attaches the log of everything in this list to a failing test's report.
    request.node._floe_processes.append(fs)
    try:
        yield fs
    finally:
        # Brokers first: unmounting waits for the kernel to let go of files they hold open.
        for proc in request.node._floe_processes:
            if proc is not fs:
                proc.kill9()
        fs.close()


def _start_on(floe_factory, fs: PowerLossFs, overrides: dict):
    # The data dir is the mount's root: a filesystem's root is durable from the start,
    # so everything under it is the broker's to make durable.
    return floe_factory("floe", data_dir=fs.mountpoint,
                        overrides={"group.initial.rebalance.delay.ms": "0", **overrides})


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (OffsetFetch, without joining the group)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


@pytest.mark.parametrize("cut", ["all-unsynced-lost", "torn"])
def test_flush_messages_1_loses_nothing_acknowledged_across_power_cuts(floe_factory, powerloss_fs, cut):
    """flush.messages=1 on the topic: idempotent acks=all producers and a group consumer
    run while the broker is SIGKILLed and the power cut at random moments (`torn`: with
    a random part of the unsynced changes reaching the disk first). After every
    restart the group's acknowledged offset commits are still there (they are always
    fsynced) and producing resumes; at the end the checker finds no acknowledged record lost."""
    rng = random.Random(_seed())
    fs = powerloss_fs
    # Small segments: several rolls (new segment files, a directory fsync) per partition.
    floe = _start_on(floe_factory, fs, {"log.segment.bytes": "65536"})
    partitions = 3
    topic = create_topic(floe.bootstrap, unique_topic("powerloss"), partitions=partitions,
                         config={"flush.messages": "1"})
    wl = Workload(floe.bootstrap, topic, partitions, producers=2, consumers=1, rate_per_producer=300).start()
    wait_until(lambda: wl.acked_count() >= 1, timeout=60, what="first acknowledgement")

    try:
        for cycle in range(CYCLES):
            # The first cut can come right after the first acknowledgements.
            time.sleep(rng.uniform(0.0, 0.5) if cycle == 0 else rng.uniform(0.3, 2.5))
            floe.kill9()
            with wl._lock:
                acked_commits = {}
                for _, part, off in wl.history.commits:
                    acked_commits[part] = max(off, acked_commits.get(part, -1))
            dropped = fs.cut(rng.randrange(1, 1 << 62) if cut == "torn" else None)
            print(f"cycle {cycle}: cut dropped {dropped}")
            floe.start()
            committed = _committed(floe.bootstrap, wl.group, topic, partitions)
            behind = {p: (o, committed.get(p)) for p, o in acked_commits.items() if committed.get(p, -1) < o}
            assert not behind, f"acknowledged offset commits lost in power cut {cycle}: " \
                               f"partition -> (acknowledged, committed now) {behind}"
            before = wl.acked_count()
            wait_until(lambda: wl.acked_count() > before + 100, timeout=60,
                       what=f"acknowledgements after power cut {cycle}")
            assert not wl.fatal_errors, f"producer fatal errors: {wl.fatal_errors}"
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0, f"{wl.unflushed_at_stop} sends without an outcome after 60 s"
    assert not wl.fatal_errors, f"producer fatal errors: {wl.fatal_errors}"
    verdict = check(wl.drain())
    print(f"flush.messages=1: {CYCLES} power cuts ({cut}), fs syncs {fs.command('stats')}\n{verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert verdict.counts["acked"] > 500, verdict.counts
    assert verdict.counts["read"] > 0, "the group consumer read nothing"
    assert verdict.counts["commits"] > 0, "the group consumer committed nothing"


def test_flush_messages_n_loses_fewer_than_n_per_partition(floe_factory, powerloss_fs):
    """flush.messages=N: an append that brings the unflushed count to N is fsynced
    before it is acknowledged, so a power cut loses fewer than N acknowledged
    records of each partition (docs/durability.md's claim for N > 1)."""
    n = 25
    fs = powerloss_fs
    floe = _start_on(floe_factory, fs, {})
    partitions = 3
    topic = create_topic(floe.bootstrap, unique_topic("powerloss-n"), partitions=partitions,
                         config={"flush.messages": str(n)})
    wl = Workload(floe.bootstrap, topic, partitions, producers=2, consumers=0, rate_per_producer=500).start()
    wait_until(lambda: wl.acked_count() >= 1500, timeout=60, what="acknowledgements")
    wl.stop()
    assert wl.unflushed_at_stop == 0 and not wl.fatal_errors, (wl.unflushed_at_stop, wl.fatal_errors)
    floe.kill9()
    dropped = fs.cut()
    floe.start()
    h = wl.drain()
    verdict = check(h)
    lost_per_partition = {p: sum(1 for lp, _, _ in verdict.lost if lp == p) for p in range(partitions)}
    print(f"flush.messages={n}: cut dropped {dropped}; lost per partition {lost_per_partition}\n{verdict.summary()}")
    assert all(lost < n for lost in lost_per_partition.values()), lost_per_partition
    # What was lost is a tail of each partition: above the new log end; the rest is there once, in order.
    assert all(off >= h.drain_bounds[p][1] for p, off, _ in verdict.lost), verdict.summary()
    assert not (verdict.duplicate or verdict.inconsistent or verdict.nonmonotonic or verdict.phantom
                or verdict.gaps), verdict.summary()


def test_flushing_off_loses_acknowledged_records_and_the_checker_sees_it(floe_factory, powerloss_fs):
    """Negative control: with Kafka's default flush settings (no fsync per append)
    a power cut loses acknowledged records, and the checker reports them as lost.
    Each attempt acknowledges a batch of records, then kills and cuts; the test
    fails if no attempt shows a loss, i.e. if the rig or the checker is blind."""
    fs = powerloss_fs
    floe = _start_on(floe_factory, fs, {})
    partitions = 2
    for attempt in range(1, CONTROL_ATTEMPTS + 1):
        # A topic per attempt (the values repeat across workloads); a clean restart
        # flushes, so the topic itself is durable before the records go in.
        topic = create_topic(floe.bootstrap, unique_topic("powerloss-off"), partitions=partitions)
        assert floe.restart() == 0
        wl = Workload(floe.bootstrap, topic, partitions, producers=1, consumers=0, rate_per_producer=500).start()
        wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="acknowledgements")
        wl.stop()
        assert wl.unflushed_at_stop == 0 and not wl.fatal_errors, (wl.unflushed_at_stop, wl.fatal_errors)
        floe.kill9()
        dropped = fs.cut()
        floe.start()
        verdict = check(wl.drain())
        print(f"attempt {attempt}: cut dropped {dropped}\n{verdict.summary()}")
        if verdict.lost:
            break
    assert verdict.lost, f"no acknowledged record lost in {CONTROL_ATTEMPTS} power cuts with flushing off: " \
                         "the rig does not drop unsynced data, or the checker does not see it"
    assert dropped["bytes_dropped"] > 0, dropped


def test_topic_admin_is_durable_when_acknowledged(floe_factory, powerloss_fs):
    """CreateTopics, CreatePartitions, AlterConfigs and DeleteTopics answer only once
    their metadata is durable: a power cut right after the answers keeps each change,
    and the grown topic takes writes on every partition (its directories survived too)."""
    fs = powerloss_fs
    floe = _start_on(floe_factory, fs, {})
    kept = create_topic(floe.bootstrap, unique_topic("pl-kept"), partitions=2, config={"flush.messages": "1"})
    gone = create_topic(floe.bootstrap, unique_topic("pl-gone"))
    a = admin(floe.bootstrap)
    a.create_partitions([NewPartitions(kept, 3)], request_timeout=CLIENT_TIMEOUT_S)[kept].result(CLIENT_TIMEOUT_S)
    res = ConfigResource(ConfigResource.Type.TOPIC, kept,
                         incremental_configs=[ConfigEntry("retention.ms", "123456789",
                                                          incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res], request_timeout=CLIENT_TIMEOUT_S)[res].result(CLIENT_TIMEOUT_S)
    a.delete_topics([gone], request_timeout=CLIENT_TIMEOUT_S)[gone].result(CLIENT_TIMEOUT_S)

    floe.kill9()
    print(f"cut dropped {fs.cut()}")
    floe.start()
    a = admin(floe.bootstrap)
    md = a.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert gone not in md.topics, "a deleted topic came back after the power cut"
    assert kept in md.topics, "a created topic is gone after the power cut"
    assert sorted(md.topics[kept].partitions) == [0, 1, 2], "added partitions lost in the power cut"
    desc = ConfigResource(ConfigResource.Type.TOPIC, kept)
    configs = a.describe_configs([desc], request_timeout=CLIENT_TIMEOUT_S)[desc].result(timeout=CLIENT_TIMEOUT_S)
    assert configs["flush.messages"].value == "1", "topic config lost in the power cut"
    assert configs["retention.ms"].value == "123456789", "altered config lost in the power cut"
    for p in range(3):
        assert produce_all(floe.bootstrap, kept, [{"value": f"after-{p}".encode()}], partition=p) == [0]


def _drain_with_gaps(bootstrap: str, topic: str, partitions: int, h):
    """Workload.drain, but reading up to the high watermark by partition EOF rather than
    by count: torn pages in the middle of a segment are damaged ranges the broker keeps
    and steps over (docs/durability.md, "Recovery after an unclean shutdown"), so offsets can be missing."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-gap-drain", "enable.auto.commit": False,
                  "auto.offset.reset": "error", "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    try:
        for part in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=30)
            h.drain_bounds[part] = (lo, hi)
            if hi <= lo:
                continue
            c.assign([TopicPartition(topic, part, lo)])
            deadline = time.monotonic() + 60
            at_end = False
            while not at_end:
                assert time.monotonic() < deadline, f"drain of partition {part} did not reach {hi} in 60 s"
                for m in c.consume(num_messages=1000, timeout=0.5):
                    if m.error():
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            at_end = m.offset() >= hi
                            continue
                        raise KafkaException(m.error())
                    if m.offset() < hi:
                        h.drain.append((part, m.offset(), m.value()))
            c.unassign()
    finally:
        c.close()
    return h


def test_flushing_off_torn_power_cuts_never_serve_garbage(floe_factory, powerloss_fs):
    """Flushing off and torn cuts (a random part of the unsynced pages and directory
    entries reaches the disk): acknowledged records may be lost, but the broker must
    start after every cut and serve only records some producer sent, each at one
    offset, in offset order. Recovery is what is under test here: torn pages leave
    zeros and stale bytes in the middle of segments and indexes."""
    rng = random.Random(_seed())
    fs = powerloss_fs
    floe = _start_on(floe_factory, fs, {"log.segment.bytes": "65536"})
    partitions = 2
    topic = create_topic(floe.bootstrap, unique_topic("powerloss-torn"), partitions=partitions)
    assert floe.restart() == 0
    merged = None
    cuts = []
    for cycle in range(max(3, CYCLES)):
        wl = Workload(floe.bootstrap, topic, partitions, producers=1, consumers=0, rate_per_producer=800)
        wl.pad = f"-cycle{cycle}-".encode() + b"." * 40  # values unique across cycles
        wl.start()
        wait_until(lambda: wl.acked_count() >= rng.randrange(100, 600), timeout=60, what="acknowledgements")
        wl.stop()
        assert wl.unflushed_at_stop == 0 and not wl.fatal_errors, (wl.unflushed_at_stop, wl.fatal_errors)
        floe.kill9()
        cuts.append(fs.cut(rng.randrange(1, 1 << 62)))
        floe.start()
        h = wl.history
        # One producer name per cycle: offsets are handed out again after a loss.
        rename = f"c{cycle}"
        h.sends = [(rename, p, v) for _, p, v in h.sends]
        h.acks = [(rename, p, o, v) for _, p, o, v in h.acks]
        if merged is None:
            merged = h
        else:
            merged.sends += h.sends
            merged.acks += h.acks
            merged.failures += h.failures
    verdict = check(_drain_with_gaps(floe.bootstrap, topic, partitions, merged))
    print(f"flushing off, torn cuts: {cuts}\n{verdict.summary()}")
    assert not verdict.phantom, f"served records no producer sent: {verdict.phantom[:5]}"
    assert not verdict.duplicate, f"records at two offsets: {verdict.duplicate[:5]}"
    assert not verdict.nonmonotonic, verdict.nonmonotonic[:5]
    assert verdict.lost, "flushing off, yet no power cut lost an acknowledged record"


@pytest.mark.parametrize("cut", ["all-unsynced-lost", "torn"])
def test_flush_messages_1_power_cuts_keep_every_transaction_whole(floe_factory, powerloss_fs, cut):
    """With `log.flush.interval.messages=1` the transaction coordinator's records and the
    markers are fsynced step by step (docs/durability.md): a transactional producer
    writing to two partitions runs while the broker is SIGKILLed and the power cut. At
    the end a read_committed consumer must reach every partition's high watermark (no
    last stable offset left stuck), see every transaction whose commit was acknowledged,
    none whose abort was, and every transaction it sees whole on both partitions."""
    rng = random.Random(_seed())
    fs = powerloss_fs
    floe = _start_on(floe_factory, fs, {"log.flush.interval.messages": "1"})
    topic = create_topic(floe.bootstrap, unique_topic("powerloss-txn"), partitions=2)
    per_partition = 4
    outcome: dict[str, str] = {}  # transaction label -> committed | aborted (acknowledged outcomes only)
    stop = threading.Event()
    errors: list[str] = []

    def run():
        n = 0
        p = None
        while not stop.is_set():
            label = f"t{n}"
            n += 1
            try:
                if p is None:
                    p = Producer({"bootstrap.servers": floe.bootstrap, "transactional.id": "powercut",
                                  "linger.ms": 2, "message.timeout.ms": 10000, "transaction.timeout.ms": 15000})
                    # A new instance: fences the last one and aborts what it left open.
                    p.init_transactions(30)
                p.begin_transaction()
                for part in (0, 1):
                    for i in range(per_partition):
                        p.produce(topic, key=f"{label}-{part}-{i}".encode(), value=label.encode(), partition=part)
                if n % 4 == 0:
                    p.abort_transaction(30)
                    outcome[label] = "aborted"
                else:
                    p.commit_transaction(30)
                    outcome[label] = "committed"
            except KafkaException as e:
                # The outcome of `label` is unknown; start over with a new instance.
                errors.append(f"{label}: {e}")
                p = None
                time.sleep(0.2)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        wait_until(lambda: len(outcome) >= 3, timeout=60, what="first transactions")
        for cycle in range(3):
            time.sleep(rng.uniform(0.2, 1.5))
            floe.kill9()
            dropped = fs.cut(rng.randrange(1, 1 << 62) if cut == "torn" else None)
            print(f"cycle {cycle}: cut dropped {dropped}")
            floe.start()
            before = len(outcome)
            wait_until(lambda: len(outcome) > before + 3, timeout=90, what=f"transactions after power cut {cycle}")
    except TimeoutError as e:
        raise AssertionError(f"{e}; producer errors: {errors[-5:]}") from e
    finally:
        stop.set()
        worker.join(timeout=60)
    assert not worker.is_alive(), "the producer thread did not stop"

    # Every partition's last stable offset must reach its high watermark: nothing hangs.
    c = Consumer({"bootstrap.servers": floe.bootstrap, "group.id": "powercut-reader", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    seen: dict[str, dict[int, int]] = {}
    try:
        hw = {}
        for part in (0, 1):
            hw[part] = high = c.get_watermark_offsets(TopicPartition(topic, part), timeout=30, cached=False)[1]
            wait_until(lambda: committed_watermark(floe.bootstrap, topic, part) >= high, timeout=60,
                       what=f"partition {part}'s last stable offset to reach its high watermark {high}")
        c.assign([TopicPartition(topic, part, 0) for part in (0, 1)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + 60
        while at_eof != {0, 1} and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.2):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= hw[m.partition()]:
                            at_eof.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                label = m.value().decode()
                counts = seen.setdefault(label, {0: 0, 1: 0})
                counts[m.partition()] += 1
        assert at_eof == {0, 1}, f"read_committed did not reach the end of both partitions: {at_eof}"
    finally:
        c.close()
    committed = {t for t, o in outcome.items() if o == "committed"}
    aborted = {t for t, o in outcome.items() if o == "aborted"}
    print(f"{len(committed)} committed, {len(aborted)} aborted acknowledged; {len(seen)} transactions read; "
          f"{len(errors)} unknown outcomes: {errors[:5]}")
    assert len(committed) > 10, outcome
    missing = sorted(committed - set(seen))
    assert not missing, f"acknowledged commits missing after power cuts: {missing}"
    resurrected = sorted(aborted & set(seen))
    assert not resurrected, f"acknowledged aborts visible to read_committed: {resurrected}"
    # A transaction's records appear on both partitions or on neither (duplicates would
    # show as counts above `per_partition`).
    split = {t: c for t, c in seen.items() if c != {0: per_partition, 1: per_partition}}
    assert not split, f"transactions not whole after power cuts: {split}"
