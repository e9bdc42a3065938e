#!/usr/bin/env python3
"""kv_bench.py — KV cache memory of the paged block pool under a mixed serving workload,
for block sizes 8, 16 and 32; writes a JSON record (default bench/results/kv-memory.json).

The workload runs in build/kipp-kvbench (bench/kv_bench.c): shared system prompts forked by
most requests, fresh requests, parallel-sampling branches, one decode token per live
request per step, speculative verification that rolls back rejected drafts, and frees when
requests finish. It is seeded and identical for every block size (the pool never fills).
From the pool's own accounting, sampled every 10 steps after a warm-up, it records:

- bytes per token: the pool's fixed K+V bytes per stored token, and the effective bytes
  per logical token (bytes of used blocks / sum of sequence lengths; below the fixed
  figure when forks share prefixes);
- utilization: filled slots / slots of used blocks;
- internal fragmentation: unused slots in partly filled blocks, absolute and as a fraction
  of used slots (external fragmentation is zero by construction: any free block serves
  any sequence);
- the contiguous alternatives: one n_ctx-sized cache per sequence, and an exact-length
  cache per sequence without sharing.

Not a test: it never fails on the figures. Protocol: bench/README.md.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/kv_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import subprocess
import sys

from bench import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary: str, block_size: int, seed: int, steps: int) -> dict:
    out = subprocess.run([binary, str(block_size), str(seed), str(steps)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def analyse(rec: dict, warmup_steps: int, n_ctx: int) -> dict:
    bs = rec["block_size"]
    bpt = rec["n_bytes_per_token"]
    samples = [s for s in rec["samples"] if s["step"] > warmup_steps]
    util, frag_slots, frag_frac, eff_bpt, share, vs_ctx, vs_exact = [], [], [], [], [], [], []
    for s in samples:
        slots = s["n_blocks_used"] * bs
        util.append(s["n_slots_filled"] / slots)
        frag_slots.append(slots - s["n_slots_filled"])
        frag_frac.append((slots - s["n_slots_filled"]) / slots)
        eff_bpt.append(s["n_bytes_used"] / s["n_tokens"])
        share.append(s["n_tokens"] / s["n_slots_filled"])
        vs_ctx.append(s["n_seqs"] * n_ctx * bpt / s["n_bytes_used"])
        vs_exact.append(s["n_tokens"] * bpt / s["n_bytes_used"])
    peak = max(samples, key=lambda s: s["n_bytes_used"])
    return {
        "block_size": bs,
        "n_blocks": rec["n_blocks"],
        "bytes_per_token_stored": bpt,
        "bytes_per_block": rec["n_bytes_per_block"],
        "pool_bytes": rec["n_bytes_total"],
        "events": rec["events"],
        "effective_bytes_per_logical_token": benchlib.summary(eff_bpt),
        "utilization": benchlib.summary(util),
        "internal_fragmentation_slots": benchlib.summary(frag_slots),
        "internal_fragmentation_fraction": benchlib.summary(frag_frac),
        "external_fragmentation_slots": 0,
        "logical_tokens_per_stored_slot": benchlib.summary(share),
        "contiguous_n_ctx_bytes_over_paged": benchlib.summary(vs_ctx),
        "contiguous_exact_bytes_over_paged": benchlib.summary(vs_exact),
        "peak": peak,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="build/kipp-kvbench")
    ap.add_argument("--block-sizes", default="8,16,32")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--warmup-steps", type=int, default=500)
    ap.add_argument("--n-ctx", type=int, default=4096,
                    help="context size of the contiguous per-sequence baseline")
    ap.add_argument("--output", default="bench/results/kv-memory.json")
    args = ap.parse_args()
    os.chdir(ROOT)
    if not os.path.exists(args.binary):
        print(f"{args.binary} is missing: make {args.binary}", file=sys.stderr)
        return 1

    seeds = [int(x) for x in args.seeds.split(",")]
    results = {}
    for bs in [int(x) for x in args.block_sizes.split(",")]:
        per_seed = [analyse(run(args.binary, bs, seed, args.steps), args.warmup_steps, args.n_ctx)
                    for seed in seeds]
        if any(r["events"]["kv_full"] for r in per_seed):
            print(f"block size {bs}: the pool filled up; the workload is no longer identical "
                  "across block sizes", file=sys.stderr)
            return 1
        results[str(bs)] = {"seeds": dict(zip(map(str, seeds), per_seed))}
        for key in ("effective_bytes_per_logical_token", "utilization",
                    "internal_fragmentation_fraction", "internal_fragmentation_slots"):
            results[str(bs)][key + "_median_over_seeds"] = benchlib.summary(
                [r[key]["median"] for r in per_seed])

    rec = {
        "benchmark": "KV cache memory (paged block pool)",
        "provenance": benchlib.provenance(args.binary),
        "settings": {"block_sizes": args.block_sizes, "seeds": seeds, "steps": args.steps,
                     "warmup_steps": args.warmup_steps, "sample_every_steps": 10,
                     "contiguous_baseline_n_ctx": args.n_ctx,
                     "geometry": "tiny-untied: 3 layers, kv_dim 64, f32 (1536 bytes per token)"},
        "workload": ("4 shared system prompts (37/150/411/1000 tokens); per step an arrival with "
                     "p=0.35 (60% fork a system prompt + 5-300 token user turn, 40% fresh "
                     "10-800 token prompt; 15% of arrivals fork a parallel branch); each live "
                     "request decodes 1 token, or with p=0.1 verifies 4 drafts and rolls back "
                     "0-4; requests are freed after 10-400 output tokens"),
        "results": results,
    }
    benchlib.write_record_file(args.output, json.dumps(rec, indent=2))
    for bs, r in results.items():
        print(f"block {bs:>2}: utilization {r['utilization_median_over_seeds']['median']:.4f}, "
              f"internal fragmentation {r['internal_fragmentation_fraction_median_over_seeds']['median']:.4f} "
              f"({r['internal_fragmentation_slots_median_over_seeds']['median']:.0f} slots), "
              f"bytes/logical token {r['effective_bytes_per_logical_token_median_over_seeds']['median']:.1f}")
    print(f"record: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
