"""Replication between brokers: three brokers, one etcd, replication factor 3.

Followers fetch from leaders with the Kafka Fetch protocol and append the leader's
batches byte for byte (segment boundaries may differ, as in Kafka); the leader moves the high watermark to the lowest log end in
the ISR, answers `acks=all` once the ISR has a batch, shrinks the ISR when a follower
falls behind and grows it back. What is checked, on real processes and real clients:

- every replica's log equals the leader's, byte for byte;
- kill -9 of busy leaders (restarted each time) under idempotent acks=all producers:
  the history checker finds nothing acknowledged lost, duplicated or reordered, and
  the replicas converge again (a returning ex-leader truncates what it alone had);
- a paused follower leaves the ISR (the leader's decision, after
  replica.lag.time.max.ms) and rejoins it once resumed;
- min.insync.replicas: NOT_ENOUGH_REPLICAS when the ISR is too small for acks=all;
- a paused leader, replaced while paused, acknowledges nothing after it resumes;
- a rolling restart (SIGTERM: controlled shutdown) under load loses nothing;
- etcd killed under load and restarted: produce, fetch and group commits go on
  meanwhile, nothing acknowledged is lost;
- a follower whose recovery finds damaged ranges (bit rot followed by valid batches)
  cuts its log where the damage starts and fetches the rest again from the leader,
  ending byte-identical to it (a broker alone steps over such ranges instead).

The partition state is read from etcd itself (its HTTP gateway) as well as through the
brokers. Longer kill loops: FLOE_CLUSTER_KILLS=30.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import time

import kwire
from clients import admin, consume_range, produce_all, unique_topic
from cluster_rig import agreed_view, etcd, node_id, start_cluster  # noqa: F401 (fixture)
from confluent_kafka.admin import NewTopic
from floe_process import wait_until
from history import History, Workload, check, drain_partition

KILLS = int(os.environ.get("FLOE_CLUSTER_KILLS", "3"))
NOT_ENOUGH_REPLICAS = 19
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7


def _create(bootstrap: str, topic: str, partitions: int, rf: int = 3, min_isr: int = 2) -> str:
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf,
                                   config={"min.insync.replicas": str(min_isr)})], request_timeout=15)
    fs[topic].result(timeout=20)
    return topic


def _state(etcd, prefix: str, topic: str, p: int) -> dict:
    return etcd.get_json(f"/{prefix}/partitions/{topic}/{p}")


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers)


def _by_id(brokers, nid: int):
    return next(b for b in brokers if node_id(b) == nid)


def _segments(b, topic: str, p: int) -> list[tuple[str, bytes]]:
    d = b.partition_dir(topic, p)
    return sorted((f.name, f.read_bytes()) for f in d.glob("*.log"))


def _log_bytes(b, topic: str, p: int) -> bytes:
    """The partition's records as stored: its segments' bytes, in offset order. Replicas
    hold the same bytes; where a segment rolls may differ (as in Kafka: a leader appends
    a multi-batch request at once, a follower batch by batch)."""
    return b"".join(data for _name, data in _segments(b, topic, p))


def _wait_converged(etcd, prefix: str, brokers, topic: str, partitions: int, timeout: float = 60):
    """Waits until every partition's ISR is all three replicas and every replica's
    segment files equal the leader's, byte for byte."""
    for p in range(partitions):
        def converged():
            s = _state(etcd, prefix, topic, p)
            if s is None or sorted(s["isr"]) != sorted(node_id(b) for b in brokers):
                return None
            logs = {node_id(b): _log_bytes(b, topic, p) for b in brokers}
            leader_log = logs[s["leader"]]
            return s if leader_log and all(v == leader_log for v in logs.values()) else None
        try:
            wait_until(converged, timeout=timeout, interval=0.3, what=f"{topic}-{p}: full ISR and identical replicas")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{_divergence(etcd, prefix, brokers, topic, p)}") from None


