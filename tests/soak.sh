#!/usr/bin/env bash
# The soak form of the fault suite (run before a release; see docs/reliability.md):
#
#     bash tests/soak.sh [SECONDS]        # default 3600
#
# Spends SECONDS on four kinds of fault against a debug build, each ending with
# the history checker (tests/python/history.py):
#   1. three eighths of the time: the kill -9 loop (test_faults.py): idempotent acks=all
#      producers and group consumers while the broker is SIGKILLed at random moments;
#   2. an eighth: the transactional kill -9 loop (test_transactions_history.py):
#      transactional producers committing and aborting, a plain producer and
#      read_committed group consumers; checked for aborted reads (G1a), intermediate
#      reads (G1b), reads above the last stable offset and non-atomic transactions;
#   3. a quarter: power cuts at random moments on the FUSE rig (test_power_loss.py,
#      flush.messages=1, plain and torn cuts; ~2 s per cycle), skipped without
#      /dev/fuse or root;
#   4. the rest: every crash point (test_crash_points.py), round after round.
# The kill loops' verdicts and counts go to $CARGO_TARGET_DIR/soak-report.json and
# soak-txn-report.json; the summary at the end gives each phase's outcome. Copy them
# into docs/reliability.md.
# Assumes tests/run-all.sh ran once (venv, build). With FLOE_BIN set, nothing is built.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
# A FLOE_BIN given from outside is used as it is (copy it, and floe-powerloss-fs
# beside it, to keep the soak's binaries fixed while the tree is rebuilt).
FLOE_BIN_GIVEN="${FLOE_BIN:-}"
export FLOE_BIN="${FLOE_BIN:-$TARGET_DIR/debug/floe}"
TOTAL="${1:-3600}"
PY="$ROOT/.venv/bin/python"
PYTEST=(-p no:cacheprovider --timeout=0 -q)

# The same build as tests/run-all.sh (the same feature set, so nothing rebuilds): failpoints
# compiled in, none armed unless a test asks; the power-loss rig's binary beside floe.
if [ -z "$FLOE_BIN_GIVEN" ]; then
    cargo build --workspace --features floe-broker/failpoints
fi

SUMMARY=()
phase() { # name seconds-budget cmd...
    local name="$1" started=$SECONDS; shift
    printf '\n== soak phase: %s\n' "$name"
    if "$@"; then SUMMARY+=("$(printf '%-14s ok     %5ds' "$name" $((SECONDS - started)))")
    else SUMMARY+=("$(printf '%-14s FAILED %5ds' "$name" $((SECONDS - started)))"); FAILED=1; fi
}
FAILED=0

export FLOE_SOAK_SECONDS=$((TOTAL * 3 / 8))
export FLOE_SOAK_REPORT="$TARGET_DIR/soak-report.json"
phase "kill -9 loop" "$PY" -m pytest tests/python/test_faults.py -k kill9_loop "${PYTEST[@]}" -s

# The same environment names, this phase's own share and report.
TXN_REPORT="$TARGET_DIR/soak-txn-report.json"
FLOE_SOAK_SECONDS=$((TOTAL / 8)) FLOE_SOAK_REPORT="$TXN_REPORT" \
    phase "transactions" "$PY" -m pytest tests/python/test_transactions_history.py -k broker_kill9_loop "${PYTEST[@]}" -s

# Two parametrised cases (plain, torn) share the quarter.
export FLOE_POWERLOSS_CYCLES=$(( TOTAL / 4 / 2 / 2 > 5 ? TOTAL / 4 / 2 / 2 : 5 ))
phase "power cuts" "$PY" -m pytest tests/python/test_power_loss.py -k flush_messages_1 "${PYTEST[@]}"

crash_rounds() {
    local deadline=$((SECONDS + TOTAL / 4)) round=0
    while [ "$SECONDS" -lt "$deadline" ] || [ "$round" = 0 ]; do
        round=$((round + 1))
        echo "-- crash points, round $round"
        "$PY" -m pytest tests/python/test_crash_points.py "${PYTEST[@]}" || return 1
    done
    echo "-- crash points: $round round(s), all valid"
}
phase "crash points" crash_rounds

printf '\n== soak summary (%ds of %ds asked)\n' "$SECONDS" "$TOTAL"
for line in "${SUMMARY[@]}"; do printf '   %s\n' "$line"; done
cat "$FLOE_SOAK_REPORT"
[ -f "$TXN_REPORT" ] && cat "$TXN_REPORT"
exit "$FAILED"
