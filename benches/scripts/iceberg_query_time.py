"""Times one DuckDB aggregate over an Iceberg table, for floe-bench's `table-maintenance`.

    iceberg_query_time.py --metadata PATH/vN.metadata.json [--runs 7]

Runs `SELECT partition, count(*), max("offset") FROM iceberg_scan('<metadata>') GROUP BY
partition` once to warm the page cache and DuckDB, then `--runs` times, and prints one
JSON object on stdout: the run times in milliseconds, their median, the query's result,
and what the reader had to open (manifests, data files and their bytes, from DuckDB's
`iceberg_metadata`). The Iceberg extension is loaded offline from the `duckdb_extensions`
package, as in tests/python.

It owns the reading and the timing only; making the table, maintaining it and reading the
metadata files' sizes are the harness's. Exit code 2, with {"skipped": REASON} on stdout,
when duckdb or its extensions cannot be imported: the harness reports the arm as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

QUERY = 'SELECT partition, count(*), max("offset") FROM iceberg_scan(?) GROUP BY partition ORDER BY partition'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metadata", required=True, help="the table's current metadata.json")
    ap.add_argument("--runs", type=int, default=7, help="timed runs after one warm-up")
    args = ap.parse_args()
    try:
        import duckdb
        from duckdb_extensions import import_extension
    except ImportError as e:
        print(json.dumps({"skipped": f"it cannot import duckdb and duckdb_extensions ({e})"}))
        return 2
    con = duckdb.connect()
    try:
        for ext in ("iceberg", "avro"):
            import_extension(ext, con=con)
        con.execute("LOAD iceberg")
    except Exception as e:  # noqa: BLE001 - any failure to load is a skip with its reason
        print(json.dumps({"skipped": f"DuckDB {duckdb.__version__} cannot load its iceberg extension offline ({e})"}))
        return 2

    result = con.execute(QUERY, [args.metadata]).fetchall()  # warm-up
    runs_ms = []
    for _ in range(max(1, args.runs)):
        t = time.perf_counter()
        got = con.execute(QUERY, [args.metadata]).fetchall()
        runs_ms.append((time.perf_counter() - t) * 1000.0)
        if got != result:
            raise SystemExit(f"the query's result changed between runs: {result} then {got}")

    # What the scan opened: the current snapshot's manifests and their live data files.
    entries = con.execute(
        "SELECT manifest_path, status, content, file_path, record_count FROM iceberg_metadata(?)", [args.metadata]
    ).fetchall()
    live = [e for e in entries if str(e[1]).upper() != "DELETED" and str(e[2]).upper() in ("DATA", "EXISTING", "ADDED")]
    data_files = {e[3] for e in live}
    data_bytes = 0
    for path in data_files:
        local = path.removeprefix("file://")
        try:
            data_bytes += os.path.getsize(local)
        except OSError:
            pass
    print(json.dumps({
        "duckdb": duckdb.__version__,
        "runs_ms": runs_ms,
        "median_ms": statistics.median(runs_ms),
        "result": [list(r) for r in result],
        "manifests": len({e[0] for e in entries}),
        "data_files": len(data_files),
        "data_bytes": data_bytes,
        "rows": sum(int(e[4] or 0) for e in live),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
