#!/usr/bin/env bash
# check_gates.sh — the check tier's model gates (make check): on the bf16 files of
# tiny-untied and tiny-tied, golden, phase-2, multi-logit, paged and pooled KV on cpu-ref and
# on cpu, and cpu against cpu-ref (every ISA level, 1 and 2 threads). The gates
# tests/model/gate.sh lists as pending run but are not counted.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
K=$BUILD/kipp_test
. tests/lib.sh
. tests/model/gate.sh
# check_gates.sh [NAME...]: the named tiny checkpoints (default both; the check tier runs
# one stage each, side by side)
for t in ${@:-tiny-untied tiny-tied}; do
    m=models/$t/kipp-$t-bf16.gguf v=tests/test-vectors/$t
    for b in cpu-ref cpu; do
        gate "golden $b bf16 $t" --model "$m" "$v" --backend "$b"
        gate "phase-2 $b bf16 $t" --phase2-model "$m" "$v" --backend "$b"
        gate "multi-logit $b bf16 $t" --multilogit "$m" "$v" --backend "$b"
        gate "paged KV $b bf16 $t" --paged-cpu "$m" "$v" --backend "$b"
        gate "pooled KV $b bf16 $t" --pooled-cpu "$m" "$v" --backend "$b"
    done
    gate "cpu vs cpu-ref bf16 $t" --cpu-vs-ref "$m" "$v"
done

note=
[ "$pending" -gt 0 ] && note=" ($pending pending gates not counted)"
echo "$passed passed, $failed failed$note"
[ "$failed" -eq 0 ]
