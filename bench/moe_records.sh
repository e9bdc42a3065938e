#!/usr/bin/env bash
# moe_records.sh — the Qwen3-MoE speed records (BENCHMARKS.md, issue 32): Kipp's cpu backend
# against llama.cpp (bench/peer_bench.py) on a random-weight GGUF of Qwen3-30B-A3B's real shape
# (hidden 2048, 32/4 heads of 128, 128 experts of 768, top-8, vocabulary 151,936) cut to LAYERS
# of its 48 layers (default 12: the disk and the run time; every other dimension is real), in
# Q4_K_M and Q8_0, 2 threads, a 512-token prompt then 64 decode steps (decode at depth 512), in
# one invocation per file; the record's decode GB/s counts the bytes a token really reads (the
# 8 experts it routes to, not all 128: bench/benchlib.py) against kipp-membw's read bandwidth
# measured in the same run. Then the server: 1 and 8 concurrent streaming clients on the Q4_K_M
# file (bench/server_bench.py). Run it on an idle machine from a clean checkout with a current
# build (bench/README.md). The models are made when missing: tools/make_random_model.py writes
# the bf16 file (~1.3 GB a layer), build/kipp-quantize the others (the same bytes as
# tools/quantize.py). Usage: bench/moe_records.sh [OUTDIR]
# Environment: RECORD_TAG=T names the files moe-T-30b-a3b-<L>l-<type>.json (the CPU class);
# LAYERS=N; ALLOW_NOISY=1 writes records above the dispersion limit, marked noisy; NO_SERVER=1
# skips the server records.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/results}
L=${LAYERS:-12}
tag=${RECORD_TAG:+$RECORD_TAG-}
# a run that fails (a noisy record refused) still keeps the records written before it
tmp=$(mktemp -d); trap 'mkdir -p "$out"; mv "$tmp"/moe-*.json "$out"/ 2>/dev/null; rm -rf "$tmp"' EXIT
make -s cpu server build/kipp-membw build/kipp-quantize
base=models/random/qwen3-30b-a3b-${L}l
if [ ! -f "$base-q4_k_m.gguf" ] || [ ! -f "$base-q8_0.gguf" ]; then
    [ -f "$base-bf16.gguf" ] || .venv/bin/python -m tools.make_random_model --shape 30b-a3b --layers "$L" \
        --type bf16 --output "$base-bf16.gguf"
    for q in q4_k_m q8_0; do [ -f "$base-$q.gguf" ] || build/kipp-quantize "$base-bf16.gguf" "$base-$q.gguf" "$q"; done
fi
for q in q4_k_m q8_0; do
    .venv/bin/python -m bench.peer_bench --model "$base-$q.gguf" --prompt-tokens 512 --decode 64 --threads 2 \
        --warmup 1 --runs 3 --output "$tmp/moe-${tag}30b-a3b-${L}l-$q.json" ${ALLOW_NOISY:+--allow-noisy}
done
if [ -z "${NO_SERVER:-}" ]; then
    # decode throughput, as the dense server-throughput-decode records: short prompts, long replies
    .venv/bin/python -m bench.server_bench --model "$base-q4_k_m.gguf" --threads 2 --concurrency 1,8 --runs 2 \
        --requests-per-client 2 --prompt-tokens 16 --max-tokens 128 \
        --output "$tmp/moe-server-${tag}30b-a3b-${L}l-q4_k_m.json"
fi
# (the EXIT trap moves the records into $out)
