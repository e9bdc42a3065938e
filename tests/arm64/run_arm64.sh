#!/usr/bin/env bash
# run_arm64.sh — the arm64 build executed, not only compiled: build/arm64/kipp_test (`make
# arm64`: Debian's aarch64 cross compiler, linked statically) run by qemu-aarch64 (Debian's
# qemu-user). The unit suites (among them the neon kernel level against the scalar
# references, every weight type and activation format), then model gates on the cpu backend
# at the neon level: tiny-tied's golden vectors in bf16 (the oracle's argmax, NMSE 1e-4
# against cpu-ref, which runs under qemu too), q8_0 and q4_0 against cpu-ref on the same
# file (same argmax, NMSE 1e-4), the random tiny model against cpu-ref in
# q4_k_m and q6_k (the neon level's K-quant kernels). The scheduler is not run here: qemu-user
# on an x86 host keeps x86's memory ordering, so arm64's weaker one is not what it would test.
# qemu timings are no speed figure. Without qemu-aarch64, the cross compiler or the arm64 libraries (`make
# deps` installs them) the stage is skipped with a notice — unless KIPP_REQUIRE_ARM64=1 (CI
# sets it), where that is a failure. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
QEMU=${QEMU_AARCH64:-qemu-aarch64}
T=$BUILD/arm64/kipp_test

missing=()
command -v "$QEMU" >/dev/null || missing+=("$QEMU (Debian qemu-user)")
command -v "${ARM64_CC:-aarch64-linux-gnu-gcc}" >/dev/null || missing+=("aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu)")
for lib in libutf8proc.a libjansson.a; do
    [ -f "/usr/lib/aarch64-linux-gnu/$lib" ] || missing+=("arm64 $lib (libutf8proc-dev:arm64 / libjansson-dev:arm64)")
done
if ((${#missing[@]})); then
    echo "arm64: NOT RUN: missing ${missing[*]}; make deps installs them"
    if [ "${KIPP_REQUIRE_ARM64:-}" = 1 ]; then echo "0 passed, 1 failed"; exit 1; fi
    echo "0 passed, 0 failed"
    exit 0
fi

if ! make -s --no-print-directory arm64 BUILD="$BUILD" >"$BUILD/arm64-build.log" 2>&1; then
    tail -n 30 "$BUILD/arm64-build.log"
    echo "arm64: the build failed"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! file "$T" | grep -q "ARM aarch64"; then
    echo "arm64: $T is not an aarch64 executable: $(file -b "$T")"
    echo "0 passed, 1 failed"
    exit 1
fi

. tests/lib.sh
# kipp_test under qemu, its counts added up (tests/lib.sh; a crash counts as a failure)
run() {
    local label=$1
    shift
    run_counted "$label" timeout $((600 * ${KIPP_TEST_TIMEOUT_SCALE:-1})) "$QEMU" "$T" "$@"
}

# the golden gate runs the best level this build has; the cpu-vs-ref gates name neon and
# fail when another level runs (or none is selected)
run "unit suites" --unit
TT=models/tiny-tied/kipp-tiny-tied
run "golden tiny-tied bf16 (cpu, neon)" --model "$TT-bf16.gguf" tests/test-vectors/tiny-tied --backend cpu
# q4_0 and q6_k in the full tier (make test's budget): q8_0 and q4_k_m keep the int8 and
# k-quant neon paths in the test tier
arm_q=q8_0; arm_k=q4_k_m
[ "${TIER:-full}" = full ] && { arm_q="q8_0 q4_0"; arm_k="q4_k_m q6_k"; }
for t in $arm_q; do # quantized: the oracle's argmax is bf16's, so cpu against cpu-ref on the file
    KIPP_GATE_ISA=neon run "tiny-tied $t vs cpu-ref (neon)" --cpu-vs-ref "$TT-$t.gguf" tests/test-vectors/tiny-tied
done
for t in $arm_k; do
    KIPP_GATE_ISA=neon run "random tiny $t vs cpu-ref (neon)" --cpu-vs-ref-shape "models/random/qwen3-tiny-$t.gguf"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
