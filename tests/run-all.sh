#!/usr/bin/env bash
# The one test command (README; also what .ci/run execs):
#
#     bash tests/run-all.sh
#
# Installs what the suites need (kcat and chromium from Debian, Python clients in .venv,
# kafkajs and playwright-core in tests/js/node_modules), checks formatting, the house rules
# (tests/tools/house_rules.py) and clippy -D warnings, builds the workspace, then runs:
#   1. cargo test --workspace        (unit tests + rdkafka end-to-end tests)
#      Build and test use `--features floe-broker/failpoints`: the debug `floe` the suites start
#      must arm FAILPOINTS (test_crash_points.py, test_storage_errors.py), and the same features in
#      both steps keep `cargo test` from rebuilding it without. Release builds never carry them.
#   2. pytest tests/python           (confluent-kafka, kafka-python, aiokafka, kcat, raw wire)
#   3. node --test tests/js/         (kafkajs; the web console in chromium via playwright-core,
#                                    screenshots in tests/js/artifacts/console/)
#   4. floe-bench run SCENARIO --quick, every scenario (the benchmark harness must not rot)
#   5. cargo fuzz run, each fuzz/ target for FUZZ_SECONDS (installs cargo-fuzz if missing)
# Idempotent; works on a fresh Debian machine as root, with or without a tty.
# Setup or build failures stop the run at once; every test stage runs even if an
# earlier one failed, and the script exits non-zero if any stage failed.
#
# Environment:
#   CARGO_TARGET_DIR   honoured (default: <repo>/target)
#   FLOE_BIN           the broker binary the tests start (default: $CARGO_TARGET_DIR/debug/floe)
#   FLOE_POWERLOSS_FS_BIN  the power-loss rig's FUSE filesystem (tests/powerloss-fs, built with the
#                      workspace; default: beside FLOE_BIN, else $CARGO_TARGET_DIR/debug). Its tests
#                      need root and /dev/fuse, and skip without them; no libfuse/fusermount3 needed.
#   PYTEST_ARGS        extra arguments for pytest (e.g. "-k durability -x")
#   FUZZ_SECONDS       seconds per fuzz target in stage 5 (default 30; 0 skips the stage)
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export FLOE_BIN="${FLOE_BIN:-$TARGET_DIR/debug/floe}"
export PYTHONDONTWRITEBYTECODE=1
export DEBIAN_FRONTEND=noninteractive
export NPM_CONFIG_UPDATE_NOTIFIER=false
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

RUN_START=$SECONDS
STAGE_START=$SECONDS
FAILED_STAGES=()
TEST_STAGES=0
STAGE_REPORT=()

banner() {
    STAGE_START=$SECONDS
    printf '\n==================================================================\n'
    printf '== %s\n' "$*"
    printf '==================================================================\n'
}

stage_done() { # name status
    local took=$((SECONDS - STAGE_START))
    STAGE_REPORT+=("$(printf '%-28s %-6s %4ds' "$1" "$2" "$took")")
    printf -- '-- %s: %s (%ds)\n' "$1" "$2" "$took"
}

die() {
    printf '\nrun-all.sh: FATAL: %s\n' "$*" >&2
    exit 1
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else die "need root to run: $*"
    fi
}

APT_UPDATED=0
apt_install() {
    if [ "$APT_UPDATED" = 0 ]; then
        as_root apt-get update -qq || die "apt-get update failed"
        APT_UPDATED=1
    fi
    as_root apt-get install -y -qq --no-install-recommends "$@" || die "apt-get install $* failed"
}

# ---------------------------------------------------------------- setup
banner "setup: system packages (kcat, python3-venv, node, openssl, protoc, etcd, chromium)"
command -v kcat >/dev/null 2>&1 || apt_install kcat
# The web console suite (tests/js/console.test.mjs) drives Debian's chromium with playwright-core;
# no browser is ever downloaded by npm.
command -v chromium >/dev/null 2>&1 || apt_install chromium
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
# floe-bench's `tls` scenario makes its throwaway CA and broker certificate with the openssl CLI.
command -v openssl >/dev/null 2>&1 || apt_install openssl
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt_install nodejs npm
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found (install the Rust toolchain first)"
# The cluster crate's etcd client (etcd-client) compiles etcd's protobufs with protoc at build
# time; the cluster tests start Debian's etcd themselves, on loopback ports of their own.
command -v protoc >/dev/null 2>&1 || apt_install protobuf-compiler
command -v etcd >/dev/null 2>&1 || apt_install etcd-server
# librdkafka (bundled by the rdkafka crate) builds with a C compiler, make and perl; aws-lc-sys
# (rustls' aws-lc-rs provider, which OpenDAL's S3 client requires) needs only the C compiler.
if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1 || ! command -v perl >/dev/null 2>&1; then
    apt_install build-essential perl
