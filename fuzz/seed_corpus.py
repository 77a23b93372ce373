"""Writes the committed seed corpus of the fuzz targets: real requests and
record batches encoded by tests/python/kwire.py (the raw wire encoder the
end-to-end tests use). Re-run after changing kwire:

    python3 fuzz/seed_corpus.py
"""

from __future__ import annotations

import hashlib
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))

import kwire  # noqa: E402


def batches() -> dict[str, bytes]:
    one = kwire.record_batch([kwire.Record(b"k", b"v")])
    many = kwire.record_batch([kwire.Record(None, b"x" * i, headers=[("h", b"1"), ("n", None)], timestamp_delta=i)
                               for i in range(1, 6)], base_offset=42)
    return {
        "one-record": one,
        "five-records-headers": many,
        "two-batches": one + many,
        "null-value": kwire.record_batch([kwire.Record(b"key", None)]),
        "corrupt-crc": kwire.record_batch([kwire.Record(None, b"v")], corrupt_crc=True),
        "truncated": many[:-3],
    }


def requests() -> dict[str, bytes]:
    conn = kwire.KafkaConn.__new__(kwire.KafkaConn)  # framing only: no socket
    conn.client_id = "fuzz-seed"
    conn.correlation = 0
    batch = batches()["five-records-headers"]
    frames = {
        "api-versions-v0": conn.request_frame(kwire.API_API_VERSIONS, 0, kwire.api_versions_v0()),
        "api-versions-v3": conn.request_frame(kwire.API_API_VERSIONS, 3, kwire.api_versions_v3(), flexible_header=True),
        "metadata-v1": conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1(["topic-a", "b"])),
        "metadata-v1-all": conn.request_frame(kwire.API_METADATA, 1, kwire.metadata_v1(None)),
        "produce-v3": conn.request_frame(kwire.API_PRODUCE, 3, kwire.produce_v3("topic-a", 0, batch)),
        "fetch-v4": conn.request_frame(kwire.API_FETCH, 4, kwire.fetch_v4([("topic-a", 0, 0, 1 << 20), ("b", 1, 5, 100)])),
        "fetch-v12": conn.request_frame(kwire.API_FETCH, 12, kwire.fetch_v12([("topic-a", 0, 7, 1 << 20)]), flexible_header=True),
        "list-offsets-v1": conn.request_frame(kwire.API_LIST_OFFSETS, 1, kwire.list_offsets_v1("topic-a", 0, -1)),
    }
    # A pipelined stream (several frames back to back) and a frame cut short.
    frames["pipelined"] = frames["api-versions-v0"] + frames["metadata-v1"] + frames["produce-v3"]
    frames["cut-frame"] = frames["fetch-v4"][:-5]
    frames["huge-size-prefix"] = struct.pack(">i", 0x7FFFFFF0) + b"\x00\x03"
    return frames


def write(target: str, seeds: dict[str, bytes]) -> None:
    out = HERE / "corpus" / target
    out.mkdir(parents=True, exist_ok=True)
    for name, data in seeds.items():
        digest = hashlib.sha1(data).hexdigest()[:12]
        (out / f"seed-{name}-{digest}").write_bytes(data)


if __name__ == "__main__":
    write("record_batch", batches())
    write("request_decode", requests())
    print("wrote", sorted(p.name for p in (HERE / "corpus").rglob("seed-*")))
