#!/usr/bin/env bash
# check.sh — what `make check` runs: the check tier of tests/stages.txt, the fast tier for the
# edit loop (a few minutes on 2 cores from a built tree): the unit suites, every fuzz corpus
# replayed once (no timed fuzzing), the model gates on the tiny bf16 checkpoints
# (tests/model/check_gates.sh) and a kipp-server smoke test (tests/server/smoke.sh).
# `make test` is the CI gate. Ends with "N passed, N failed"; exits non-zero on any failure.
exec "$(dirname "$0")/run_tests.sh" --tier check "$@"
