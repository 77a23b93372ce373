"""The README runs as written: its shell and Python blocks, in order, as a new user would.

How the README's source tells this test what to do (keep to it when editing the README):

- A block fenced ```sh is shell, run with `bash -eo pipefail`; a block fenced ```python is
  Python, run with this interpreter (the venv of tests/python/requirements.txt). Each block runs
  on its own, as if typed into a fresh terminal: it must not rely on a `cd` or `export` of an
  earlier block. Other fences (```toml, ```text, ...) are not commands and are not run.
- An HTML comment on the line before a block changes how it runs:
  - `<!-- readme-test: broker (...) -->`: the first block, which builds and starts Floe. Its
    `cargo build` line is not run (the `floe` on PATH is $FLOE_BIN); the rest runs in the
    background, as the broker, and the test waits for the five default ports.
  - `<!-- readme-test: background (ports P P ...) -->`: another long-running broker; run in the
    background until the named ports listen, stopped with SIGTERM at the end.
  - `<!-- readme-test: skip (why) -->`: not run. Only the blocks in `SKIPPED` may carry it.
- Every other block runs in the foreground and must exit 0; `EXPECT` says what some of them
  must print (the records produced come back).

The user's home is a temporary directory ($HOME), the broker starts in ~/floe-demo as the
README says, and every other block runs in $HOME: the queries read the tables from another
directory than the broker's. The broker binds Floe's real default ports (9092, 9644, 8080,
8081, 8181): the other tests use free ephemeral ports and pytest runs tests one at a time.
At the end, ~/floe-demo must hold only the data directories the README names, and nothing
may have appeared at /floe-data.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from floe_process import floe_bin

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DEFAULT_PORTS = [9092, 9644, 8080, 8081, 8181]

# Blocks the test does not run (a fragment of each), and why.
SKIPPED = {
    "bash tests/run-all.sh": "the whole test suite, which runs this test",
}

# A fragment of a block → patterns its output must match (re.search, MULTILINE).
EXPECT = {
    "kcat -b 127.0.0.1:9092 -L": [r"clicks"],
    "kcat -b 127.0.0.1:9092 -C -t clicks": [r"^\d \d+ k1 hello$", r"^\d \d+ k2 world$"],
    "floe topic produce clicks -K:": [
        r"^\d \d+ alice home$", r"^\d \d+ bob cart$", r"^\d \d+ alice checkout$",  # --offset beginning
        r"Group: dashboards\b.*Total lag: \d+",  # group describe
        r"rows 5,",  # iceberg status
    ],
    "SqlCatalog(": [r"^5 \['cart', 'checkout', 'hello', 'home', 'world'\]$"],
    "FROM floe.kafka.clicks": [r"^\[\(5, \['cart', 'checkout', 'hello', 'home', 'world'\]\)\]$"],
    "icebergLocal(": [r"\A5\s*\n5\s*\Z"],
    "FROM floe.kafka.orders": [r"^\[\(1, 'tea'\), \(2, 'cake'\), \(3, 'jam'\)\]$"],
    "topic consume payments": [r"paid"],
}

# What the directories the brokers start in hold at the end: their data directories and the
# files the README writes there, nothing else.
EXPECTED_DIRS = {
    "floe-demo": {"floe-data", "floe-data-2"},
    "floe-secure": {"floe-data", "plain-users.txt"},
}


@dataclass
class Block:
    lang: str
    code: str
    marker: str | None  # the readme-test comment before it, if any
    line: int  # 1-based line of the opening fence

    def label(self) -> str:
        first = next((l for l in self.code.splitlines() if l.strip()), "")
        return f"README.md:{self.line} ({self.lang}: {first[:70]})"


def readme_blocks() -> list[Block]:
    """The README's fenced blocks with their language and readme-test marker."""
    lines = README.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mm = re.match(r"^<!-- readme-test: (.*) -->$", prev.strip())
        blocks.append(Block(lang, "\n".join(lines[start + 1:j]) + "\n", mm.group(1) if mm else None, start + 1))
        i = j + 1
    return blocks


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def snapshot(path: Path) -> set[str]:
    """Every file and directory under `path` (empty when it does not exist)."""
    if not path.exists():
        return set()
    return {str(p) for p in path.rglob("*")} | {str(path)}