def _divergence(etcd, prefix: str, brokers, topic: str, p: int) -> str:
    """What differs between the replicas of `topic`-`p`: the partition's state, each
    replica's segments (name, size) and the first byte at which its log differs from
    the leader's, for a failure message that can be diagnosed without the data dirs."""
    s = _state(etcd, prefix, topic, p)
    lines = [f"state: {s}"]
    leader = next((b for b in brokers if s and node_id(b) == s["leader"]), None)
    leader_log = _log_bytes(leader, topic, p) if leader else b""
    for b in brokers:
        segs = _segments(b, topic, p)
        log = b"".join(d for _n, d in segs)
        first_diff = next((i for i, (x, y) in enumerate(zip(log, leader_log)) if x != y), min(len(log), len(leader_log)))
        same = "same as the leader" if log == leader_log else f"differs from the leader at byte {first_diff}"
        lines.append(f"broker {node_id(b)}: {len(log)} bytes, {same}; segments {[(n, len(d)) for n, d in segs]}")
    return "\n".join(lines)


def test_followers_hold_the_leaders_log_byte_for_byte(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={"log.segment.bytes": "262144"})
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("replicated"), partitions=3)
    for p in range(3):
        assert sorted(_state(etcd, prefix, topic, p)["isr"]) == [1, 2, 3]
        produce_all(_bootstrap(brokers), topic, [{"key": f"k{i}".encode(), "value": os.urandom(200)} for i in range(3000)],
                    partition=p, **{"batch.size": 16384})
    _wait_converged(etcd, prefix, brokers, topic, 3)
    for p in range(3):
        assert len(_segments(brokers[0], topic, p)) > 1, "several segments replicated"
    # Followers fetched over the replication path, counted by the leaders and followers.
    fetched = sum(b.metric("floe_replica_fetch_bytes_total") for b in brokers)
    assert fetched > 2 * 3 * 3000 * 200, fetched
    # A consumer's fetches count as fetch bytes, not as replication bytes out; the
    # leaders' replication bytes out cover what the followers appended, all by sendfile.
    served_before = sum(b.metric("floe_fetch_bytes_total") for b in brokers)
    replicated_before = sum(b.metric("floe_replication_bytes_out_total") for b in brokers)
    for p in range(3):
        assert len(consume_range(_bootstrap(brokers), topic, 0, 3000, partition=p)) == 3000
    consumed = sum(b.metric("floe_fetch_bytes_total") for b in brokers) - served_before
    assert consumed >= 3 * 3000 * 200, consumed
    replicated = sum(b.metric("floe_replication_bytes_out_total") for b in brokers)
    assert replicated == replicated_before, "a consumer's fetch counted as replication"
    assert replicated >= fetched, (replicated, fetched)
    assert replicated == sum(b.metric("floe_replication_bytes_out_total", path="sendfile-plaintext") for b in brokers)
    assert all(b.metric("floe_under_replicated_partitions") == 0 for b in brokers)


def test_killed_leaders_lose_nothing_acknowledged(floe_factory, etcd):
    rng = random.Random(int(os.environ.get("FLOE_FAULT_SEED", str(random.randrange(1 << 30)))))
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={"log.segment.bytes": "262144"})
    agreed_view(brokers, live=3)
    partitions = 3
    topic = _create(brokers[0].bootstrap, unique_topic("leaderkill"), partitions=partitions)
    wl = Workload(_bootstrap(brokers), topic, partitions, producers=3, consumers=0, rate_per_producer=300).start()
    wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")
    kills = 0
    try:
        for kills in range(1, KILLS + 1):
            p = rng.randrange(partitions)
            victim = _by_id(brokers, _state(etcd, prefix, topic, p)["leader"])
            old_epoch = _state(etcd, prefix, topic, p)["leader_epoch"]
            victim.kill9()
            # Another in-sync replica takes over, at a new epoch, and producers go on.
            wait_until(lambda: (s := _state(etcd, prefix, topic, p))["leader"] not in (-1, node_id(victim))
                       and s["leader_epoch"] > old_epoch, timeout=30, what=f"a new leader of {topic}-{p}")
            before = wl.acked_count()
            wait_until(lambda: wl.acked_count() > before + 100, timeout=60, what=f"acknowledgements after kill {kills}")
            victim.start()
            agreed_view(brokers, live=3)
            _wait_for_full_isr(etcd, prefix, topic, partitions, brokers)
            assert not wl.fatal_errors, wl.fatal_errors
    finally:
        wl.stop()
    assert wl.unflushed_at_stop == 0
    history = wl.drain()
    verdict = check(history)
    print(f"{kills} leader kills\n{verdict.summary()}")
    assert verdict.ok, verdict.summary()
    assert verdict.counts["acked"] > 1000, verdict.counts
    _wait_converged(etcd, prefix, brokers, topic, partitions)


