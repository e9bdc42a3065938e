#!/usr/bin/env bash
# run_tests.sh — Kipp's test runner (tests/stages.py) over the stage list tests/stages.txt:
# `make test` runs the test tier (what CI runs), `make check` the check tier, `make
# test-full` the full tier, `make test-sanitize` the test tier with BUILD=build/san and
# KIPP_SANITIZE=1 (the stages that rebuild the tree with default flags are left out there).
#   tests/run_tests.sh [--tier check|test|full] [--list] [--only PATTERN] [--skip PATTERN] [-j N]
# Ends with "N passed, N failed"; exits non-zero on any failure. --help says more.
set -u
cd "$(dirname "$0")/.."
extra=()
[ -n "${KIPP_SANITIZE:-}" ] && extra+=(--skip tag:rebuild)
exec python3 tests/stages.py "${extra[@]}" "$@"