@pytest.mark.timeout(1200)
def test_readme_commands_run_as_written(tmp_path):
    blocks = readme_blocks()
    runnable = [b for b in blocks if b.lang in ("sh", "bash", "python")]
    assert runnable, "the README has no shell or Python blocks"
    assert runnable[0].marker and runnable[0].marker.startswith("broker"), \
        f"the README's first block must start the broker (marker `readme-test: broker`): {runnable[0].label()}"
    assert "tests/run-all.sh" not in runnable[0].code, "the first block runs Floe only"

    skipped = [b for b in runnable if b.marker and b.marker.startswith("skip")]
    unexplained = [b.label() for b in skipped if not any(f in b.code for f in SKIPPED)]
    assert not unexplained, f"blocks skipped without an entry in SKIPPED: {unexplained}"
    for fragment in SKIPPED:
        assert any(fragment in b.code for b in skipped), f"SKIPPED names `{fragment}`, but no skipped block holds it"
    for fragment in EXPECT:
        hits = [b.label() for b in runnable if fragment in b.code]
        assert len(hits) == 1, f"EXPECT's `{fragment}` must match one README block, matches {hits}"

    busy = [p for p in DEFAULT_PORTS if port_open(p)]
    assert not busy, f"Floe's default ports {busy} are in use on this machine: this test needs them free"

    home = tmp_path / "home"
    home.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "floe").symlink_to(floe_bin())
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    env.update(HOME=str(home), PATH=f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}", NO_COLOR="1")
    # DuckDB's INSTALL downloads extensions; offline, install the pinned wheels' copies into
    # ~/.duckdb first, so the README's `INSTALL iceberg` finds them installed.
    subprocess.run([sys.executable, "-c", "import duckdb\nfrom duckdb_extensions import import_extension\n"
                    "con = duckdb.connect()\nfor e in ('iceberg', 'avro', 'httpfs'): import_extension(e, con=con)"],
                   env=env, cwd=home, check=True, timeout=120)
    root_data_before = snapshot(Path("/floe-data"))

    failures: list[str] = []
    background: list[tuple[Block, subprocess.Popen, Path, list[int]]] = []

    def start_background(block: Block, code: str, ports: list[int]) -> None:
        log = tmp_path / f"background-{len(background)}.log"
        proc = subprocess.Popen(["bash", "-eo", "pipefail", "-c", code], cwd=home, env=env,
                                stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        background.append((block, proc, log, ports))
        deadline = time.monotonic() + 90
        while not all(port_open(p) for p in ports):
            if proc.poll() is not None or time.monotonic() > deadline:
                failures.append(f"{block.label()}: ports {ports} did not all listen "
                                f"(exit {proc.poll()}):\n{log.read_text()[-3000:]}")
                return
            time.sleep(0.2)

    try:
        for block in runnable:
            marker = block.marker or ""
            if marker.startswith("skip"):
                continue
            if marker.startswith("broker"):
                builds = [l for l in block.code.splitlines() if l.startswith("cargo build")]
                assert len(builds) == 1, f"{block.label()}: the broker block has one `cargo build` line, not run"
                code = "\n".join(l for l in block.code.splitlines() if not l.startswith("cargo build"))
                start_background(block, code, DEFAULT_PORTS)
                continue
            if marker.startswith("background"):
                ports = [int(p) for p in re.findall(r"\d+", marker)]
                assert ports, f"{block.label()}: a background block names the ports it waits for"
                start_background(block, block.code, ports)
                continue
            assert not marker, f"{block.label()}: unknown readme-test marker `{marker}`"
            cmd = ["bash", "-eo", "pipefail", "-c", block.code] if block.lang != "python" else [sys.executable, "-c", block.code]
            try:
                r = subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired as e:
                failures.append(f"{block.label()}: timed out after 240 s; output so far:\n{e.stdout}\n{e.stderr}")
                continue
            if r.returncode != 0:
                failures.append(f"{block.label()}: exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
                continue
            for fragment, patterns in EXPECT.items():
                if fragment in block.code:
                    missing = [p for p in patterns if not re.search(p, r.stdout, re.MULTILINE)]
                    if missing:
                        failures.append(f"{block.label()}: output lacks {missing}:\n{r.stdout[-3000:]}")
    finally:
        # SIGTERM, as Ctrl-C would: the broker stops cleanly and lets go of its ports.
        for block, proc, log, ports in reversed(background):
            if proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while any(port_open(p) for p in ports) and time.monotonic() < deadline:
                time.sleep(0.2)
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if any(port_open(p) for p in ports) or proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                failures.append(f"{block.label()}: did not stop within 30 s of SIGTERM")
            elif "stopped cleanly" not in log.read_text():
                failures.append(f"{block.label()}: no `stopped cleanly` after SIGTERM:\n{log.read_text()[-2000:]}")

    broker_log = background[0][2].read_text() if background else ""
    data_dir = home / "floe-demo" / "floe-data"
    if str(data_dir) not in broker_log:
        failures.append(f"the broker did not print its absolute data directory {data_dir}:\n{broker_log[-2000:]}")
    for name, expected in EXPECTED_DIRS.items():
        found = {p.name for p in (home / name).iterdir()} if (home / name).exists() else set()
        if found != expected:
            failures.append(f"~/{name} holds {sorted(found)}, expected only {sorted(expected)}")
    if snapshot(Path("/floe-data")) != root_data_before:
        failures.append("files appeared under /floe-data: a path was not made absolute from the broker's directory")
        if not root_data_before:  # this run made it: leave the machine as it was
            shutil.rmtree("/floe-data", ignore_errors=True)

    assert not failures, f"{len(failures)} README step(s) failed:\n\n" + "\n\n".join(failures)