def _wait_for_full_isr(etcd, prefix, topic, partitions, brokers, timeout: float = 60):
    ids = sorted(node_id(b) for b in brokers)
    for p in range(partitions):
        wait_until(lambda p=p: sorted(_state(etcd, prefix, topic, p)["isr"]) == ids, timeout=timeout, interval=0.3,
                   what=f"{topic}-{p} to have a full ISR again")


def test_a_paused_follower_leaves_the_isr_and_rejoins(floe_factory, etcd):
    # The lease outlives the pause: the leader's lag rule, not the controller, acts.
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={"replica.lag.time.max.ms": "2000",
                                                                      "broker.session.timeout.ms": "30000"})
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("lagging"), partitions=1)
    leader = _by_id(brokers, _state(etcd, prefix, topic, 0)["leader"])
    follower = next(b for b in brokers if b is not leader)
    follower.proc.send_signal(signal.SIGSTOP)
    try:
        produce_all(_bootstrap(brokers), topic, [{"value": b"while-paused"}] * 10)  # acks=all: ISR of 2 >= min 2
        shrunk = wait_until(lambda: s if len((s := _state(etcd, prefix, topic, 0))["isr"]) == 2 else None,
                            timeout=20, interval=0.2, what="the ISR to shrink")
        assert node_id(follower) not in shrunk["isr"] and shrunk["leader"] == node_id(leader)
        assert leader.metric("floe_isr_shrinks_total") >= 1
        assert leader.metric("floe_under_replicated_partitions") == 1
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: len(_state(etcd, prefix, topic, 0)["isr"]) == 3, timeout=30, interval=0.2, what="the ISR to grow back")
    assert leader.metric("floe_isr_expands_total") >= 1
    _wait_converged(etcd, prefix, brokers, topic, 1)


def test_acks_all_needs_min_insync_replicas(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("minisr"), partitions=1, rf=2, min_isr=2)
    s = _state(etcd, prefix, topic, 0)
    leader = _by_id(brokers, s["leader"])
    follower = _by_id(brokers, next(r for r in s["isr"] if r != s["leader"]))
    follower.kill9()
    wait_until(lambda: _state(etcd, prefix, topic, 0)["isr"] == [node_id(leader)], timeout=30, what="ISR of the leader alone")
    batch = kwire.record_batch([kwire.Record(key=b"k", value=b"v")])
    with kwire.KafkaConn(leader.host, leader.port) as conn:
        all_acks = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch, acks=-1)))
        assert all_acks[(topic, 0)][0] == NOT_ENOUGH_REPLICAS, all_acks
        one_ack = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch, acks=1)))
        assert one_ack[(topic, 0)][0] == 0, one_ack
    follower.start()
    wait_until(lambda: len(_state(etcd, prefix, topic, 0)["isr"]) == 2, timeout=30, what="ISR of two again")
    produce_all(leader.bootstrap, topic, [{"value": b"after"}])


