"""Zero-copy fetch: the sendfile path is used on plaintext, can be switched off, and the
copying path answers byte for byte the same."""

from __future__ import annotations

import pytest

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic

SENDFILE = {"path": "sendfile-plaintext"}
COPY = {"path": "copy-plaintext"}


def fetch_bytes(floe, path: str) -> float:
    return floe.metric("floe_fetch_bytes_total", path=path)


def produce_sample(floe, topic: str, n: int = 1000, size: int = 200) -> int:
    msgs = [{"key": f"k{i}".encode(), "value": bytes([i % 251]) * size} for i in range(n)]
    produce_all(floe.bootstrap, topic, msgs, **{"compression.type": "none", "batch.num.messages": 100})
    return n * size


@pytest.mark.parametrize("switch_off", ["override", "env"])
def test_fetch_path_metrics(floe, switch_off):
    topic = create_topic(floe.bootstrap, unique_topic("zc"))
    payload = produce_sample(floe, topic)

    before = fetch_bytes(floe, "sendfile-plaintext"), fetch_bytes(floe, "copy-plaintext")
    got = consume_range(floe.bootstrap, topic, 0, 1000)
    assert [m.value() for m in got[:3]] == [bytes([i]) * 200 for i in range(3)]
    after = fetch_bytes(floe, "sendfile-plaintext"), fetch_bytes(floe, "copy-plaintext")
    assert after[0] - before[0] >= payload, (
        f"sendfile bytes grew by {after[0] - before[0]} while consuming {payload} payload bytes")
    assert after[1] == before[1], f"copy path served {after[1] - before[1]} bytes with zero copy on"
    assert floe.metric("floe_requests_total", api="Fetch") > 0
    assert floe.metric("floe_requests_total", api="Produce") > 0
    assert floe.metric("floe_request_duration_seconds_count", api="Fetch") > 0

    if switch_off == "override":
        floe.restart(overrides={"fetch.zero.copy": "false"})
    else:
        floe.restart(env={"FLOE_FETCH_ZERO_COPY": "false"})
    before = fetch_bytes(floe, "sendfile-plaintext"), fetch_bytes(floe, "copy-plaintext")
    got = consume_range(floe.bootstrap, topic, 0, 1000)
    assert [m.value() for m in got] == [bytes([i % 251]) * 200 for i in range(1000)]
    after = fetch_bytes(floe, "sendfile-plaintext"), fetch_bytes(floe, "copy-plaintext")
    assert after[1] - before[1] >= payload, (
        f"copy bytes grew by {after[1] - before[1]} while consuming {payload} payload bytes with zero copy off")
    assert after[0] == before[0], f"sendfile path served {after[0] - before[0]} bytes with zero copy off"


def fetch_requests(topic: str, hw: int):
    """Fetch v4 bodies exercising: everything, a byte limit that cuts mid-log, an offset
    inside a batch, a tiny partition limit (KIP-74: first batch whole), an empty tail,
    an out-of-range offset, and several partitions in one request."""
    return {
        "all": kwire.fetch_v4([(topic, 0, 0, 50 << 20)]),
        "limited": kwire.fetch_v4([(topic, 0, 0, 10_000)]),
        "mid-batch": kwire.fetch_v4([(topic, 0, 137, 30_000)]),
        "tiny-limit": kwire.fetch_v4([(topic, 0, 500, 1)]),
        "at-end": kwire.fetch_v4([(topic, 0, hw, 1 << 20)]),
        "out-of-range": kwire.fetch_v4([(topic, 0, hw + 1000, 1 << 20)]),
        "multi-partition": kwire.fetch_v4([(topic, 0, 10, 20_000), (topic, 1, 0, 20_000)],
                                          max_bytes=40_000),
        "request-max-bytes": kwire.fetch_v4([(topic, 0, 0, 1 << 20), (topic, 1, 0, 1 << 20)],
                                            max_bytes=25_000),
    }


def fetch_requests_v12(topic: str, hw: int):
    return {
        "v12-all": kwire.fetch_v12([(topic, 0, 0, 50 << 20)]),
        "v12-limited": kwire.fetch_v12([(topic, 0, 0, 10_000)]),
        "v12-mid-batch": kwire.fetch_v12([(topic, 0, 137, 30_000)]),
        "v12-multi-partition": kwire.fetch_v12([(topic, 0, 10, 20_000), (topic, 1, 0, 20_000)],
                                               max_bytes=40_000),
        "v12-at-end": kwire.fetch_v12([(topic, 0, hw, 1 << 20)]),
    }


