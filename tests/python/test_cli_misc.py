"""`floe completion`, `floe iceberg tables|snapshots` and the help of every
command (issue #17 part 1): the completion script is one bash accepts; the
tables and snapshots the CLI lists are those pyiceberg reads from the same
catalog; every command's --help exits 0 and shows examples."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from cli import floe_cli, floe_json, floe_ok
from clients import create_topic, produce_all, unique_topic
from floe_process import floe_bin

pyiceberg_sql = pytest.importorskip("pyiceberg.catalog.sql")

TIERING = {"floe.iceberg.tick-ms": "200", "floe.iceberg.target-lag-ms": "1000"}


def test_completion_scripts_for_bash_zsh_and_fish():
    bash = floe_ok(None, "completion", "bash")
    assert "_floe()" in bash and "complete -F _floe" in bash and "topic" in bash and "acl" in bash
    if shutil.which("bash"):
        syntax = subprocess.run(["bash", "-n"], input=bash, capture_output=True, text=True, timeout=30)
        assert syntax.returncode == 0, syntax.stderr
        # Sourced in a shell, it registers the function for `floe`.
        registered = subprocess.run(["bash", "-c", 'source /dev/stdin; complete -p floe'], input=bash,
                                    capture_output=True, text=True, timeout=30)
        assert registered.returncode == 0 and "_floe" in registered.stdout, registered.stderr
    assert floe_ok(None, "completion", "zsh").startswith("#compdef floe")
    assert "complete -c floe" in floe_ok(None, "completion", "fish")
    where = floe_ok(None, "completion", "--help")
    assert "bash-completion/completions/floe" in where and ".config/fish/completions" in where
    assert floe_cli(None, "completion", "tcsh").returncode == 2


def test_bench_runs_the_harness_or_says_how_to_get_it(tmp_path):
    # PATH without floe-bench: only one built next to floe can be found.
    p = floe_cli(None, "bench", "list", env={"PATH": str(tmp_path)})
    if (Path(floe_bin()).resolve().parent / "floe-bench").is_file():
        # Built next to floe: its scenario list, through floe.
        assert p.returncode == 0 and "zero-copy" in p.stdout, p.stderr
    else:
        assert p.returncode == 1 and "cargo build --release -p floe-benches --bin floe-bench" in p.stderr, p.stderr


def help_subcommands(text: str) -> list[str]:
    """The subcommands under `Commands:` in clap's help, `help` left out."""
    names, listing = [], False
    for line in text.splitlines():
        if line.strip() == "Commands:":
            listing = True
        elif listing:
            if not line.strip():
                break
            m = re.match(r"^  (\S+)", line)
            if m and m.group(1) != "help":
                names.append(m.group(1))
    return names


def test_every_command_has_help_with_examples():
    seen = []

    def walk(path: list[str]):
        p = floe_cli(None, *path, "--help")
        assert p.returncode == 0, (path, p.stderr)
        assert "Example" in p.stdout, path
        children = help_subcommands(p.stdout)
        if not children:
            # A command that does something: its own Examples block, not only --log-format's.
            assert re.search(r"^Examples?:", p.stdout, re.M), f"floe {' '.join(path)} --help has no Examples block"
        seen.append(" ".join(path))
        for c in children:
            walk(path + [c])

    walk([])
    for expected in ("acl create", "acl list", "acl delete", "user create", "user delete", "user list",
                     "iceberg tables", "iceberg snapshots", "iceberg status", "iceberg maintain", "completion",
                     "bench", "topic create", "verify"):
        assert expected in seen, seen


def pyiceberg_table(data_dir, topic):
    ice = data_dir / "iceberg"
    cat = pyiceberg_sql.SqlCatalog("floe", uri=f"sqlite:///{ice / 'catalog.db'}",
                                   warehouse=f"file://{ice / 'warehouse'}")
    return cat.load_table(("kafka", topic))