def test_a_paused_leader_acknowledges_nothing_after_it_is_replaced(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("paused"), partitions=1)
    produce_all(_bootstrap(brokers), topic, [{"value": f"before-{i}".encode()} for i in range(20)])
    s = _state(etcd, prefix, topic, 0)
    old = _by_id(brokers, s["leader"])
    old.proc.send_signal(signal.SIGSTOP)
    try:
        # Its lease expires; the controller elects another in-sync replica.
        wait_until(lambda: _state(etcd, prefix, topic, 0)["leader"] not in (-1, node_id(old)), timeout=30,
                   what="a new leader while the old one is paused")
        others = [b for b in brokers if b is not old]
        produce_all(_bootstrap(others), topic, [{"value": f"new-{i}".encode()} for i in range(20)])
    finally:
        old.proc.send_signal(signal.SIGCONT)
    # At once after resuming, before it has caught up with etcd: a write sent straight to
    # the ex-leader with acks=all must not be acknowledged (its followers have left it).
    batch = kwire.record_batch([kwire.Record(key=None, value=b"zombie-write")])
    with kwire.KafkaConn(old.host, old.port, timeout=30) as conn:
        answer = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch, acks=-1, timeout_ms=3000)))
    assert answer[(topic, 0)][0] in (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS), answer
    agreed_view(brokers, live=3)
    _wait_converged(etcd, prefix, brokers, topic, 1)
    values = [m.value() for m in consume_range(_bootstrap(brokers), topic, 0, 40)]
    assert values == [f"before-{i}".encode() for i in range(20)] + [f"new-{i}".encode() for i in range(20)]
    assert b"zombie-write" not in values


