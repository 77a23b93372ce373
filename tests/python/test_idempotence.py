"""The idempotent producer: exactly once per partition across broker crashes.

A confluent-kafka producer with `enable.idempotence=true` keeps producing while
the broker is SIGKILLed and restarted, twice. Batches in flight at a kill are
retried by the client with the same producer id, epoch and sequence numbers;
those the broker had already written must be recognised (from the producer
state rebuilt from `.snapshot` files and the log) and acknowledged without
being written again. Small segments make rolls, and so snapshots, happen
during the run.
"""

from __future__ import annotations

import struct
import time

from confluent_kafka import Producer

import kwire
from clients import assert_contiguous, consume_all, create_topic, unique_topic

PARTITIONS = 4
N = 30_000


def test_idempotent_producer_writes_each_record_once_across_two_kill9(floe_factory):
    # Debug logs name each duplicate the broker recognised.
    floe = floe_factory("floe", env={"RUST_LOG": "info,floe_storage::log=debug"})
    # flush.messages=1: an fsync after every append widens the window in which
    # a batch is in the log but its acknowledgement not yet sent.
    topic = create_topic(floe.bootstrap, unique_topic("idem"), partitions=PARTITIONS,
                         config={"segment.bytes": "65536", "flush.messages": "1"})
    p = Producer({
        "bootstrap.servers": floe.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 100,
        "message.timeout.ms": 45000,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 200,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 200,
    })
    acked: dict[int, int] = {}       # record index -> partition
    errors: list = []
    offsets: dict[int, int] = {}     # record index -> acknowledged offset

    def on_delivery(err, msg):
        i = int(msg.value().split(b"-")[1])
        if err is not None:
            errors.append((i, err))
            return
        assert i not in acked, f"record {i} acknowledged twice"
        acked[i] = msg.partition()
        offsets[i] = msg.offset()

    kills = []                       # (records produced, records acknowledged) at each kill
    kill_points = [N // 3, 2 * N // 3]
    t0 = time.monotonic()
    for i in range(N):
        value = f"v-{i:07d}-".encode() + b"x" * 40
        while True:
            try:
                p.produce(topic, key=f"k{i}".encode(), value=value, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if i % 200 == 199:
            p.poll(0.005)  # pace the stream so that the kills land mid-stream
        if kill_points and i + 1 == kill_points[0]:
            kill_points.pop(0)
            # Kill mid-stream, with produce requests in flight.
            deadline = time.monotonic() + 20
            while len(acked) < i + 1 - 3000 and time.monotonic() < deadline:
                p.poll(0.001)
            kills.append((i + 1, len(acked)))
            floe.kill9()
            p.poll(0.2)  # the client notices, keeps its queue
            floe.start()
    remaining = p.flush(60)
    elapsed = time.monotonic() - t0
    assert remaining == 0, f"{remaining} records undelivered"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    assert len(kills) == 2, f"the broker was killed {len(kills)} times, not twice (acked {len(acked)})"
    assert all(produced > acknowledged for produced, acknowledged in kills), \
        f"no records were in flight at a kill: {kills}"
    assert len(acked) == N

    seen: dict[int, int] = {}
    for partition in range(PARTITIONS):
        msgs = consume_all(floe.bootstrap, topic, partition)
        assert_contiguous(msgs)
        indexes = [int(m.value().split(b"-")[1]) for m in msgs]
        dupes = len(indexes) - len(set(indexes))
        assert dupes == 0, f"partition {partition}: {dupes} records stored more than once"
        assert indexes == sorted(indexes), f"partition {partition}: records out of produce order"
        for m, i in zip(msgs, indexes):
            assert acked[i] == partition, f"record {i} acknowledged on {acked[i]}, stored on {partition}"
            assert offsets[i] == m.offset(), f"record {i} acknowledged at {offsets[i]}, stored at {m.offset()}"
            seen[i] = partition
    assert len(seen) == N, f"{N - len(seen)} acknowledged records missing"
    assert len(list(floe.partition_dir(topic, 0).glob("*.snapshot"))) >= 1, "no producer snapshot was written"
    duplicates = floe.stderr_text(limit=10**9).count("duplicate batch not appended")
    # Proof that the kills hit batches that were written but not acknowledged.
    assert duplicates >= 1, "no retried batch was a duplicate: the kills did not exercise deduplication"
    print(f"{N} records, kills at (produced, acked) {kills}, {duplicates} duplicate batches, {elapsed:.1f}s")


def _idempotent_batch(producer_id: int, epoch: int, base_sequence: int, values: list[bytes]) -> bytes:
    """An uncompressed v2 batch carrying a producer id, epoch and base sequence."""
    recs = b"".join(kwire.encode_record(i, kwire.Record(key=None, value=v)) for i, v in enumerate(values))
    ts = 1_700_000_000_000
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, ts, ts, producer_id, epoch, base_sequence,
                            len(values)) + recs
    after_len = struct.pack(">ibI", -1, 2, kwire.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_len)) + after_len


def test_hand_built_duplicate_batch_over_the_wire_is_stored_once(floe):
    """The same batch (same producer id, epoch and sequence) sent twice on a socket:
    both acknowledgements carry the same base offset and the log holds it once."""
    topic = create_topic(floe.bootstrap, unique_topic("dup"), partitions=1)
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # InitProducerId v0: null transactional id, timeout 60 s.
        body = conn.call(22, 0, kwire.string(None) + struct.pack(">i", 60_000))
        _throttle, err, producer_id, epoch = struct.unpack(">ihqh", body)
        assert err == 0 and producer_id >= 0, (err, producer_id)
        first = _idempotent_batch(producer_id, epoch, 0, [b"a", b"b", b"c"])
        acks = [kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, first)))[(topic, 0)]
                for _ in range(2)]
        assert acks[0] == (0, 0) and acks[1] == (0, 0), acks
        second = _idempotent_batch(producer_id, epoch, 3, [b"d"])
        assert kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, second)))[(topic, 0)] == (0, 3)
        # A sequence gap is refused: OUT_OF_ORDER_SEQUENCE_NUMBER (45).
        gap = _idempotent_batch(producer_id, epoch, 10, [b"x"])
        assert kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, gap)))[(topic, 0)][0] == 45
    values = [m.value() for m in consume_all(floe.bootstrap, topic, 0)]
    assert values == [b"a", b"b", b"c", b"d"]