def test_sendfile_and_copy_responses_are_byte_identical(floe_factory, tmp_path):
    src = floe_factory("source")
    topic = create_topic(src.bootstrap, unique_topic("ident"), partitions=2)
    produce_sample(src, topic, n=1000, size=150)
    produce_all(src.bootstrap, topic, [{"key": f"p1-{i}".encode(), "value": b"q" * (i % 300)}
                                      for i in range(300)], partition=1, **{"compression.type": "gzip"})
    assert src.stop() == 0

    on = floe_factory("zc-on", data_dir=src.copy_data_dir(tmp_path / "copy-on"), start=False)
    off = floe_factory("zc-off", data_dir=src.copy_data_dir(tmp_path / "copy-off"), start=False,
                       overrides={"fetch.zero.copy": "false"})
    on.start()
    off.start()

    responses = {}
    for name, broker in (("on", on), ("off", off)):
        with kwire.KafkaConn(broker.host, broker.port) as conn:
            err, apis = kwire.parse_api_versions_v0(conn.call(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()))
            assert err == 0
            lo, hi = apis[kwire.API_FETCH]
            assert lo <= 4 <= hi, f"Fetch v4 not in the advertised range {lo}..{hi}"
            out = {}
            for req_name, body in fetch_requests(topic, 1000).items():
                out[req_name] = conn.call_raw(kwire.API_FETCH, 4, body)
            if hi >= 12:  # the flexible encoding (varint record lengths, tagged fields) too
                for req_name, body in fetch_requests_v12(topic, 1000).items():
                    out[req_name] = conn.call_raw(kwire.API_FETCH, 12, body, flexible_header=True)
            responses[name] = out

    assert fetch_bytes(on, "sendfile-plaintext") > 0 and fetch_bytes(on, "copy-plaintext") == 0
    assert fetch_bytes(off, "copy-plaintext") > 0 and fetch_bytes(off, "sendfile-plaintext") == 0

    for req_name in responses["on"]:
        a, b = responses["on"][req_name], responses["off"][req_name]
        assert a == b, (f"{req_name}: sendfile and copy responses differ (len {len(a)} vs {len(b)}, "
                        f"first difference at byte {next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))})")

    # And the responses are right, not merely equal.
    parts = {k: kwire.parse_fetch_v4(v[4:]) for k, v in responses["on"].items() if not k.startswith("v12")}
    if "v12-all" in responses["on"]:
        assert parts["all"][0].records in responses["on"]["v12-all"], "v12 response lacks the log's batches"
    (p,) = parts["all"]
    assert (p.error_code, p.high_watermark) == (0, 1000)
    batches = kwire.decode_batches(p.records)
    assert all(b.crc_ok for b in batches)
    recs = [r for b in batches for r in b.records]
    assert [r.offset for r in recs] == list(range(1000))
    assert recs[999].value == bytes([999 % 251]) * 150 and recs[999].key == b"k999"

    (p,) = parts["limited"]
    assert p.error_code == 0 and 0 < len(p.records) <= 10_000 + 100 * 200
    assert kwire.decode_batches(p.records)[0].base_offset == 0

    (p,) = parts["mid-batch"]
    first = kwire.decode_batches(p.records)[0]
    assert first.base_offset <= 137 <= first.base_offset + first.last_offset_delta

    (p,) = parts["tiny-limit"]
    batches = kwire.decode_batches(p.records)
    assert len(batches) >= 1, "KIP-74: the first batch must be returned whole even above the limit"
    assert batches[0].base_offset <= 500 <= batches[0].base_offset + batches[0].last_offset_delta

    (p,) = parts["at-end"]
    assert p.error_code == 0 and not p.records

    (p,) = parts["out-of-range"]
    assert p.error_code == 1, f"fetch past the end: error {p.error_code}, want OFFSET_OUT_OF_RANGE (1)"

    got = parts["multi-partition"]
    assert [(x.partition, x.error_code) for x in got] == [(0, 0), (1, 0)]
    p1 = next(x for x in got if x.partition == 1)
    assert p1.high_watermark == 300
    b1 = kwire.decode_batches(p1.records)
    assert b1[0].base_offset == 0 and b1[0].attributes & 0x7 == 1, "partition 1 should hold gzip batches"
    assert all(b.crc_ok for b in b1)


def test_many_partitions_in_one_fetch(floe_factory, tmp_path):
    """50 partitions, small batches: many file regions in one response, on both paths."""
    src = floe_factory("many-src")
    topic = create_topic(src.bootstrap, unique_topic("many"), partitions=50)
    for p in range(50):
        produce_all(src.bootstrap, topic, [{"key": f"{p}".encode(), "value": f"{p}:{i}".encode() * (1 + p % 4)}
                                          for i in range(20)], partition=p, **{"batch.num.messages": 7})
    got = {}
    from confluent_kafka import KafkaError, TopicPartition
    from clients import consumer
    c = consumer(src.bootstrap)
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(50)])
        import time
        deadline = time.monotonic() + 60
        while sum(len(v) for v in got.values()) < 1000 and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    continue
                got.setdefault(m.partition(), []).append((m.offset(), m.value()))
    finally:
        c.close()
    for p in range(50):
        assert got.get(p) == [(i, f"{p}:{i}".encode() * (1 + p % 4)) for i in range(20)], f"partition {p}"
    assert src.stop() == 0

    on = floe_factory("many-on", data_dir=src.copy_data_dir(tmp_path / "m-on"))
    off = floe_factory("many-off", data_dir=src.copy_data_dir(tmp_path / "m-off"),
                       overrides={"fetch.zero.copy": "false"})
    parts = [(topic, p, (p * 3) % 20, 1 << 20) for p in range(50)]
    bodies = {"v4": (4, kwire.fetch_v4(parts), False), "v4-capped": (4, kwire.fetch_v4(parts, max_bytes=3000), False),
              "v12": (12, kwire.fetch_v12(parts), True)}
    resp = {}
    for name, broker in (("on", on), ("off", off)):
        with kwire.KafkaConn(broker.host, broker.port) as conn:
            resp[name] = {k: conn.call_raw(kwire.API_FETCH, v, body, flexible_header=flex)
                          for k, (v, body, flex) in bodies.items()}
    for k in bodies:
        assert resp["on"][k] == resp["off"][k], f"{k}: sendfile and copy responses differ"
    decoded = kwire.parse_fetch_v4(resp["on"]["v4"][4:])
    assert len(decoded) == 50
    for fp in decoded:
        recs = [r for b in kwire.decode_batches(fp.records) for r in b.records if r.offset >= (fp.partition * 3) % 20]
        assert [r.offset for r in recs] == list(range((fp.partition * 3) % 20, 20)), f"partition {fp.partition}"
