#!/usr/bin/env bash
# run_tsan.sh — what `make test-tsan` runs: the threaded code under ThreadSanitizer. The
# binaries are built with -fsanitize=thread into build/tsan (make TSAN=1 BUILD=build/tsan);
# the stages are the ones that run more than one thread:
#   - the unit suites (thread pool, scheduler, server pieces);
#   - the scheduler gate (the engine thread beside the callers: continuous batching, prefix
#     cache, preemption, cancellation) on tiny-tied bf16, kipp-tiny bf16 and random-tiny q8_0,
#     as tests/model/run_cpu_model.sh runs it;
#   - the cpu backend's thread pool inside a forward pass: the multi-logit gate (the default
#     thread count, 2 on a 2-core machine) and cpu vs cpu-ref on random-tiny q8_0 (every ISA
#     level, 1 and 2 threads);
#   - the HTTP server tests (tests/server, pytest) against build/tsan/kipp-server: libmicrohttpd's
#     connection threads, the scheduler, the watchdog, drain and disconnects. Every server's
#     stderr is kept in $KIPP_SERVER_TEST_LOGS and any ThreadSanitizer report in it is a failure
#     even when the test that started the server passed. TSAN_SERVER_TESTS selects the pytest
#     arguments. The default, "subset", runs the files where threads meet: concurrency,
#     disconnect, drain, overload, prefix cache, half-close (measured: the whole suite, 423
#     tests, ran ~2.5 tests a minute under TSan on a loaded 2-core VM, hours in all); "all"
#     runs the whole of tests/server; anything else is passed to pytest as written.
# A report stops the process at once (halt_on_error=1, exit status 66), so a race is never
# only a warning in a log. tests/tsan/suppressions.txt holds third-party noise only.
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/tsan}
export BUILD KIPP_BIN=$BUILD/kipp
. tests/lib.sh
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 report_signal_unsafe=1 second_deadlock_stack=1 history_size=4 suppressions=$PWD/tests/tsan/suppressions.txt ${TSAN_OPTIONS_EXTRA:-}"
# TSan makes everything 5-15x slower: the per-gate limit grows with it
export GATE_TIMEOUT=${GATE_TIMEOUT:-2400}
export KIPP_SANITIZE=tsan
# the server tests' client-side waits, scaled for sanitizer speed (tests/server/conftest.py)
export KIPP_TEST_TIMEOUT_SCALE=${KIPP_TEST_TIMEOUT_SCALE:-6}
K=$BUILD/kipp_test
for b in kipp_test kipp-server; do
    if [ ! -x "$BUILD/$b" ]; then
        echo "run_tsan.sh: $BUILD/$b is missing (make test-tsan builds it)" >&2
        echo "0 passed, 1 failed"
        exit 1
    fi
done
. tests/model/gate.sh

T=tests/test-vectors/tiny-tied
M=models/tiny-tied/kipp-tiny-tied-bf16.gguf
run_counted "unit suites (tsan)" "$K" --unit
gate "scheduler cpu tiny-tied bf16 (tsan)" --sched "$M" --backend cpu
gate "scheduler cpu kipp-tiny bf16 (tsan)" --sched models/kipp-tiny/kipp-tiny-bf16.gguf --backend cpu
gate "scheduler cpu random-tiny q8_0 (tsan)" --sched models/random/qwen3-tiny-q8_0.gguf --backend cpu
gate "multi-logit cpu tiny-tied bf16 (tsan)" --multilogit "$M" "$T" --backend cpu
gate "cpu vs cpu-ref random-tiny q8_0, 1 and 2 threads (tsan)" --cpu-vs-ref-shape \
    models/random/qwen3-tiny-q8_0.gguf

logs=$(mktemp -d -t kipp-tsan-server-XXXXXX)
case "${TSAN_SERVER_TESTS:-subset}" in
all) sel=() ;;
# (run_server_tests.sh always names tests/server: a subset is a -k selection of its modules)
subset) sel=(-k "test_concurrency or test_disconnect or test_drain or test_overload or test_prefix_cache or test_halfclose") ;;
*) read -r -a sel <<<"$TSAN_SERVER_TESTS" ;;
esac
KIPP_SERVER_TEST_LOGS=$logs run_counted "server over HTTP (tsan)" tests/server/run_server_tests.sh "${sel[@]}"
# a report in a server's log fails the run even when its test passed (a report at exit, or
# in a server whose test only checked that it answered)
reports=$(grep -l "WARNING: ThreadSanitizer" "$logs"/* 2>/dev/null)
if [ -n "$reports" ]; then
    for f in $reports; do
        failed=$((failed + 1))
        echo "FAIL: ThreadSanitizer report in server log $f:"
        grep -m 3 -A 12 "WARNING: ThreadSanitizer" "$f" | sed 's/^/   /'
        grep "SUMMARY: ThreadSanitizer" "$f" | sed 's/^/   /'
    done
else
    passed=$((passed + 1))
    echo "ok: no ThreadSanitizer report in the $(ls "$logs" | wc -l) server logs ($logs)"
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
