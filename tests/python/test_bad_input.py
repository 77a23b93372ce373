"""Bad input on the wire: oversized frames, unknown APIs, corrupt batches, version probing.
Each case checks the broker's reaction and that it still serves afterwards."""

from __future__ import annotations

import pathlib
import struct

import kwire
from clients import consume_range, create_topic, unique_topic, watermarks

MAX_REQUEST = 64 * 1024


def assert_still_serving(floe):
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))
        assert err == 0 and kwire.API_PRODUCE in apis and kwire.API_FETCH in apis, apis


def test_frame_larger_than_socket_request_max_bytes_closes(floe_factory):
    floe = floe_factory(overrides={"socket.request.max.bytes": str(MAX_REQUEST)})
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # A real ApiVersions request padded beyond the limit (trailing bytes in the frame).
        frame = conn.request_frame(kwire.API_API_VERSIONS, 0, b"\x00" * (MAX_REQUEST + 10))
        try:
            conn.send_raw(frame)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: also fine
        assert conn.closed_by_peer(), "connection left open after a frame above socket.request.max.bytes"

    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # Only the size prefix, claiming ~2 GiB: must be refused without waiting for the body.
        conn.send_raw(struct.pack(">i", 0x7FFFFFF0))
        assert conn.closed_by_peer(), "connection left open after a 2 GiB size prefix"

    with kwire.KafkaConn(floe.host, floe.port) as conn:
        conn.send_raw(struct.pack(">i", -5))  # negative size
        assert conn.closed_by_peer(), "connection left open after a negative frame size"

    # A frame just under the limit is still served (a Produce of one large record).
    topic = create_topic(floe.bootstrap, unique_topic("big"))
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        value = b"z" * (MAX_REQUEST - 400)
        body = kwire.produce_v3(topic, 0, kwire.record_batch([kwire.Record(None, value)]))
        assert len(conn.request_frame(kwire.API_PRODUCE, 3, body)) - 4 < MAX_REQUEST
        res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, body))
        assert res[(topic, 0)] == (0, 0), res
    assert_still_serving(floe)


def test_unknown_api_key_closes(floe):
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        conn.send_raw(conn.request_frame(12345, 0, b"\x00\x01\x02"))
        assert conn.closed_by_peer(), "connection left open after an unknown API key"
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        conn.send_raw(conn.request_frame(-7, 0, b""))
        assert conn.closed_by_peer(), "connection left open after a negative API key"
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        conn.send_raw(struct.pack(">i", 3) + b"\x00\x12\x00")  # frame shorter than a header
        assert conn.closed_by_peer(), "connection left open after a truncated request header"
    assert_still_serving(floe)


FUZZ_REGRESSION = (pathlib.Path(__file__).resolve().parents[2]
                   / "fuzz" / "corpus" / "request_decode" / "regression-produce-array-count-oom")


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def test_array_count_beyond_the_frame_is_refused(floe):
    """A few bytes that declare billions of array elements (or a string longer than the frame)
    must get a clean close, not an allocation the size of the claim (which aborts a process)."""
    hostile = {
        # The fuzzer's find, verbatim: 264 bytes, a Produce whose array count claims billions.
        "fuzz regression": FUZZ_REGRESSION.read_bytes(),
    }
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        # Produce v3: null transactional id, acks, timeout, then a topic array count of 2^31-1.
        hostile["produce v3 topics"] = conn.request_frame(
            kwire.API_PRODUCE, 3, struct.pack(">hhii", -1, 1, 1000, 0x7FFFFFFF))
        # Metadata v1 naming 2^31-16 topics with four bytes of body left.
        hostile["metadata v1 topics"] = conn.request_frame(
            kwire.API_METADATA, 1, struct.pack(">i", 0x7FFFFFF0) + b"\x00\x01ab")
        # Produce v9 (flexible): compact topic array of 2^32-2 entries.
        hostile["produce v9 compact topics"] = conn.request_frame(
            kwire.API_PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 1000) + uvarint(0xFFFFFFFF),
            flexible_header=True)
        # Metadata v10 (flexible): one topic (id, then a compact name) claims 2^31 bytes.
        hostile["metadata v10 name length"] = conn.request_frame(
            kwire.API_METADATA, 10, uvarint(2) + b"\x00" * 16 + uvarint(1 << 31) + b"x",
            flexible_header=True)
    for name, frames in hostile.items():
        with kwire.KafkaConn(floe.host, floe.port) as conn:
            conn.send_raw(frames)
            assert conn.closed_by_peer(), f"{name}: connection left open after an impossible length"
        assert floe.proc.poll() is None, f"{name}: the broker exited (code {floe.proc.poll()})"
        assert_still_serving(floe)


