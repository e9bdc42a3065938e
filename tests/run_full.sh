#!/usr/bin/env bash
# run_full.sh — `make test-full`: everything. The full tier of tests/stages.txt (the model
# gates on every weight type x ISA level x backend, the whole tooling suite, mutation, the
# KV fault matrix) on binaries with every CUDA architecture, then `make test-sanitize`
# (ASan + UBSan) and `make test-tsan` (ThreadSanitizer). Each part's own summary is kept in
# build/test-logs/full-*.log; the last line adds them up: "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
mkdir -p "$BUILD/test-logs"
total_p=0; total_f=0; parts=()
part() { # name, command...: runs it with its output shown and kept, adds its last counts
    local name=$1 log="$BUILD/test-logs/full-$1.log" rc p f
    shift
    echo "=== test-full: $name: $*"
    "$@" 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    p=$(grep -oE '^([a-z-]+: )?[0-9]+ passed' "$log" | tail -n 1 | grep -oE '[0-9]+' || true)
    f=$(grep -oE '[0-9]+ failed' "$log" | tail -n 1 | grep -oE '[0-9]+' || true)
    p=${p:-0}; f=${f:-0}
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    total_p=$((total_p + p)); total_f=$((total_f + f)); parts+=("$name: $p passed, $f failed")
}
t0=$(date +%s)
if ! $MAKE --no-print-directory deps || ! $MAKE --no-print-directory -j"$(nproc)" full-build; then
    echo "test-full: set-up or build failed"; echo "0 passed, 1 failed"; exit 1
fi
t1=$(date +%s)
part tier env KIPP_SETUP_SECONDS=0 KIPP_BUILD_SECONDS=$((t1 - t0)) BUILD="$BUILD" \
    tests/run_tests.sh --tier full "$@"
part sanitize $MAKE --no-print-directory test-sanitize
part tsan $MAKE --no-print-directory test-tsan
echo
printf 'test-full: %s\n' "${parts[@]}"
echo "test-full: $(( $(date +%s) - t0 )) s"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
