"""Concurrent producers and consumers, a tailing reader, and a slow reader of a large
sendfile response that must not stall other connections."""

from __future__ import annotations

import threading
import time

import pytest

import kwire
from clients import (CLIENT_TIMEOUT_S, assert_contiguous, consume_range, consumer, create_topic, produce_all,
                     unique_topic, watermarks)
from confluent_kafka import KafkaError, TopicPartition


def test_concurrent_producers_one_partition(floe):
    topic = create_topic(floe.bootstrap, unique_topic("conc"))
    n_producers, per = 4, 2500
    errors: list = []

    def run(pid):
        try:
            produce_all(floe.bootstrap, topic, [{"key": f"p{pid}".encode(), "value": f"{pid}:{i}".encode()}
                                                for i in range(per)],
                        **{"batch.num.messages": 20 + pid * 13, "linger.ms": 1, "max.in.flight": 1})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(p,)) for p in range(n_producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    total = n_producers * per
    assert watermarks(floe.bootstrap, topic) == (0, total)
    got = consume_range(floe.bootstrap, topic, 0, total)
    assert_contiguous(got)
    by_producer: dict[int, list[int]] = {}
    for m in got:
        pid, i = map(int, m.value().split(b":"))
        assert m.key() == f"p{pid}".encode()
        by_producer.setdefault(pid, []).append(i)
    for pid in range(n_producers):
        assert by_producer[pid] == list(range(per)), f"producer {pid}: records lost, duplicated or reordered"


def test_tailing_consumer_sees_records_as_they_arrive(floe):
    topic = create_topic(floe.bootstrap, unique_topic("tail"))
    total = 3000
    received: list = []
    done = threading.Event()
    failure: list = []

    def tail():
        c = consumer(floe.bootstrap, **{"fetch.wait.max.ms": 500})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            deadline = time.monotonic() + 60
            while len(received) < total and time.monotonic() < deadline:
                for m in c.consume(num_messages=500, timeout=0.2):
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            failure.append(m.error())
                        continue
                    received.append((m.offset(), m.value()))
        except Exception as e:  # noqa: BLE001
            failure.append(e)
        finally:
            c.close()
            done.set()

    th = threading.Thread(target=tail)
    th.start()
    for chunk in range(10):  # produce in bursts while the consumer is polling
        produce_all(floe.bootstrap, topic, [{"value": f"{chunk * 300 + i}".encode()} for i in range(300)],
                    **{"linger.ms": 0})
    assert done.wait(90), "tailing consumer did not finish"
    th.join()
    assert not failure, failure
    assert [o for o, _ in received] == list(range(total))
    assert [v for _, v in received] == [str(i).encode() for i in range(total)]


@pytest.mark.parametrize("zero_copy", ["true", "false"])
def test_slow_reader_of_large_fetch_does_not_stall_others(floe_factory, zero_copy):
    floe = floe_factory(overrides={"fetch.zero.copy": zero_copy})
    topic = create_topic(floe.bootstrap, unique_topic("slow"))
    n, size = 4000, 4000  # ~16 MB
    produce_all(floe.bootstrap, topic, [{"value": bytes([i % 256]) * size} for i in range(n)],
                **{"batch.num.messages": 200, "linger.ms": 20})

    slow = kwire.KafkaConn(floe.host, floe.port, timeout=60)
    try:
        slow.sock.setsockopt(kwire.socket.SOL_SOCKET, kwire.socket.SO_RCVBUF, 16384)
        slow.send_raw(slow.request_frame(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 64 << 20)],
                                                                              max_bytes=64 << 20)))
        time.sleep(0.3)  # let the broker fill the socket buffers and block on the slow reader
        # Meanwhile other connections are served promptly.
        for _ in range(5):
            t0 = time.monotonic()
            with kwire.KafkaConn(floe.host, floe.port) as fast:
                err, _ = kwire.parse_api_versions_v0(fast.call(kwire.API_API_VERSIONS, 0, b""))
                (p,) = kwire.parse_fetch_v4(fast.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, n - 1, 1 << 20)])))
            took = time.monotonic() - t0
            assert err == 0 and p.error_code == 0
            assert took < 3.0, f"a fresh connection waited {took:.2f}s behind a slow reader"
        # Now drain the slow response in small reads.
        (size_field,) = kwire.struct.unpack(">i", slow.recv_exact(4))
        chunks, remaining = [], size_field
        while remaining:
            c = slow.sock.recv(min(remaining, 256 * 1024))
            assert c, "connection closed mid-response"
            chunks.append(c)
            remaining -= len(c)
        resp = b"".join(chunks)
    finally:
        slow.close()
    (p,) = kwire.parse_fetch_v4(resp[4:])
    assert p.error_code == 0 and p.high_watermark == n
    batches = kwire.decode_batches(p.records)
    assert all(b.crc_ok for b in batches), "corrupted batch in a large response"
    recs = [r for b in batches for r in b.records]
    assert [r.offset for r in recs] == list(range(len(recs)))
    assert len(recs) == n, f"got {len(recs)} of {n} records in one 64 MiB fetch"
    assert all(r.value == bytes([r.offset % 256]) * size for r in recs)
    metric = "sendfile-plaintext" if zero_copy == "true" else "copy-plaintext"
    assert floe.metric("floe_fetch_bytes_total", path=metric) >= n * size
