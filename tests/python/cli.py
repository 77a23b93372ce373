"""Runs the `floe` admin commands (`floe topic ...`) as a user would, for the
CLI tests: the same binary as the broker under test (FLOE_BIN)."""

from __future__ import annotations

import json
import subprocess

from floe_process import floe_bin


def floe_cli(bootstrap: str | None, *args: str, input: str | bytes | None = None, timeout: float = 60,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """`floe ARGS... --brokers BOOTSTRAP`; returns the finished process (text
    stdout/stderr unless `input` is bytes). Never raises on a non-zero exit:
    tests assert on returncode."""
    import os
    cmd = [floe_bin(), *args]
    if bootstrap is not None:
        cmd += ["--brokers", bootstrap]
    full_env = dict(os.environ)
    full_env.pop("FLOE_BROKERS", None)
    full_env.update(env or {})
    text = not isinstance(input, bytes)
    return subprocess.run(cmd, input=input, capture_output=True, text=text, timeout=timeout, env=full_env)


def floe_ok(bootstrap: str | None, *args: str, **kw) -> str:
    """As floe_cli, asserting exit code 0; returns stdout."""
    p = floe_cli(bootstrap, *args, **kw)
    assert p.returncode == 0, f"floe {' '.join(args)} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def floe_json(bootstrap: str | None, *args: str, **kw):
    """As floe_ok with `--format json`; returns the parsed document."""
    return json.loads(floe_ok(bootstrap, *args, "--format", "json", **kw))
