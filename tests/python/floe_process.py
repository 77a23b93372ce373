"""A real `floe` broker process for the end-to-end tests.

`FloeProcess` owns one broker: its data dir, its Kafka, metrics and Iceberg REST ports, its
command line, and a stderr log file (appended across restarts so a failing test
shows the whole history). It promises that `start()` returns only once the
Kafka port accepts TCP connections, and raises with the broker's stderr if the
process exits or does not listen in time.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

START_TIMEOUT_S = float(os.environ.get("FLOE_START_TIMEOUT", "30"))
STOP_TIMEOUT_S = 20.0


def floe_bin() -> str:
    """The broker binary: $FLOE_BIN, else <target dir>/debug/floe."""
    explicit = os.environ.get("FLOE_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR") or str(REPO_ROOT / "target")
    return str(Path(target) / "debug" / "floe")


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port that was free a moment ago (bind 0, read, close), and never one this
    process handed out before: the kernel may offer a just-closed port again, and a
    broker given the same port for --listen and --metrics-listen fails to start."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def wait_until(cond, timeout: float, interval: float = 0.05, what: str = "condition"):
    """Poll `cond()` until it returns a truthy value; return it, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class FloeStartError(RuntimeError):
    pass


class FloeProcess:
    """One broker process, restartable on the same ports and data dir."""

    def __init__(self, data_dir: Path, log_path: Path, overrides: dict | None = None,
                 env: dict | None = None, name: str = "floe", console: bool = False):
        self.name = name
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.port = free_port()
        self.metrics_port = free_port()
        self.iceberg_rest_port = free_port()
        self.schema_registry_port = None
        self.schema_registry_scheme = "http"  # "https": served with the broker's certificate (ssl.*)
        # The web console only when asked for (console=True: a free port, `console_url`):
        # brokers run side by side and would race for its default 127.0.0.1:8080.
        self.console_port = free_port() if console else None
        self.overrides = dict(overrides or {})
        self.env = dict(env or {})
        self.command_extra: list[str] = []  # more CLI arguments, e.g. ["--config", path]
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self.last_returncode: int | None = None

    # -- addresses ---------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def iceberg_rest_url(self) -> str:
        """Base URL of the read-only Iceberg REST catalog (routes under /v1/)."""
        return f"http://127.0.0.1:{self.iceberg_rest_port}"

    @property
    def schema_registry_url(self) -> str:
        """Base URL of the built-in Schema Registry (set `schema_registry_port` to turn it on)."""
        return f"{self.schema_registry_scheme}://127.0.0.1:{self.schema_registry_port}"

    @property
    def console_url(self) -> str:
        """Base URL of the web console (construct with console=True, or set `console_port`)."""
        return f"http://127.0.0.1:{self.console_port}"

    # -- lifecycle ---------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [
            floe_bin(),
            "--data-dir", str(self.data_dir),
            "--listen", self.bootstrap,
            "--advertised-listener", self.bootstrap,
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
            # iceberg_rest_port = None disables the REST catalog (an empty address).
            "--iceberg-rest-listen", f"127.0.0.1:{self.iceberg_rest_port}" if self.iceberg_rest_port else "",
            # schema_registry_port = None (the default) disables the Schema Registry.
            "--schema-registry-listen",
            f"{self.schema_registry_scheme}://127.0.0.1:{self.schema_registry_port}" if self.schema_registry_port else "",
            # console_port = None (the default) disables the web console.
            "--console-listen", f"127.0.0.1:{self.console_port}" if self.console_port else "",
        ]
        cmd += self.command_extra
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, overrides: dict | None = None, env: dict | None = None) -> "FloeProcess":
        """Start the broker (optionally replacing overrides/env) and wait until it listens."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if overrides is not None:
            self.overrides = dict(overrides)
        if env is not None:
            self.env = dict(env)
        binary = floe_bin()
        if not os.access(binary, os.X_OK):
            raise FloeStartError(f"floe binary not found or not executable: {binary} "
                                 "(build with `cargo build --workspace` or set FLOE_BIN)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        cmd = self.command()
        self._log_file.write(f"\n===== [{self.name}] start: {' '.join(cmd)} env={self.env}\n".encode())
        full_env = dict(os.environ)
        full_env.setdefault("RUST_LOG", "info")
        full_env.setdefault("NO_COLOR", "1")
        full_env.update(self.env)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log_file,
                                     stderr=self._log_file, env=full_env)
        self._wait_listening()
        return self

    def _wait_listening(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.last_returncode = rc
                raise FloeStartError(f"floe exited with code {rc} during startup\n"
                                     f"--- floe stderr ---\n{self.stderr_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
                if self.console_port:
                    with socket.create_connection((self.host, self.console_port), timeout=0.5):
                        pass
                return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill9()
                raise FloeStartError(f"floe did not accept connections on {self.bootstrap} "
                                     f"within {START_TIMEOUT_S}s\n--- floe stderr ---\n{self.stderr_text()}")
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait for exit; returns the exit code (raises if it hangs)."""
        if self.proc is None or self.proc.poll() is not None:
            return self._reap()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._reap()
            raise AssertionError(f"floe did not exit within {timeout}s of SIGTERM")
        return self._reap()

    def kill9(self) -> int:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        return self._reap()

    def restart(self, overrides: dict | None = None, env: dict | None = None) -> int:
        """SIGTERM, then start again on the same ports and data dir. Returns the stop exit code."""
        rc = self.stop()
        self.start(overrides=overrides, env=env)
        return rc

    def _reap(self) -> int | None:
        if self.proc is not None:
            self.last_returncode = self.proc.poll()
        if self._log_file is not None:
            self._log_file.write(f"===== [{self.name}] exited: {self.last_returncode}\n".encode())
            self._log_file.close()
            self._log_file = None
        return self.last_returncode

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self, limit: int = 60_000) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no stderr captured)"
        if len(data) > limit:
            data = b"...(truncated)...\n" + data[-limit:]
        return data.decode(errors="replace")

    # -- data dir helpers --------------------------------------------------
    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def segment_files(self, topic: str, partition: int = 0) -> list[Path]:
        """The partition's .log files, by base offset."""
        return sorted(self.partition_dir(topic, partition).glob("*.log"),
                      key=lambda p: int(p.stem))

    def copy_data_dir(self, dest: Path) -> Path:
        assert not self.running, "stop the broker before copying its data dir"
        shutil.copytree(self.data_dir, dest)
        return dest

    # -- metrics -----------------------------------------------------------
    def metrics_text(self) -> str:
        def fetch():
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return None
        return wait_until(fetch, timeout=10, what=f"metrics at {self.metrics_url}")

    def metric(self, name: str, **labels) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0.0 if absent)."""
        return parse_metric(self.metrics_text(), name, **labels)


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        got = dict(_LABEL.findall(m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(4))
    return total
