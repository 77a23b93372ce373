"""The path a new user walks (issue #33): Floe on its defaults, errors that say what to do.

- A broker started with no --data-dir in one directory tiers a topic created with the
  CLI, and pyiceberg (SQL catalog), DuckDB (REST attach) and ClickHouse (chdb,
  icebergLocal) read every record from another directory; nothing is created outside
  the data dir (the old relative warehouse `file://./floe-data/...` wrote to /floe-data).
- A table an older Floe left at a relative location is refused, never written to.
- Setting errors name the key, the value as typed and where it was typed, suggest the
  setting meant, and never print a backtrace, whatever RUST_BACKTRACE says.
- Kafka's `log.retention.hours` works; a misspelt `floe.*` topic key is INVALID_CONFIG.
- Taken ports are named by service, setting and flag, all at once.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from cli import floe_cli, floe_json, floe_ok
from floe_process import floe_bin, free_port, wait_until

RECORDS = 40


def start_in(cwd: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, int, int, Path]:
    """`floe ARGS` with `cwd` as its working directory, on free ports (console off),
    no --data-dir; returns (process, kafka port, REST port, stderr log)."""
    port, rest = free_port(), free_port()
    log = cwd.parent / f"{cwd.name}-stderr.log"
    cmd = [floe_bin(), "--listen", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{free_port()}",
           "--iceberg-rest-listen", f"127.0.0.1:{rest}", "--schema-registry-listen", "",
           "--console-listen", "", *args]
    full_env = dict(os.environ, RUST_LOG="info", NO_COLOR="1", **(env or {}))
    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=open(log, "ab"),
                            stderr=subprocess.STDOUT, env=full_env)

    def listening():
        assert proc.poll() is None, f"floe exited {proc.returncode}:\n{log.read_text()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False
    wait_until(listening, 30, what="floe to listen")
    return proc, port, rest, log


def stop(proc: subprocess.Popen):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_defaults_tier_to_tables_every_reader_finds_from_another_directory(tmp_path):
    started, elsewhere = tmp_path / "started-here", tmp_path / "reading-from-here"
    started.mkdir()
    elsewhere.mkdir()
    root_before = {p.name for p in Path("/").iterdir()}
    proc, port, rest, log = start_in(started)
    try:
        bootstrap = f"127.0.0.1:{port}"
        data_dir = started / "floe-data"
        # The data dir is logged absolute.
        wait_until(lambda: f"data_dir={data_dir}" in log.read_text(), 10, what="the ready line")
        floe_ok(bootstrap, "topic", "create", "clicks", "--partitions", "2",
                "-c", "floe.iceberg.enabled=true", "-c", "floe.iceberg.target-lag-ms=500")
        lines = "".join(f"user{i % 5}:click {i}\n" for i in range(RECORDS))
        floe_ok(bootstrap, "topic", "produce", "clicks", "-K:", input=lines)

        # pyiceberg's SQL catalog, opened from another directory, by the catalog's absolute path.
        from pyiceberg.catalog.sql import SqlCatalog
        os.chdir(elsewhere)
        db = data_dir / "iceberg" / "catalog.db"

        def tiered():
            if not db.exists():
                return None
            try:
                table = SqlCatalog("floe", uri=f"sqlite:///{db}").load_table("kafka.clicks")
            except Exception:  # noqa: BLE001 - not created yet
                return None
            rows = table.scan().to_arrow()
            return rows if rows.num_rows == RECORDS else None
        rows = wait_until(tiered, 60, interval=0.5, what="every record in the table")
        assert sorted(v.decode() for v in rows.column("value").to_pylist()) == sorted(f"click {i}" for i in range(RECORDS))
        location = SqlCatalog("floe", uri=f"sqlite:///{db}").load_table("kafka.clicks").metadata.location
        assert location == f"file://{data_dir}/iceberg/warehouse/kafka/clicks", location

        # DuckDB through the built-in REST catalog.
        import duckdb
        from duckdb_extensions import import_extension
        con = duckdb.connect()
        for ext in ("iceberg", "avro", "httpfs"):
            import_extension(ext, con=con)
        con.execute("LOAD iceberg")
        con.execute(f"ATTACH 'floe' AS f (TYPE iceberg, ENDPOINT 'http://127.0.0.1:{rest}', AUTHORIZATION_TYPE 'none')")
        assert con.execute("SELECT count(*), count(DISTINCT key) FROM f.kafka.clicks").fetchone() == (RECORDS, 5)

        # ClickHouse (chdb) reads the table directory; it refuses paths outside its working
        # directory, so it runs from the file system root.
        script = ("import chdb; print(chdb.query(\"SELECT count(*) FROM icebergLocal('"
                  f"{data_dir}/iceberg/warehouse/kafka/clicks')\", 'CSV'))")
        out = subprocess.run([os.sys.executable, "-c", script], cwd="/", capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(RECORDS)
    finally:
        os.chdir(tmp_path)
        stop(proc)
    # Nothing outside the data dir: the start directory holds it alone, the root nothing new.
    assert sorted(p.name for p in started.iterdir()) == ["floe-data"]
    assert {p.name for p in Path("/").iterdir()} - root_before == set()


def test_a_table_left_at_a_relative_location_is_refused_not_written(tmp_path):
    """A table an older Floe created at `file://./floe-data/...` (its files went under
    /floe-data) is never written to: tiering says why and how to fix it."""
    data_dir = tmp_path / "data"
    proc, port, _, log = start_in(tmp_path, "--data-dir", str(data_dir))
    bootstrap = f"127.0.0.1:{port}"
    try:
        floe_ok(bootstrap, "topic", "create", "old", "-c", "floe.iceberg.enabled=true",
                "-c", "floe.iceberg.target-lag-ms=500")
        floe_ok(bootstrap, "topic", "produce", "old", "--value", "first")
        db = data_dir / "iceberg" / "catalog.db"
        wait_until(lambda: db.exists() and sqlite3.connect(db).execute(
            "SELECT count(*) FROM iceberg_tables WHERE table_name = 'old'").fetchone()[0] == 1, 60, interval=0.5,
            what="the table")
    finally:
        stop(proc)
    # Rewrite the catalog's pointer as an old Floe would have stored it: a relative location.
    con = sqlite3.connect(db)
    (metadata,) = con.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = 'old'").fetchone()
    text = Path(metadata.removeprefix("file://")).read_text()
    warehouse = f"file://{data_dir}/iceberg/warehouse"
    Path(metadata.removeprefix("file://")).write_text(text.replace(warehouse, "file://./floe-data/iceberg/warehouse"))
    con.commit()
    con.close()
    proc, port, _, log = start_in(tmp_path, "--data-dir", str(data_dir))
    try:
        floe_ok(f"127.0.0.1:{port}", "topic", "produce", "old", "--value", "second")
        wait_until(lambda: "which is not an absolute location" in log.read_text(), 60, interval=0.5,
                   what="the refusal in the log")
        text = log.read_text()
        assert "drop the table from the catalog" in text and "/floe-data/iceberg/warehouse/kafka/old" in text
    finally:
        stop(proc)
    assert not Path("/floe-data").exists()


def run_floe(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, RUST_BACKTRACE="1", NO_COLOR="1", **(env or {}))
    return subprocess.run([floe_bin(), *args], capture_output=True, text=True, timeout=60, env=full_env, cwd=cwd)


@pytest.mark.parametrize("args, env, wanted", [
    (["--override", "log.segment.bytes=abc"], {},
     "error: invalid value `abc` for `log.segment.bytes` (from --override): expected a whole number from 14 to 2147483647"),
    (["--override", "log.segmnt.bytes=1"], {},
     "error: unknown setting `log.segmnt.bytes` (from --override). Did you mean `log.segment.bytes`?"),
    (["--override", "floe.iceberg.enabledd=true"], {},
     "Did you mean `floe.iceberg.enabled`?"),
    ([], {"FLOE_LOG_SEGMENT_BYTE": "5"},
     "error: environment variable FLOE_LOG_SEGMENT_BYTE matches no setting. Did you mean FLOE_LOG_SEGMENT_BYTES (log.segment.bytes)?"),
    ([], {"FLOE_NUM_PARTITIONS": "many"},
     "error: invalid value `many` for `num.partitions` (from environment variable FLOE_NUM_PARTITIONS): expected a whole number"),
    (["--node-id", "1", "--listen", "nowhere"], {}, "(from flag --listen)"),
])
def test_setting_errors_say_what_where_and_what_to_do_without_a_backtrace(tmp_path, args, env, wanted):
    p = run_floe("--data-dir", str(tmp_path / "d"), "--console-listen", "", *args, env=env)
    assert p.returncode == 1, p
    assert wanted in p.stderr, p.stderr
    assert "backtrace" not in p.stderr.lower() and "stack" not in p.stderr.lower(), p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3, p.stderr
    assert not (tmp_path / "d").exists(), "nothing is created before the settings are good"


def test_a_config_file_error_names_the_file(tmp_path):
    config = tmp_path / "floe.toml"
    config.write_text('"log.retention.hours" = "a week"\n')
    p = run_floe("--config", str(config), "--data-dir", str(tmp_path / "d"), cwd=tmp_path)
    assert p.returncode == 1
    assert f"invalid value `a week` for `log.retention.hours` (from config file {config})" in p.stderr, p.stderr


def test_kafkas_log_retention_hours_and_a_misspelt_floe_topic_key(floe_factory):
    floe = floe_factory("floe", overrides={"log.retention.hours": "2"})
    floe_ok(floe.bootstrap, "topic", "create", "hours")
    doc = floe_json(floe.bootstrap, "topic", "describe", "hours", "--all-configs")
    doc = doc[0] if isinstance(doc, list) else doc
    by_name = {c["name"]: c["value"] for c in doc["configs"]}
    assert str(by_name["retention.ms"]) == str(2 * 3600 * 1000), by_name

    p = floe_cli(floe.bootstrap, "topic", "create", "typo", "-c", "floe.iceberg.enabledd=true")
    assert p.returncode == 1, p
    assert "INVALID_CONFIG" in p.stderr and "floe.iceberg.enabledd" in p.stderr, p.stderr
    assert "floe.iceberg.enabled`?" in p.stderr, p.stderr
    assert "typo" not in floe_ok(floe.bootstrap, "topic", "list")


def test_taken_ports_are_named_all_at_once(tmp_path):
    with socket.socket() as a, socket.socket() as b:
        for s in (a, b):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen()
        kafka, console = a.getsockname()[1], b.getsockname()[1]
        p = run_floe("--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{kafka}",
                     "--console-listen", f"127.0.0.1:{console}", "--metrics-listen", "127.0.0.1:0",
                     "--iceberg-rest-listen", "127.0.0.1:0", "--schema-registry-listen", "")
    assert p.returncode == 1
    assert "cannot bind 2 ports:" in p.stderr, p.stderr
    assert f"Kafka listener PLAINTEXT on 127.0.0.1:{kafka} (setting `listeners`, flag --listen)" in p.stderr
    assert f"web console on 127.0.0.1:{console} (setting `floe.console.listen`, flag --console-listen)" in p.stderr
    assert "--port-offset 10" in p.stderr
    assert not (tmp_path / "d").exists()


def test_port_offset_moves_every_default_port(tmp_path):
    """`--port-offset N` moves the five default ports; a port set by hand stays."""
    defaults = (9092, 9644, 8080, 8081, 8181)
    offset = next(o for o in range(11000, 30000, 7) if all(_free(port + o) for port in defaults))
    p = subprocess.Popen([floe_bin(), "--port-offset", str(offset), "--data-dir", str(tmp_path / "d"),
                          "--console-listen", ""], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, NO_COLOR="1"))
    try:
        def ready():
            assert p.poll() is None, p.stderr.read()
            return all(_listening(port + offset) for port in (9092, 9644, 8081, 8181))
        wait_until(ready, 30, interval=0.2, what="every service on its moved port")
        assert not _listening(8080 + offset), "the console was turned off by hand"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=20)
    assert p.returncode == 0, p.stderr.read()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
        return True
    except OSError:
        return False


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
