"""Zero-copy fetch: the sendfile path is used on plaintext, can be switched off, and the
copying path answers byte for byte the same."""

from __future__ import annotations

import pytest

import kwire
from clients import consume_range, create_topic, produce_all, unique_topic

SENDFILE = {"path": "sendfile"}
COPY = {"path": "copy"}


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

    before = fetch_bytes(floe, "sendfile"), fetch_bytes(floe, "copy")
    got = consume_range(floe.bootstrap, topic, 0, 1000)
    assert [m.value() for m in got[:3]] == [bytes([i]) * 200 for i in range(3)]
    after = fetch_bytes(floe, "sendfile"), fetch_bytes(floe, "copy")
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
    before = fetch_bytes(floe, "sendfile"), fetch_bytes(floe, "copy")
    got = consume_range(floe.bootstrap, topic, 0, 1000)
    assert [m.value() for m in got] == [bytes([i % 251]) * 200 for i in range(1000)]
    after = fetch_bytes(floe, "sendfile"), fetch_bytes(floe, "copy")
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
            responses[name] = out

    assert fetch_bytes(on, "sendfile") > 0 and fetch_bytes(on, "copy") == 0
    assert fetch_bytes(off, "copy") > 0 and fetch_bytes(off, "sendfile") == 0

    for req_name in responses["on"]:
        a, b = responses["on"][req_name], responses["off"][req_name]
        assert a == b, (f"{req_name}: sendfile and copy responses differ (len {len(a)} vs {len(b)}, "
                        f"first difference at byte {next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))})")

    # And the responses are right, not merely equal.
    parts = {k: kwire.parse_fetch_v4(v[4:]) for k, v in responses["on"].items()}
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
