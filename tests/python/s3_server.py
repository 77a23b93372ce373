"""A local S3 API for the tests: `moto_server` (PyPI `moto[server]`) on a free
port, with boto3 for making buckets and listing what landed in them.

`MotoS3` promises that `start()` returns once the endpoint answers, and that
`stop()` ends the process it started (and nothing else). `S3Gate` sits in
front of it to stop a writer mid-commit, for the crash tests.
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

    def floe_settings(self, warehouse: str, endpoint: str | None = None) -> dict:
        """Floe's settings for a warehouse in this server (reached at `endpoint`, default its own)."""
        return {
            "floe.iceberg.warehouse": warehouse,
            "floe.iceberg.s3.endpoint": endpoint or self.endpoint,
            "floe.iceberg.s3.region": REGION,
            "floe.iceberg.s3.access-key-id": ACCESS_KEY_ID,
            "floe.iceberg.s3.secret-access-key": SECRET_ACCESS_KEY,
            "floe.iceberg.s3.path-style-access": "true",
        }

    def pyiceberg_props(self) -> dict:
        """The same, as pyiceberg FileIO properties."""
        return {"s3.endpoint": self.endpoint, "s3.region": REGION, "s3.access-key-id": ACCESS_KEY_ID,
                "s3.secret-access-key": SECRET_ACCESS_KEY, "s3.force-virtual-addressing": "false"}


class S3Gate:
    """A forwarding proxy in front of an S3 endpoint that can stop a writer in
    the middle of an Iceberg commit: once armed, the first write under a
    table's `metadata/` that follows a data file upload is held (not
    forwarded) until `release()`. So a test can kill the writer after its
    data file is in the bucket and before any manifest or metadata of that
    commit is, every time, instead of hoping a random kill lands there.

    Requests are forwarded byte for byte (path-style only); `holding` is set
    while one is held.
    """

    def __init__(self, upstream: str):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.armed = False
        self.data_seen = False
        self.holding = threading.Event()
        self.released = threading.Event()
        self.data_keys: list[str] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = urllib.parse.urlsplit(self.path).path
                if gate.armed and self.command in ("PUT", "POST"):
                    if "/data/" in path and path.endswith(".parquet"):
                        gate.data_seen = True
                        gate.data_keys.append(urllib.parse.unquote(path))
                    elif "/metadata/" in path and gate.data_seen:
                        gate.holding.set()
                        gate.released.wait(120)
                        self.close_connection = True
                        return  # the writer is gone by now; nothing is forwarded
                conn = http.client.HTTPConnection(*gate.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() in ("transfer-encoding", "connection", "content-length"):
                        continue
                    self.send_header(k, v)
                if self.command == "HEAD":
                    self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
                    self.end_headers()
                else:
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self):
        self.armed, self.data_seen = True, False
        self.holding.clear()
        self.released.clear()

    def release(self):
        """Drops the held request and forwards everything from now on."""
        self.armed = False
        self.released.set()

    def stop(self):
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()
