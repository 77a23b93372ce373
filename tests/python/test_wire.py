"""Connection-level behaviour on raw sockets: pipelining order, Fetch long-polling."""

from __future__ import annotations

import struct
import threading
import time

import kwire
from clients import create_topic, unique_topic


def test_pipelined_requests_are_answered_in_order(floe):
    topic = create_topic(floe.bootstrap, unique_topic("pipe"))
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        frames, expected = [], []
        for i in range(30):
            kind = i % 3
            if kind == 0:
                frames.append(conn.request_frame(kwire.API_API_VERSIONS, 0, b""))
            elif kind == 1:
                batch = kwire.record_batch([kwire.Record(None, f"pipelined-{i}".encode())])
                frames.append(conn.request_frame(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch)))
            else:
                frames.append(conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1([topic])))
            expected.append((conn.correlation, kind))
        conn.send_raw(b"".join(frames))  # all at once, before reading anything
        produced = 0
        for corr, kind in expected:
            resp = conn.recv_frame()
            (got_corr,) = struct.unpack_from(">i", resp, 0)
            assert got_corr == corr, f"response out of order: correlation {got_corr}, expected {corr}"
            body = resp[4:]
            if kind == 0:
                assert kwire.parse_api_versions_v0(body)[0] == 0
            elif kind == 1:
                assert kwire.parse_produce_v3(body)[(topic, 0)] == (0, produced), body
                produced += 1
            else:
                _brokers, topics = kwire.parse_metadata_v1(body)
                assert topics[topic][0] == 0


def test_fetch_long_poll_waits_then_wakes_on_produce(floe):
    topic = create_topic(floe.bootstrap, unique_topic("poll"))
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # Nothing to read: the broker holds the request for about max_wait_ms.
        t0 = time.monotonic()
        (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4(
            [(topic, 0, 0, 1 << 20)], max_wait_ms=700, min_bytes=1)))
        waited = time.monotonic() - t0
        assert p.error_code == 0 and not p.records
        assert 0.5 <= waited <= 5, f"empty long-poll returned after {waited:.2f}s with max_wait_ms=700"

        # A produce on another connection wakes a waiting fetch well before max_wait_ms.
        def produce_later():
            time.sleep(0.3)
            with kwire.KafkaConn(floe.host, floe.port) as other:
                batch = kwire.record_batch([kwire.Record(b"k", b"wake up")])
                other.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch))

        th = threading.Thread(target=produce_later)
        t0 = time.monotonic()
        th.start()
        (p,) = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4(
            [(topic, 0, 0, 1 << 20)], max_wait_ms=10_000, min_bytes=1)))
        waited = time.monotonic() - t0
        th.join()
        assert p.error_code == 0 and p.high_watermark == 1
        recs = [r for b in kwire.decode_batches(p.records) for r in b.records]
        assert [(r.offset, r.value) for r in recs] == [(0, b"wake up")]
        assert waited < 5, f"fetch was not woken by the produce (returned after {waited:.2f}s)"