def test_iceberg_tables_and_snapshots_match_pyiceberg(floe_factory):
    floe = floe_factory("floe", overrides=TIERING)
    topic = unique_topic("cli-ice")
    create_topic(floe.bootstrap, topic, partitions=2,
                 config={"floe.iceberg.enabled": "true", "segment.bytes": "8000"})
    for _ in range(10):  # small batches: each fits the small segments, which roll often
        for p in range(2):
            produce_all(floe.bootstrap, topic, [{"key": b"k%d" % i, "value": b"v" * 50} for i in range(30)], partition=p)

    # Tiered, from two partitions in (at least) two commits: wait until the CLI sees most of it.
    data_dir = str(floe.data_dir)
    deadline = time.monotonic() + 60
    while True:
        listed = floe_json(None, "iceberg", "tables", "--data-dir", data_dir) \
            if (floe.data_dir / "iceberg" / "catalog.db").exists() else []
        mine = [t for t in listed if t["table"] == topic]
        if mine and mine[0]["records"] >= 400 and mine[0]["snapshots"] >= 2:
            break
        assert time.monotonic() < deadline, f"not tiered in time: {listed}"
        time.sleep(0.5)

    # What the CLI lists is what pyiceberg reads (read again if the broker committed in between).
    for _ in range(20):
        [row] = [t for t in floe_json(None, "iceberg", "tables", "--data-dir", data_dir) if t["table"] == topic]
        snaps = floe_json(None, "iceberg", "snapshots", topic, "--data-dir", data_dir)
        table = pyiceberg_table(floe.data_dir, topic)
        current = table.current_snapshot()
        if current.snapshot_id == row["current_snapshot_id"] == snaps[-1]["snapshot_id"]:
            break
        time.sleep(0.5)
    assert row["format_version"] == table.metadata.format_version
    assert row["records"] == int(current.summary["total-records"]) == len(table.scan().to_arrow())
    assert row["data_files"] == int(current.summary["total-data-files"]) == len(list(table.scan().plan_files()))
    assert row["bytes"] == int(current.summary["total-files-size"]) > 0
    assert row["snapshots"] == len(table.metadata.snapshots) == len(snaps)

    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    assert {s["snapshot_id"] for s in snaps} == set(by_id)
    for s in snaps:
        theirs = by_id[s["snapshot_id"]]
        assert s["parent_snapshot_id"] == theirs.parent_snapshot_id
        assert s["timestamp_ms"] == theirs.timestamp_ms
        assert s["operation"] == theirs.summary.operation.value
        assert s["added_records"] == int(theirs.summary.get("added-records", 0))
        assert s["added_data_files"] == int(theirs.summary.get("added-data-files", 0))
        assert s["current"] == (s["snapshot_id"] == current.snapshot_id)
    assert sum(s["added_records"] - s["deleted_records"] for s in snaps) == row["records"]

    # The tables people read, and YAML.
    text = floe_ok(None, "iceberg", "tables", "--data-dir", data_dir)
    assert text.splitlines()[0].split() == ["TABLE", "FORMAT", "CURRENT-SNAPSHOT", "SNAPSHOTS", "DATA-FILES",
                                            "RECORDS", "BYTES"]
    assert [topic, f"v{row['format_version']}", str(row["current_snapshot_id"])] in \
        [line.split()[:3] for line in text.splitlines()]
    snap_text = floe_ok(None, "iceberg", "snapshots", topic, "--data-dir", data_dir)
    assert f"{current.snapshot_id} *" in snap_text and "append" in snap_text
    assert f"table: {topic}\n" in floe_ok(None, "iceberg", "tables", "--data-dir", data_dir, "--format", "yaml")

    # A table that is not there: exit 4, pointing at `iceberg tables`.
    missing = floe_cli(None, "iceberg", "snapshots", "no-such-topic", "--data-dir", data_dir)
    assert missing.returncode == 4 and "floe iceberg tables" in missing.stderr, missing.stderr
