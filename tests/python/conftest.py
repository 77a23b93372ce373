"""Fixtures: a real `floe` broker per test, on free ports with a temp data dir.

- `floe`: a started broker (`.bootstrap`, `.metrics_url`, `.iceberg_rest_url`, `.data_dir`, `.restart()`,
  `.kill9()`, `.stop()`, `.start()`, `.metric(name, **labels)`).
- `floe_factory(name, overrides=None, env=None, data_dir=None, start=True)`: more
  brokers for tests that need several (e.g. zero copy on vs off on copies of a data dir).

Every broker's stderr goes to a file; when a test fails, each broker's stderr is
attached to the report as a "floe stderr" section. All brokers are killed at teardown.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from floe_process import FloeProcess  # noqa: E402


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for proc in getattr(item, "_floe_processes", []):
            rep.sections.append((f"floe stderr [{proc.name}] ({proc.log_path})", proc.stderr_text()))


@pytest.fixture
def floe_factory(request, tmp_path):
    procs: list[FloeProcess] = []
    request.node._floe_processes = procs

    def make(name: str = "floe", overrides: dict | None = None, env: dict | None = None,
             data_dir: Path | None = None, start: bool = True) -> FloeProcess:
        proc = FloeProcess(
            data_dir=data_dir or tmp_path / f"{name}-data",
            log_path=tmp_path / f"{name}-stderr.log",
            overrides=overrides,
            env=env,
            name=name,
        )
        procs.append(proc)
        if start:
            proc.start()
        return proc

    yield make
    for p in procs:
        p.kill9()


@pytest.fixture
def floe(floe_factory) -> FloeProcess:
    return floe_factory("floe")
