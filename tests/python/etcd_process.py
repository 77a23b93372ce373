"""A real single-member etcd (Debian's `etcd-server`) for the cluster tests.

`EtcdProcess` owns one etcd on loopback: its data dir, client and peer ports and a
log file. `start()` returns once etcd answers `/health`; `kill9()` and `start()`
again keep the data dir, as a crashed and restarted etcd would.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from floe_process import free_port

START_TIMEOUT_S = 30.0


def etcd_bin() -> str | None:
    return os.environ.get("ETCD_BIN") or shutil.which("etcd")


class EtcdProcess:
    def __init__(self, data_dir: Path, log_path: Path):
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def store_url(self, prefix: str) -> str:
        """`floe.metadata.store` for a Floe cluster under `prefix`."""
        return f"etcd://{self.endpoint}/{prefix.strip('/')}"

    def start(self) -> "EtcdProcess":
        binary = etcd_bin()
        assert binary, "etcd not found: install Debian's etcd-server (.ci/run does)"
        peer = f"http://127.0.0.1:{self.peer_port}"
        client = f"http://{self.endpoint}"
        cmd = [binary, "--name", "floe-test", "--data-dir", str(self.data_dir),
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"floe-test={peer}"]
        log = open(self.log_path, "ab")
        log.write(f"\n===== [etcd] start: {' '.join(cmd)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}:\n{self.log_text()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"etcd not healthy within {START_TIMEOUT_S}s:\n{self.log_text()}")
            time.sleep(0.1)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def get_json(self, key: str):
        """The JSON value at `key`, read through etcd's own HTTP gateway (`/v3/kv/range`),
        or None if the key does not exist: the cluster's state as etcd holds it, read
        independently of any broker."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        req = urllib.request.Request(f"http://{self.endpoint}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return json.loads(base64.b64decode(kvs[0]["value"])) if kvs else None

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def log_text(self, limit: int = 20_000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode(errors="replace")
        except FileNotFoundError:
            return "(no etcd log)"
