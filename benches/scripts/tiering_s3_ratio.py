"""Tiering throughput with the warehouse on a local S3 API (moto_server) vs a
local directory: one figure each and their ratio.

Per arm, on a fresh broker: a backlog (`--mb`, default 64 MiB; 1 KiB values,
half random so zstd has work) is produced into a 2-partition topic with
tiering off and segments large enough to hold it; then AlterConfigs turns
`floe.iceberg.enabled=true` (`target-lag-ms=0`) and the script polls
`floe_iceberg_committed_offset` until both partitions are committed to their
log end. The figure is log MiB / seconds from the AlterConfigs to the last
commit. What it leaves out: the S3 server is moto on this machine (Python,
no network), so the ratio shows what the object-store path (OpenDAL, HTTP,
signing, moto's own cost) adds on loopback, not what a real S3 would do.

Run: FLOE_BIN=target/release/floe .venv/bin/python benches/scripts/tiering_s3_ratio.py [--mb 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType  # noqa: E402

from clients import admin, create_topic, watermarks  # noqa: E402
from floe_process import FloeProcess  # noqa: E402
from s3_server import MotoS3  # noqa: E402

PARTITIONS = 2


def produce_backlog(bootstrap: str, topic: str, mib: int) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "compression.type": "none", "acks": "all"})
    value = bytes(512) + os.urandom(512)
    n = mib * 1024
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=str(i).encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    return n


def arm(label: str, root: Path, mib: int, overrides: dict) -> float:
    floe = FloeProcess(root / f"{label}-data", root / f"{label}.log",
                       overrides={"floe.iceberg.tick-ms": "100", **overrides})
    floe.iceberg_rest_port = None
    floe.start()
    try:
        topic = create_topic(floe.bootstrap, f"bench-{label}", partitions=PARTITIONS,
                             config={"segment.bytes": str(1 << 30)})
        produce_backlog(floe.bootstrap, topic, mib)
        ends = [watermarks(floe.bootstrap, topic, p)[1] for p in range(PARTITIONS)]
        a = admin(floe.bootstrap)
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("floe.iceberg.enabled", "true", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("floe.iceberg.target-lag-ms", "0", incremental_operation=AlterConfigOpType.SET)])
        start = time.monotonic()
        a.incremental_alter_configs([res])[res].result(timeout=30)
        while True:
            done = all(floe.metric("floe_iceberg_committed_offset", topic=topic, partition=str(p)) >= ends[p]
                       for p in range(PARTITIONS))
            if done:
                took = time.monotonic() - start
                rows = floe.metric("floe_iceberg_committed_rows_total", topic=topic)
                assert rows == sum(ends), f"{label}: {rows} rows committed for {sum(ends)} records"
                return took
            if time.monotonic() - start > 600:
                raise RuntimeError(f"{label}: not tiered in 600 s; see {floe.log_path}")
            time.sleep(0.05)
    finally:
        floe.kill9()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3, help="arms alternate local, S3, local, S3, ...")
    args = ap.parse_args()
    local, remote = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        s3 = MotoS3(root / "moto.log").start()
        try:
            for run in range(args.runs):
                local.append(arm(f"local{run}", root, args.mb, {}))
                s3.client().create_bucket(Bucket=f"bench{run}")
                remote.append(arm(f"s3{run}", root, args.mb, s3.floe_settings(f"s3://bench{run}/wh")))
        finally:
            s3.stop()
    local_s, s3_s = sorted(local)[len(local) // 2], sorted(remote)[len(remote) // 2]
    print(f"backlog {args.mb} MiB in {PARTITIONS} partitions; {args.runs} runs per arm, median")
    print(f"local warehouse: {local_s:.2f} s  {args.mb / local_s:.1f} MiB/s  (all: {', '.join(f'{t:.2f}' for t in local)})")
    print(f"moto S3 warehouse: {s3_s:.2f} s  {args.mb / s3_s:.1f} MiB/s  (all: {', '.join(f'{t:.2f}' for t in remote)})")
    print(f"ratio S3/local throughput: {local_s / s3_s:.2f}")


if __name__ == "__main__":
    main()
