#!/usr/bin/env bash
# test_cuda_fatal.sh — the cuda binaries on a machine without an NVIDIA driver (every
# developer VM and CI): asking for the cuda backend is a fatal error that names what was
# found and what is needed — never a fallback to the CPU, never a crash or a loader error —
# for the CLI (kipp-cuda-generic, whose default backend is cuda), the server
# (kipp-server-cuda, at start-up: it listens first so /health can say "loading", then exits), the DGX Spark build and the GPU operator tests;
# the same binaries still run the CPU backends when asked by name; the ordinary binaries
# say how to get cuda. On a machine with a driver the no-driver checks are skipped (said).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
M=models/tiny-tied/kipp-tiny-tied-bf16.gguf
pass=0; fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect_fatal LABEL TEXT CMD...: exits non-zero (not by a signal), says TEXT on stderr,
# prints nothing on stdout (kipp_test: only its "N passed, N failed" line; kipp-server: only
# its "listening on" line)
expect_fatal() {
    local label=$1 want=$2 out err rc
    shift 2
    err=$(mktemp)
    out=$(timeout 60 "$@" 2>"$err" </dev/null); rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -lt 124 ] && grep -qF -- "$want" "$err" &&
       { [ -z "$out" ] || [[ "$out" =~ ^[0-9]+\ passed,\ [1-9][0-9]*\ failed$ ]] ||
         [[ "$out" =~ ^kipp-server:\ listening\ on\ http://[^$'\n']*$ ]]; }; then
        ok "$label: exit $rc, '$(grep -F -- "$want" "$err" | head -n 1 | cut -c1-160)'"
    else
        bad "$label: exit $rc, stdout ${#out} bytes, wanted a non-zero exit and '$want'; stderr:"
        head -c 600 "$err"; echo
    fi
    rm -f "$err"
}

driver=0
if [ -e /proc/driver/nvidia/version ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then driver=1; fi
nodrv="cuda: no NVIDIA driver found"
if [ "$driver" -eq 0 ]; then
    expect_fatal "kipp-cuda-generic --backend cuda" "$nodrv" \
        "$BUILD/kipp-cuda-generic" --backend cuda -m "$M" -p hi -n 1
    expect_fatal "kipp-cuda-generic (cuda is its default)" "$nodrv" \
        "$BUILD/kipp-cuda-generic" -m "$M" -p hi -n 1
    expect_fatal "kipp-cuda-generic --info --backend cuda" "$nodrv" \
        "$BUILD/kipp-cuda-generic" --backend cuda -m "$M" --info
    expect_fatal "kipp-server-cuda --backend cuda" "$nodrv" \
        "$BUILD/kipp-server-cuda" --backend cuda -m "$M" --port 0
    expect_fatal "kipp-cuda-spark --backend cuda" "$nodrv" \
        "$BUILD/kipp-cuda-spark" --backend cuda -m "$M" -p hi -n 1
    expect_fatal "kipp_test_cuda --cuda-operators" "--cuda-operators needs an NVIDIA GPU" \
        "$BUILD/kipp_test_cuda" --cuda-operators
    expect_fatal "kipp_test_cuda gate --backend cuda" "$nodrv" \
        "$BUILD/kipp_test_cuda" --phase2-model "$M" tests/test-vectors/tiny-tied --backend cuda
else
    echo "skipped: this machine has an NVIDIA driver; the no-driver checks need one without"
fi

# the cuda binaries run the CPU backends asked for by name, with build/kipp's very text
want=$("$BUILD/kipp" -m "$M" --backend cpu --greedy -n 12 -p "Hello" --no-stats 2>/dev/null)
for b in kipp-cuda-generic kipp-cuda-spark; do
    got=$("$BUILD/$b" -m "$M" --backend cpu --greedy -n 12 -p "Hello" --no-stats 2>/dev/null)
    if [ -n "$want" ] && [ "$got" = "$want" ]; then ok "$b --backend cpu == kipp --backend cpu"
    else bad "$b --backend cpu printed '$got', kipp printed '$want'"; fi
done

# the ordinary binaries know the name and say how to get it
expect_fatal "kipp --backend cuda" "build with \`make cuda-generic\`" \
    "$BUILD/kipp" --backend cuda -m "$M" -p hi -n 1
expect_fatal "kipp_test --cuda-operators" "this binary has no cuda backend" \
    "$BUILD/kipp_test" --cuda-operators

# production cuda binaries carry no KV fault hook (only the fault build does)
for b in kipp-cuda-generic kipp-server-cuda kipp-cuda-spark kipp_test_cuda; do
    if strings -a "$BUILD/$b" | grep -q KIPP_FAULT; then bad "$b contains the KIPP_FAULT hook"
    else ok "$b has no fault hook"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
