#!/usr/bin/env bash
# The soak form of the fault suite (run before a release; see docs/reliability.md):
#
#     bash tests/soak.sh [SECONDS]        # default 3600
#
# Runs the kill -9 loop (tests/python/test_faults.py) for SECONDS against a
# debug build: idempotent acks=all producers and group consumers while the
# broker is SIGKILLed at random moments, then the history checker. The verdict
# and fault counts go to $CARGO_TARGET_DIR/soak-report.json (and are printed);
# copy them into docs/reliability.md. Assumes tests/run-all.sh ran once (venv, build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export FLOE_BIN="${FLOE_BIN:-$TARGET_DIR/debug/floe}"
export FLOE_SOAK_SECONDS="${1:-3600}"
export FLOE_SOAK_REPORT="$TARGET_DIR/soak-report.json"
cargo build -p floe-broker --bin floe --features failpoints  # the same binary tests/run-all.sh builds (none armed)
"$ROOT/.venv/bin/python" -m pytest tests/python/test_faults.py -k kill9_loop -p no:cacheprovider \
    --timeout=0 -s -q
cat "$FLOE_SOAK_REPORT"
