"""A local S3 API for the tests: `moto_server` (PyPI `moto[server]`) on a free
port, with boto3 for making buckets and listing what landed in them.

`MotoS3` promises that `start()` returns once the endpoint answers, and that
`stop()` ends the process it started (and nothing else).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3

from floe_process import free_port, wait_until

ACCESS_KEY_ID = "floe-test-key"
SECRET_ACCESS_KEY = "floe-test-secret-5f2a9c"
REGION = "us-east-1"


def moto_server_bin() -> str:
    """`moto_server` beside this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / "moto_server"
    if beside.exists():
        return str(beside)
    found = shutil.which("moto_server")
    if not found:
        raise RuntimeError("moto_server not found: pip install -r tests/python/requirements.txt")
    return found


class MotoS3:
    def __init__(self, log_path: Path):
        self.port = free_port()
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "MotoS3":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([moto_server_bin(), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()

        def up():
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log_path.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=1):
                    return True
            except OSError:
                return False
        wait_until(up, timeout=30, interval=0.1, what="moto_server")
        return self

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self):
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY_ID, aws_secret_access_key=SECRET_ACCESS_KEY)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        out = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def floe_settings(self, warehouse: str) -> dict:
        """Floe's settings for a warehouse in this server."""
        return {
            "floe.iceberg.warehouse": warehouse,
            "floe.iceberg.s3.endpoint": self.endpoint,
            "floe.iceberg.s3.region": REGION,
            "floe.iceberg.s3.access-key-id": ACCESS_KEY_ID,
            "floe.iceberg.s3.secret-access-key": SECRET_ACCESS_KEY,
            "floe.iceberg.s3.path-style-access": "true",
        }

    def pyiceberg_props(self) -> dict:
        """The same, as pyiceberg FileIO properties."""
        return {"s3.endpoint": self.endpoint, "s3.region": REGION, "s3.access-key-id": ACCESS_KEY_ID,
                "s3.secret-access-key": SECRET_ACCESS_KEY, "s3.force-virtual-addressing": "false"}
