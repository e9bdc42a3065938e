#!/usr/bin/env bash
# run_fuzz.sh NAME [SECONDS] — one fuzzer's stage: replay its committed corpus
# (tests/fuzz/corpus/NAME; fuzz_api's: anthropic, responses, ollama) through
# $BUILD/fuzz_NAME, then, unless SECONDS is 0, a short run of SECONDS (default FUZZ_SECONDS,
# else 8 in the test tier (CI) and 60 in the full tier) starting from it in a scratch
# directory (the committed corpus is never written).
# run_fuzz.sh --replay NAME... — replay each named corpus only (make check).
# Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
. tests/lib.sh
# A fuzzer's corpus directories: its own name's, but fuzz_api's are the three protocols' it
# serves.
corpora() {
    case $1 in
    api) echo tests/fuzz/corpus/anthropic tests/fuzz/corpus/responses tests/fuzz/corpus/ollama ;;
    *) echo "tests/fuzz/corpus/$1" ;;
    esac
}
if [ "${1:-}" = --replay ]; then
    shift
    for name in "$@"; do
        # shellcheck disable=SC2046 # the directories are words
        run_counted "$name corpus replay" "$BUILD/fuzz_$name" -runs=0 $(corpora "$name")
    done
else
    name=${1:?usage: run_fuzz.sh NAME [SECONDS] | run_fuzz.sh --replay NAME...}
    tier_secs=4
    [ "${TIER:-}" = full ] && tier_secs=60
    secs=${2:-${FUZZ_SECONDS:-$tier_secs}}
    # shellcheck disable=SC2046
    run_counted "$name corpus replay" "$BUILD/fuzz_$name" -runs=0 $(corpora "$name")
    if [ "$secs" != 0 ]; then
        dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
        # shellcheck disable=SC2046
        run_counted "$name fuzz (${secs}s)" "$BUILD/fuzz_$name" -max_total_time="$secs" "$dir" \
            $(corpora "$name")
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
