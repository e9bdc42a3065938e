#!/usr/bin/env python3
"""sampler_bench.py — milliseconds per sampled token on a 151,936-entry row: Kipp's sampler
at this tree against the same benchmark built on a baseline commit's library, A B A B in
one run; writes a JSON record (default bench/results/sampler-<cpu class>.json).

bench/sampler_bench.c uses only the public sampler API and src/core/vmath.h, so it builds
against the baseline's libkipp.a unchanged: the baseline's tree is checked out in a
temporary git worktree and its library built there (`make build/libkipp.a`, a minute or
two). Configs: the OpenAI defaults (temperature 1, no truncation: the server's default),
Kipp's CLI defaults (0.8, top-k 40, top-p 0.95, min-p 0.05), top-p 0.9, greedy, and the
log-probabilities of a top_logprobs 20 request. The ratio is baseline / this tree (above 1:
this tree is faster). Not a test: it never fails on the figures. Protocol: bench/README.md.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/sampler_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "bench", "sampler_bench.c")
LIBS = ["-lm", "-lutf8proc", "-ljansson", "-pthread"]


def build(tree: str, out: str) -> None:
    """libkipp.a of tree (make), then the benchmark source of this tree against it."""
    subprocess.run(["make", "--no-print-directory", "-j2", "build/libkipp.a"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cc", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-I", os.path.join(tree, "include"),
                    "-I", os.path.join(tree, "src"), SRC, os.path.join(tree, "build", "libkipp.a"), *LIBS,
                    "-o", out], check=True)


def run(binary: str, n_vocab: int, seconds: float) -> dict:
    p = subprocess.run([binary, str(n_vocab), str(seconds)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["ms_per_token"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="9db1fa1", help="commit to compare with (default 9db1fa1: "
                    "the sampler before its SIMD passes)")
    ap.add_argument("--n-vocab", type=int, default=151936)
    ap.add_argument("--seconds", type=float, default=1.0, help="per config and run")
    ap.add_argument("--rounds", type=int, default=3, help="A B rounds")
    ap.add_argument("--output", default=None, help="default bench/results/sampler-<cpu>.json")
    args = ap.parse_args()
    if args.n_vocab < 64 or args.seconds <= 0 or args.rounds < 1:
        ap.error("--n-vocab >= 64, --seconds > 0 and --rounds >= 1")
    if subprocess.run(["git", "cat-file", "-e", args.baseline + "^{commit}"], cwd=ROOT).returncode != 0:
        ap.error(f"--baseline {args.baseline}: not a commit of this repository")
    tmp = tempfile.mkdtemp(prefix="kipp-samplerbench-")
    wt = os.path.join(tmp, "base")
    try:
        subprocess.run(["git", "worktree", "add", "--detach", "-q", wt, args.baseline], cwd=ROOT, check=True)
        cur_bin, base_bin = os.path.join(tmp, "cur"), os.path.join(tmp, "base-bench")
        print(f"building this tree's and {args.baseline}'s libkipp.a ...", file=sys.stderr)
        build(ROOT, cur_bin)
        build(wt, base_bin)
        runs = {"this_tree": [], "baseline": []}
        for r in range(args.rounds):
            for name, b in (("this_tree", cur_bin), ("baseline", base_bin)):
                runs[name].append(run(b, args.n_vocab, args.seconds))
                print(f"round {r + 1} {name}: {runs[name][-1]}", file=sys.stderr)
        configs = list(runs["this_tree"][0])
        med = {k: {c: statistics.median(x[c] for x in v) for c in configs} for k, v in runs.items()}
        ratio = {c: med["baseline"][c] / med["this_tree"][c] for c in configs}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    prov = benchlib.provenance()
    rec = {"bench": "sampler", "provenance": prov, "baseline_commit": args.baseline,
           "n_vocab": args.n_vocab, "seconds_per_config": args.seconds, "rounds": args.rounds,
           "order": "A B A B (this tree, baseline), median of the rounds; each run's figure is the median of 7 batches",
           "ms_per_token": med, "speedup_baseline_over_this_tree": ratio, "runs": runs}
    flags = set(prov["hardware"].get("flags") or [])
    cls = "xeon-amx" if "amx_tile" in flags else ("avx512" if "avx512f" in flags else "avx2")
    out = args.output or os.path.join(ROOT, "bench", "results", f"sampler-{cls}.json")
    benchlib.write_record_file(out, json.dumps(rec, indent=2))
    for c in configs:
        print(f"{c:16s} this tree {med['this_tree'][c]:.3f} ms, {args.baseline} {med['baseline'][c]:.3f} ms "
              f"({ratio[c]:.2f}x)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