def test_a_rolling_restart_under_load_loses_nothing(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    partitions = 3
    topic = _create(brokers[0].bootstrap, unique_topic("rolling"), partitions=partitions)
    # Group consumers too: the group coordinator moves with __consumer_offsets at each stop.
    wl = Workload(_bootstrap(brokers), topic, partitions, producers=2, consumers=2, rate_per_producer=300).start()
    wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")
    try:
        for b in brokers:
            led_before = [p for p in range(partitions) if _state(etcd, prefix, topic, p)["leader"] == node_id(b)]
            started = time.monotonic()
            assert b.stop() == 0, "a clean stop"
            # Controlled shutdown: its leaderships moved before it stopped.
            for p in led_before:
                assert _state(etcd, prefix, topic, p)["leader"] != node_id(b)
            assert "controlled shutdown: leadership moved" in b.stderr_text() or not led_before
            print(f"broker {node_id(b)} stopped in {time.monotonic() - started:.1f}s, having led {led_before}")
            b.start()
            agreed_view(brokers, live=3)
            _wait_for_full_isr(etcd, prefix, topic, partitions, brokers)
            before = wl.acked_count()
            wait_until(lambda: wl.acked_count() > before + 50, timeout=60, what="acknowledgements after a restart")
    finally:
        wl.stop()
    assert not wl.fatal_errors, wl.fatal_errors
    verdict = check(wl.drain())
    assert verdict.ok, verdict.summary()
    _wait_converged(etcd, prefix, brokers, topic, partitions)


def test_an_etcd_outage_under_load_loses_nothing(floe_factory, etcd):
    """etcd killed under load and restarted: brokers keep serving the partitions whose
    leadership is settled (produce, fetch, group commits), and join again afterwards."""
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    partitions = 3
    topic = _create(brokers[0].bootstrap, unique_topic("etcdloss"), partitions=partitions)
    wl = Workload(_bootstrap(brokers), topic, partitions, producers=2, consumers=2, rate_per_producer=300).start()
    wait_until(lambda: wl.acked_count() >= 300, timeout=60, what="first acknowledgements")
    try:
        etcd.kill9()
        # Longer than the brokers' lease (2 s): their registrations lapse in etcd's eyes.
        before = wl.acked_count()
        time.sleep(6)
        during = wl.acked_count() - before
        print(f"{during} records acknowledged while etcd was down")
        assert during > 300, f"only {during} acknowledged while etcd was down"
        etcd.start()
        agreed_view(brokers, live=3)
        _wait_for_full_isr(etcd, prefix, topic, partitions, brokers)
        before = wl.acked_count()
        wait_until(lambda: wl.acked_count() > before + 300, timeout=60, what="acknowledgements after etcd returned")
    finally:
        wl.stop()
    assert not wl.fatal_errors, wl.fatal_errors
    verdict = check(wl.drain())
    print(verdict.summary())
    assert verdict.ok, verdict.summary()
    _wait_converged(etcd, prefix, brokers, topic, partitions)


def test_negative_control_unclean_election_with_min_isr_1_loses_acknowledged_records(floe_factory, etcd):
    """The same checker, on a configuration that must lose data: min.insync.replicas=1
    lets the leader acknowledge alone once its followers fell out of the ISR, and
    unclean.leader.election.enable=true lets an out-of-sync follower take over after
    the leader dies. The checker must report the acknowledged records that vanished,
    so that its silence in the tests above means something."""
    brokers, prefix = start_cluster(floe_factory, etcd, 3, overrides={
        "unclean.leader.election.enable": "true", "replica.lag.time.max.ms": "1000",
        "broker.session.timeout.ms": "6000"})
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("unclean"), partitions=1, rf=3, min_isr=1)
    history = History()
    plain = {"enable.idempotence": False, "retries": 0}

    def produce(values: list[bytes]):
        offsets = produce_all(_bootstrap(brokers), topic, [{"value": v} for v in values], **plain)
        for v, off in zip(values, offsets):
            history.record_send("p", 0, v)
            history.record_ack("p", 0, off, v)

    produce([f"in-sync-{i}".encode() for i in range(100)])
    leader = _by_id(brokers, _state(etcd, prefix, topic, 0)["leader"])
    followers = [b for b in brokers if b is not leader]
    for f in followers:
        f.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: _state(etcd, prefix, topic, 0)["isr"] == [node_id(leader)], timeout=20, interval=0.1,
                   what="the leader alone in the ISR")
        produce([f"leader-alone-{i}".encode() for i in range(100)])  # acks=all, ISR of 1 >= min 1
        leader.kill9()
    finally:
        for f in followers:
            f.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: _state(etcd, prefix, topic, 0)["leader"] in {node_id(f) for f in followers}, timeout=30,
               what="an unclean election")
    lo, hi, drained = drain_partition(_bootstrap(followers), topic, 0, "read_uncommitted")
    history.drain_bounds[0] = (lo, hi)
    history.drain.extend(drained)
    verdict = check(history)
    print(verdict.summary())
    assert not verdict.ok and len(verdict.lost) == 100, f"the checker must see the loss: {verdict.summary()}"


def _damage_batch(seg, index: int, how: str) -> tuple[int, int]:
    """Damages the `index`-th batch of segment file `seg` in place (a flipped payload bit:
    its CRC fails; or a broken length field: framing lost); returns its (base, last) offsets."""
    data = bytearray(seg.read_bytes())
    pos = 0
    for _ in range(index):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    base, length = struct.unpack_from(">qi", data, pos)
    last = base + struct.unpack_from(">i", data, pos + 23)[0]
    if how == "payload":
        data[pos + 12 + length - 3] ^= 0x40
    else:
        data[pos + 8:pos + 12] = struct.pack(">i", 0x7F000000)
    seg.write_bytes(bytes(data))
    return base, last


