"""Helpers for tests that arm floe's failpoints (`FAILPOINTS`, docs/reliability.md)."""

from __future__ import annotations


def assert_failpoints_armed(floe):
    """Fails (not skips) when the broker ignored FAILPOINTS: a build without the
    `failpoints` feature would otherwise make every fault test pass vacuously."""
    log = floe.stderr_text()
    assert "FAILPOINTS ARMED" in log, (
        "floe did not arm FAILPOINTS: build it with `cargo build -p floe-broker --features failpoints` "
        "(tests/run-all.sh does)\n" + log[-2000:])