def test_api_versions_unsupported_version_kip511(floe):
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))
        assert err == 0
        lo, hi = apis[kwire.API_API_VERSIONS]
        assert hi >= 3, f"ApiVersions max version {hi}: clients expect v3"
        # The highest supported version, flexible: header v2, compact body; the answer is in v3+ form.
        err3, apis3, _rest = kwire.parse_api_versions_v3(
            conn.call(kwire.API_API_VERSIONS, hi, kwire.api_versions_v3(), flexible_header=True))
        assert err3 == 0 and apis3 == apis, f"v{hi} and v0 disagree: {apis3} vs {apis}"
        # A version above the range, as kafka-python/kafkajs send when newer than the broker:
        # a v0-format reply, UNSUPPORTED_VERSION, and the supported ranges.
        resp = conn.call(kwire.API_API_VERSIONS, hi + 1, kwire.api_versions_v3(), flexible_header=True)
        err2, apis2 = kwire.parse_api_versions_v0(resp)
        assert err2 == kwire.ERR_UNSUPPORTED_VERSION, f"error {err2}, want 35"
        assert apis2.get(kwire.API_API_VERSIONS) == (lo, hi), apis2
        # The connection is still usable.
        err4, _ = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))
        assert err4 == 0


def test_corrupt_crc_produce_is_rejected(floe):
    topic = create_topic(floe.bootstrap, unique_topic("crc"))
    good = [kwire.Record(b"k1", b"v1", [("h", b"x")]), kwire.Record(None, b"v2")]
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, b""))
        lo, hi = apis[kwire.API_PRODUCE]
        assert lo <= 3 <= hi, f"Produce v3 not in advertised range {lo}..{hi}"

        bad = kwire.record_batch([kwire.Record(b"evil", b"corrupt")], corrupt_crc=True)
        res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, bad)))
        assert res[(topic, 0)][0] == kwire.ERR_CORRUPT_MESSAGE, f"produce with bad CRC: {res}"

        # A batch whose declared length does not match the bytes (truncated inside the records).
        batch = kwire.record_batch(good)
        truncated = batch[:-3]
        res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, truncated)))
        assert res[(topic, 0)][0] != 0, f"produce with a truncated batch was accepted: {res}"

        assert watermarks(floe.bootstrap, topic) == (0, 0), "a rejected batch was appended"

        res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3,
                                               kwire.produce_v3(topic, 0, kwire.record_batch(good))))
        assert res[(topic, 0)] == (0, 0), f"valid produce after the bad ones: {res}"

        parts = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
        assert parts[0].error_code == 0 and parts[0].high_watermark == 2
        batches = kwire.decode_batches(parts[0].records)
        assert len(batches) == 1 and batches[0].crc_ok and batches[0].base_offset == 0
        assert [(r.offset, r.key, r.value, r.headers) for r in batches[0].records] == \
            [(0, b"k1", b"v1", [("h", b"x")]), (1, None, b"v2", [])]

    msgs = consume_range(floe.bootstrap, topic, 0, 2)
    assert [(m.key(), m.value()) for m in msgs] == [(b"k1", b"v1"), (None, b"v2")]
    assert_still_serving(floe)


def test_raw_produce_list_offsets_fetch(floe):
    """The raw path end to end: several produces, ListOffsets earliest/latest/by time, Fetch."""
    topic = create_topic(floe.bootstrap, unique_topic("raw"))
    base_ts = 1_720_000_000_000
    with kwire.KafkaConn(floe.host, floe.port) as conn:
        for n in range(5):
            recs = [kwire.Record(f"k{n}-{i}".encode(), f"v{n}-{i}".encode(), timestamp_delta=i)
                    for i in range(10)]
            batch = kwire.record_batch(recs, base_timestamp=base_ts + n * 100)
            res = kwire.parse_produce_v3(conn.call(kwire.API_PRODUCE, 3, kwire.produce_v3(topic, 0, batch)))
            assert res[(topic, 0)] == (0, n * 10), res

        def list_offsets(ts):
            r = kwire.parse_list_offsets_v1(conn.call(kwire.API_LIST_OFFSETS, 1,
                                                      kwire.list_offsets_v1(topic, 0, ts)))
            err, _ts, off = r[(topic, 0)]
            assert err == 0, r
            return off

        assert list_offsets(-2) == 0       # earliest
        assert list_offsets(-1) == 50      # latest
        assert list_offsets(base_ts + 205) == 25
        assert list_offsets(base_ts + 10_000) == -1

        parts = kwire.parse_fetch_v4(conn.call(kwire.API_FETCH, 4, kwire.fetch_v4([(topic, 0, 0, 1 << 20)])))
        batches = kwire.decode_batches(parts[0].records)
        assert [b.base_offset for b in batches] == [0, 10, 20, 30, 40]
        assert all(b.crc_ok for b in batches)
        assert [r.value for b in batches for r in b.records] == \
            [f"v{n}-{i}".encode() for n in range(5) for i in range(10)]