def test_a_followers_damaged_ranges_are_fetched_again_from_the_leader(floe_factory, etcd):
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = unique_topic("rot")
    a = admin(brokers[0].bootstrap)
    a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=3,
                              config={"min.insync.replicas": "2", "segment.bytes": "20000"})],
                    request_timeout=15)[topic].result(timeout=20)
    values = [f"v{i:05d}-".encode() + b"y" * 60 for i in range(2000)]
    produce_all(_bootstrap(brokers), topic, [{"value": v} for v in values], **{"batch.num.messages": 20, "linger.ms": 20})
    _wait_converged(etcd, prefix, brokers, topic, 1)

    leader_id = _state(etcd, prefix, topic, 0)["leader"]
    follower = next(b for b in brokers if node_id(b) != leader_id)
    follower.kill9()
    segs = sorted(follower.segment_files(topic), key=lambda f: int(f.stem))
    assert len(segs) >= 4, segs
    damaged = [_damage_batch(segs[1], 3, "payload"), _damage_batch(segs[2], 2, "length")]
    # Recovery scans what lies above the recovery point: make that everything, as after
    # a crash before the checkpoint was written.
    (follower.data_dir / "recovery-point-offset-checkpoint").unlink(missing_ok=True)
    follower.start()

    log = lambda: follower.stderr_text()  # noqa: E731
    wait_until(lambda: "a damaged range in a replica" in log(), timeout=60, what="the follower to find its damage")
    for base, last in damaged[:1]:
        assert f"first_offset={base} last_offset=Some({last})" in log(), "recovery reported the damaged range"
    # Cut at the first damaged range, fetched again: the follower is whole and equal to the leader.
    _wait_converged(etcd, prefix, brokers, topic, 1)
    assert follower.metric("floe_replica_damaged_truncations_total") >= 1
    assert follower.metric("floe_log_corrupt_ranges", topic=topic, partition="0") == 0
    # A reader of the cluster sees every record, in order.
    assert [m.value() for m in consume_range(_bootstrap(brokers), topic, 0, 2000)] == values


def test_pipelined_acks_all_produces_overlap_their_wait_and_are_answered_in_order(floe_factory, etcd):
    """Two-stage produce: while an acks=all Produce waits for its followers, the leader
    reads and appends the connection's next Produce requests (in request order), and
    answers every request in order: the Metadata request sent behind them last."""
    brokers, prefix = start_cluster(floe_factory, etcd, 3)
    agreed_view(brokers, live=3)
    topic = _create(brokers[0].bootstrap, unique_topic("pipelined"), partitions=1)
    s = _state(etcd, prefix, topic, 0)
    leader = _by_id(brokers, s["leader"])
    followers = [b for b in brokers if b is not leader]
    # The leader has the partition and its followers fetch it.
    produce_all(leader.bootstrap, topic, [{"value": b"warm"}])
    with kwire.KafkaConn(leader.host, leader.port, timeout=30) as conn:
        for f in followers:
            f.proc.send_signal(signal.SIGSTOP)
        try:
            sent = []
            for i in range(5):
                frame = conn.request_frame(kwire.API_PRODUCE, 3, kwire.produce_v3(
                    topic, 0, kwire.record_batch([kwire.Record(key=None, value=f"p{i}".encode())]), acks=-1, timeout_ms=20_000))
                conn.send_raw(frame)
                sent.append(conn.correlation)
            conn.send_raw(conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1([topic])))
            sent.append(conn.correlation)
            # Nothing can be acknowledged (no follower fetches), yet all five are in the log.
            wait_until(lambda: len(kwire.decode_batches(_log_bytes(leader, topic, 0))) == 6, timeout=5, interval=0.05,
                       what="the leader appended every pipelined produce while the first waited")
        finally:
            for f in followers:
                f.proc.send_signal(signal.SIGCONT)
        answers = []
        for _ in sent:
            frame = conn.recv_frame()
            answers.append((struct.unpack_from(">i", frame, 0)[0], frame[4:]))
    assert [corr for corr, _ in answers] == sent, "responses in request order"
    for i, (_, body) in enumerate(answers[:5]):
        assert kwire.parse_produce_v3(body)[(topic, 0)] == (0, 1 + i), (i, kwire.parse_produce_v3(body))
    assert consume_range(_bootstrap(brokers), topic, 0, 6)[-1].value() == b"p4"
