#!/usr/bin/env bash
# neon_check.sh — the arm64 NEON kernel file must compile (warning-free) with Debian's
# aarch64 cross compiler; it cannot run here. Prints the counted summary run_tests.sh reads.
cd "$(dirname "$0")/.."
if make -s --no-print-directory neon-check BUILD="${BUILD:-build}"; then
    echo "1 passed, 0 failed"
else
    echo "0 passed, 1 failed"
    exit 1
fi
