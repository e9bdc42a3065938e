#!/usr/bin/env bash
# run_tests.sh — what `make test` runs (and `make test-sanitize` with BUILD=build/san):
# native unit suites, the GGUF fuzz corpus plus a short fuzz run, the Python tooling tests,
# docs drift, CLI bad-input tests, and the model gates on the tiny checkpoints.
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export KIPP_BIN=$BUILD/kipp
. tests/lib.sh

run_counted "unit suites" "$BUILD/kipp_test" --unit
run_counted "gguf corpus replay" "$BUILD/fuzz_gguf" -runs=0 tests/fuzz/corpus/gguf
fuzz_dir=$(mktemp -d)
run_counted "gguf fuzz (${FUZZ_SECONDS:-20}s)" "$BUILD/fuzz_gguf" -max_total_time="${FUZZ_SECONDS:-20}" \
    "$fuzz_dir" tests/fuzz/corpus/gguf
rm -rf "$fuzz_dir"
run_counted "tooling tests" .venv/bin/python -m pytest -q -p no:cacheprovider tests/tools
run_counted "docs drift" scripts/docs.sh check
run_counted "cli bad input" tests/cli/test_cli.sh
for t in tiny-tied tiny-untied; do
    run_counted "model gates $t" tests/model/run_cpu_model.sh "$t"
done
# the mutation stage rebuilds copies of the tree with default flags; once is enough
[ -n "${KIPP_SANITIZE:-}" ] || run_counted "mutation (gates catch planted bugs)" tests/model/mutation.sh

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