fi
printf 'kcat: %s\n' "$(kcat -V 2>&1 | grep -m1 -o 'kcat - .*\|Version [^ ]*' | head -1)"
printf 'python3: %s  node: %s  cargo: %s\n' "$(python3 --version 2>&1)" "$(node --version)" "$(cargo --version)"
printf 'chromium: %s\n' "$(chromium --version 2>/dev/null | head -1)"
stage_done "setup-system" ok

banner "setup: python venv (.venv) with Kafka clients"
REQS="$ROOT/tests/python/requirements.txt"
STAMP="$ROOT/.venv/.floe-requirements.sha256"
WANT="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [ ! -x "$ROOT/.venv/bin/python" ] || ! "$ROOT/.venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$ROOT/.venv"
    if ! python3 -m venv "$ROOT/.venv" 2>/dev/null; then
        # Debian's python3 ships venv's ensurepip separately.
        rm -rf "$ROOT/.venv"
        apt_install python3-venv
        python3 -m venv "$ROOT/.venv" || die "python3 -m venv failed"
    fi
fi
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$REQS" \
        || die "pip install -r tests/python/requirements.txt failed"
    echo "$WANT" >"$STAMP"
else
    echo "requirements unchanged since last install"
fi
"$ROOT/.venv/bin/python" -c 'import confluent_kafka, kafka, aiokafka, pytest; print("confluent-kafka", confluent_kafka.__version__, "librdkafka", confluent_kafka.libversion()[0], "| kafka-python", kafka.__version__, "| aiokafka", aiokafka.__version__)' \
    || die "python clients do not import"
# Quix Streams (test_stream_framework.py) pins an older confluent-kafka: its own venv.
QUIX_REQS="$ROOT/tests/python/requirements-quix.txt"
QUIX_STAMP="$ROOT/.venv-quix/.floe-requirements.sha256"
QUIX_WANT="$(sha256sum "$QUIX_REQS" | cut -d' ' -f1)"
if [ ! -x "$ROOT/.venv-quix/bin/python" ] || [ "$(cat "$QUIX_STAMP" 2>/dev/null)" != "$QUIX_WANT" ]; then
    rm -rf "$ROOT/.venv-quix"
    python3 -m venv "$ROOT/.venv-quix" || die "python3 -m venv .venv-quix failed"
    "$ROOT/.venv-quix/bin/python" -m pip install -q --disable-pip-version-check -r "$QUIX_REQS" \
        || die "pip install -r tests/python/requirements-quix.txt failed"
    echo "$QUIX_WANT" >"$QUIX_STAMP"
fi
export FLOE_QUIX_PYTHON="${FLOE_QUIX_PYTHON:-$ROOT/.venv-quix/bin/python}"
"$FLOE_QUIX_PYTHON" -c 'import quixstreams; print("quixstreams", quixstreams.__version__)' \
    || die "quixstreams does not import"
stage_done "setup-python" ok

