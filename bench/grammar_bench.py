#!/usr/bin/env python3
"""grammar_bench.py — what grammar-constrained decoding costs per token: the token mask
over the model's whole vocabulary against an unconstrained decode step of the same model,
in one run. Writes a JSON record (bench/results/grammar-mask-*.json).

  .venv/bin/python -m bench.grammar_bench --model models/random/qwen3-0.6b-q8_0.gguf \\
      --runs 3 --output bench/results/grammar-mask-0.6b-q8_0.json

The mask side is build/kipp-grammarbench: every document the schema corpus
(tests/unit/data/schema_corpus, 40 schemas) accepts is tokenized with the model's tokenizer
and replayed token by token through a fresh matcher, each mask timed, and every document
token must be allowed by its mask (else the record is refused). Fresh matchers and short
documents leave the mask cache little to reuse, so the mean is a pessimistic figure for a
long generation. The decode side is `kipp --greedy -n DECODE --stats-json` at --threads on
the same model: milliseconds per decoded token at batch 1. Runs alternate (mask, decode,
mask, ...). Target: mean mask time <= 10 % of a decode step. Not a test: it never fails on
speed. Protocol: bench/README.md.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/grammar_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench import benchlib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = 0.10
PROMPT = "Write a JSON object that describes a person: name, age, email and a list of pets."


def mask_run(a) -> dict:
    r = subprocess.run([a.grammarbench, a.model, a.corpus], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"grammar_bench: {a.grammarbench} failed ({r.returncode}): {r.stderr[-800:]}")
    return json.loads(r.stdout)


def decode_run(a, tmp: str) -> float:
    stats = os.path.join(tmp, "stats.json")
    cmd = [a.binary, "-m", a.model, "--backend", a.backend, "-t", str(a.threads), "--greedy", "--ignore-eos",
           "-n", str(a.decode), "--stats-json", stats, "-p", PROMPT]
    r = benchlib.run_measured(cmd, timeout=1800)
    if r["rc"] != 0:
        sys.exit(f"grammar_bench: {' '.join(cmd)} failed ({r['rc']}): {r['stderr'][-500:]}")
    with open(stats) as f:
        d = json.load(f)["decode"]
    return d["ms"] / d["tokens"]


def main() -> int:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Qwen3 GGUF file (its vocabulary and its decode step)")
    ap.add_argument("--binary", default="build/kipp", help="kipp CLI (default build/kipp)")
    ap.add_argument("--grammarbench", default="build/kipp-grammarbench",
                    help="mask bench binary (default build/kipp-grammarbench; make build/kipp-grammarbench)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests/unit/data/schema_corpus"))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=usable)
    ap.add_argument("--decode", type=benchlib.positive("--decode"), default=64, help="decoded tokens per run")
    ap.add_argument("--runs", type=benchlib.positive("--runs"), default=3)
    ap.add_argument("--output", metavar="FILE", help="write the JSON record here (default: stdout)")
    ap.add_argument("--no-hash", action="store_true", help="do not sha256 the model (trials only)")
    a = ap.parse_args()
    for path, what in ((a.model, "--model"), (a.corpus, "--corpus")):
        if not os.path.exists(path):
            ap.error(f"{what} {path}: no such file or directory")
    for b, what in ((a.binary, "--binary"), (a.grammarbench, "--grammarbench")):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            ap.error(f"{what} {b}: not an executable file (build it)")
    rec = {
        "harness": "bench/grammar_bench.py",
        "argv": sys.argv[1:],
        "provenance": benchlib.provenance(a.grammarbench),
        "build": benchlib.build_info(a.binary),
        "model": benchlib.model_manifest(a.model, hash_file=not a.no_hash),
        "threads": a.threads,
        "decode_tokens": a.decode,
        "load_average": {"before": list(os.getloadavg())},
        "warnings": [],
    }
    if rec["load_average"]["before"][0] > 0.5:
        rec["warnings"].append(f"1-minute load average {rec['load_average']['before'][0]:.2f} > 0.5 at start")
    masks, steps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        decode_run(a, tmp)  # warm-up: page the model in
        for i in range(a.runs):
            masks.append(mask_run(a))
            steps.append(decode_run(a, tmp))
            print(f"run {i + 1}/{a.runs}: mask mean {masks[-1]['mask_ms']['mean']:.3f} ms, "
                  f"decode step {steps[-1]:.2f} ms", file=sys.stderr)
    means = [m["mask_ms"]["mean"] for m in masks]
    med = sorted(range(a.runs), key=lambda i: means[i])[a.runs // 2]
    step = statistics.median(steps)
    m = masks[med]
    rec["mask"] = m
    rec["mask_mean_ms_runs"] = means
    rec["decode_step_ms_runs"] = steps
    rec["decode_step_ms"] = step
    rec["dispersion"] = {"mask_mean": benchlib.dispersion(means), "decode_step": benchlib.dispersion(steps)}
    rec["ratio"] = {"mean": m["mask_ms"]["mean"] / step, "p50": m["mask_ms"]["p50"] / step,
                    "p99": m["mask_ms"]["p99"] / step, "max": m["mask_ms"]["max"] / step}
    rec["cache_hit_rate"] = m["cache_hits"] / m["masks"] if m["masks"] else 0.0
    rec["target"] = {"mean_ratio_at_most": TARGET, "met": rec["ratio"]["mean"] <= TARGET}
    rec["load_average"]["after"] = list(os.getloadavg())
    text = json.dumps(rec, indent=1)
    if a.output:
        benchlib.write_record_file(a.output, text)
        print(f"wrote {a.output}", file=sys.stderr)
    else:
        print(text)
    print(f"mask mean {m['mask_ms']['mean']:.3f} ms (p99 {m['mask_ms']['p99']:.3f}, max {m['mask_ms']['max']:.3f}) "
          f"vs decode step {step:.2f} ms: {100 * rec['ratio']['mean']:.2f} %", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