banner "setup: kafkajs and playwright-core (tests/js, npm ci)"
(cd "$ROOT/tests/js" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci in tests/js failed"
stage_done "setup-js" ok

# ---------------------------------------------------------------- lint
# First and fast: formatting, the workspace's house rules (crate dependencies, import
# circles, file sizes: tests/tools/house_rules.py) and clippy with warnings as errors.
# A failure here is reported with the tests' and fails the run, but the tests still run.
FEATURES=(--features floe-broker/failpoints)
lint() {
    local rc=0
    echo "-- cargo fmt --all --check"
    cargo fmt --all --check || { echo "cargo fmt: the files above are not formatted (run: cargo fmt --all)"; rc=1; }
    echo "-- python3 tests/tools/house_rules.py"
    python3 "$ROOT/tests/tools/house_rules.py" || rc=1
    echo "-- cargo clippy --workspace --all-targets ${FEATURES[*]} -- -D warnings"
    cargo clippy --workspace --all-targets "${FEATURES[@]}" -- -D warnings || rc=1
    return $rc
}
banner "lint: cargo fmt --check, house rules, cargo clippy -D warnings"
TEST_STAGES=$((TEST_STAGES + 1))
if lint; then
    stage_done "lint" ok
else
    stage_done "lint" "FAIL"
    FAILED_STAGES+=("lint")
fi

# ---------------------------------------------------------------- build
banner "build: cargo build --workspace ${FEATURES[*]}"
cargo build --workspace "${FEATURES[@]}" || die "cargo build --workspace failed"
[ -x "$FLOE_BIN" ] || die "broker binary not found at FLOE_BIN=$FLOE_BIN"
echo "FLOE_BIN=$FLOE_BIN"
stage_done "build" ok

# ---------------------------------------------------------------- tests
run_stage() { # name cmd...
    local name="$1"; shift
    TEST_STAGES=$((TEST_STAGES + 1))
    banner "test: $name"
    "$@"
    local rc=$?
    if [ $rc -eq 0 ]; then
        stage_done "$name" ok
    else
        stage_done "$name" "FAIL($rc)"
        FAILED_STAGES+=("$name")
    fi
}

# Each suite's output is also kept under $TARGET_DIR/test-logs/, so the summary can name what failed.
LOG_DIR="$TARGET_DIR/test-logs"
mkdir -p "$LOG_DIR"
logged() { # logfile cmd...: runs cmd, its output to the terminal and to logfile; cmd's exit status
    local log="$1"; shift
    "$@" 2>&1 | tee "$log"
    return "${PIPESTATUS[0]}"
}
run_stage "cargo test --workspace" logged "$LOG_DIR/cargo-test.log" cargo test --workspace "${FEATURES[@]}"
# shellcheck disable=SC2086
run_stage "pytest tests/python" logged "$LOG_DIR/pytest.log" "$ROOT/.venv/bin/python" -m pytest tests/python \
    -p no:cacheprovider -ra --timeout=180 --durations=25 ${PYTEST_ARGS:-}
run_stage "node --test tests/js/" node --test "$ROOT/tests/js/"
[ -d "$ROOT/tests/js/artifacts/console" ] && echo "web console screenshots: $ROOT/tests/js/artifacts/console/"

bench_quick() { # every floe-bench scenario for a few seconds; reports under $TARGET_DIR/floe-bench-quick/
    local s rc=0
    # table-maintenance's DuckDB query runs in Python: the venv installed above has duckdb.
    export FLOE_BENCH_PYTHON="${FLOE_BENCH_PYTHON:-$ROOT/.venv/bin/python}"
    for s in zero-copy tls max-throughput coupling tiering-cost freshness table-maintenance transactions compaction replication shared-vs-copy; do
        echo "-- floe-bench run $s --quick"
        "$TARGET_DIR/debug/floe-bench" run "$s" --quick --floe-bin "$FLOE_BIN" \
            --out "$TARGET_DIR/floe-bench-quick/$s" >/dev/null || { echo "floe-bench $s FAILED"; rc=1; }
    done
    return $rc
}
run_stage "floe-bench --quick" bench_quick

fuzz_short() { # each cargo-fuzz target for FUZZ_SECONDS over the committed seeds; a crash fails the stage
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        cargo install --locked cargo-fuzz || return 1
    fi
    local t rc=0
    for t in $FUZZ_TARGETS; do
        # New inputs go to a scratch corpus under the target dir, so the committed seeds stay as they are.
        local scratch="$TARGET_DIR/fuzz-corpus/$t"
        mkdir -p "$scratch"
        echo "-- cargo fuzz run $t (${FUZZ_SECONDS}s)"
        # The toolchain is stable: RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags.
        # -s none: safe Rust needs no AddressSanitizer to find panics; -a keeps overflow checks.
        (cd "$ROOT" && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a --target-dir "$TARGET_DIR/fuzz" "$t" \
            "$scratch" "fuzz/corpus/$t" -- -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -print_final_stats=1) \
            || { echo "cargo fuzz $t FAILED (reproducer in fuzz/artifacts/$t/)"; rc=1; }
    done
    return $rc
}
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
# Both targets by default; FUZZ_TARGETS="record_batch" (say) runs a subset.
FUZZ_TARGETS="${FUZZ_TARGETS:-request_decode record_batch}"
if [ "$FUZZ_SECONDS" != 0 ]; then
    run_stage "cargo fuzz (short)" fuzz_short
fi

# ---------------------------------------------------------------- summary
printf '\n==================================================================\n'
printf '== summary (%ds total)\n' "$((SECONDS - RUN_START))"
for line in "${STAGE_REPORT[@]}"; do printf '   %s\n' "$line"; done
if [ ${#FAILED_STAGES[@]} -ne 0 ]; then
    printf 'FAILED STAGES: %s\n' "${FAILED_STAGES[*]}"
    # The failing tests by name (the logs above are long; CI may show only this tail).
    grep -h -E '^test .* FAILED$|^---- .* stdout ----$' "$LOG_DIR/cargo-test.log" 2>/dev/null | head -20 | sed 's/^/   cargo: /'
    grep -h -E '^(FAILED|ERROR) ' "$LOG_DIR/pytest.log" 2>/dev/null | head -20 | cut -c1-300 | sed 's/^/   pytest: /'
fi
# The plain closing line CI reads: test stages passed and failed.
printf 'stages: %d passed, %d failed\n' "$((TEST_STAGES - ${#FAILED_STAGES[@]}))" "${#FAILED_STAGES[@]}"
[ ${#FAILED_STAGES[@]} -eq 0 ]
