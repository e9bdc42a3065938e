#!/usr/bin/env python3
"""ab_bench.py — this tree's kipp against a baseline commit's, side by side on the same machine:
prefill and decode speed of the cpu records' configurations (bench/cpu_records.sh: a 512-token
prompt, then N decode steps, 2 threads), the two binaries alternated A B B A so a drift of the
machine's bandwidth falls on both, and each figure's ratio is the median of the rounds' ratios. For a change that must keep the speed of the old code (the
op-level backend interface, issue 32: every cpu-*.json figure at >= 0.97x of the old).

The baseline's tree is checked out in a temporary git worktree and its `build/kipp` built
there (`make build/kipp`, a minute or two); each run is one `kipp` process, measured exactly
as tools/bench.py measures one (its Kipp class). --isa LEVEL runs both at that kernel level
(KIPP_CPU_ISA), so the AVX2 records' kernels can be compared on an AVX-512 machine too.

The record (default bench/results/ab-<cpu class>-<baseline>.json) holds provenance, both
commits, every run, the medians, and per model the ratio this tree / baseline of prefill and
decode tok/s with `holds` = ratio >= --floor (0.97). --vs-plain compares this tree with
itself under KIPP_PLAIN_OPS=1 instead (the driver then skips the backend's fused path), so
the ratio is what the fused path is worth. Exit status 0 when every ratio holds,
1 when one does not (the record is written either way), 2 on a usage error.

  .venv/bin/python -m bench.ab_bench --baseline 51ca87b \\
      --model models/random/qwen3-0.6b-q8_0.gguf --model models/random/qwen3-0.6b-bf16.gguf
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/ab_bench.py
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
from tools import bench as kbench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kipp_for(binary: str, model: str, a, manifest: dict) -> kbench.Kipp:
    ns = argparse.Namespace(binary=binary, model=model, prompt=None, prompt_tokens=a.prompt_tokens,
                            decode=a.decode_for(model), threads=a.threads, backend="cpu", kv_type=None,
                            ctx_size=None, timeout=a.timeout)
    return kbench.Kipp(ns, manifest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--baseline", help="commit to compare with")
    g.add_argument("--vs-plain", action="store_true",
                   help="no baseline commit: this tree's kipp against itself with KIPP_PLAIN_OPS=1 "
                        "(what the cpu backend's fused path is worth; ratio fused / plain)")
    ap.add_argument("--model", action="append", required=True, help="GGUF file (repeatable)")
    ap.add_argument("--prompt-tokens", type=benchlib.positive("--prompt-tokens"), default=512)
    ap.add_argument("--decode", type=benchlib.positive("--decode"), default=128,
                    help="decode steps (default 128; a model whose name has '4b' takes --decode-4b)")
    ap.add_argument("--decode-4b", type=benchlib.positive("--decode-4b"), default=64)
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=2)
    ap.add_argument("--rounds", type=benchlib.positive("--rounds"), default=4,
                    help="rounds, alternately A B and B A (default 4)")
    ap.add_argument("--isa", default=None, help="cpu kernel level for both (KIPP_CPU_ISA); default auto")
    ap.add_argument("--floor", type=float, default=0.97, help="the ratio each figure must hold (0.97)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--output", default=None)
    a = ap.parse_args(argv)
    a.decode_for = lambda m: a.decode_4b if "4b" in os.path.basename(m) else a.decode
    for m in a.model:
        if not os.path.isfile(m):
            ap.error(f"--model {m}: no such file (make random-model SHAPE=... TYPE=... makes the records' files)")
    if a.baseline and subprocess.run(["git", "cat-file", "-e", a.baseline + "^{commit}"], cwd=ROOT).returncode != 0:
        ap.error(f"--baseline {a.baseline}: not a commit of this repository")
    base_commit = subprocess.run(["git", "rev-parse", a.baseline or "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.strip()
    if a.isa:
        os.environ["KIPP_CPU_ISA"] = a.isa
    tmp = tempfile.mkdtemp(prefix="kipp-abbench-")
    wt = os.path.join(tmp, "base")
    models, failed = {}, False
    try:
        print(f"building this tree's{'' if a.vs_plain else ' and ' + a.baseline + chr(39) + 's'} build/kipp ...",
              file=sys.stderr)
        subprocess.run(["make", "-s", "-j2", "build/kipp"], cwd=ROOT, check=True)
        cur = os.path.join(tmp, "kipp-this-tree")  # a copy: a rebuild meanwhile does not change it
        shutil.copy2(os.path.join(ROOT, "build", "kipp"), cur)
        if a.vs_plain:
            bins = {"this_tree": cur, "baseline": cur}
        else:
            subprocess.run(["git", "worktree", "add", "--detach", "-q", wt, base_commit], cwd=ROOT, check=True)
            subprocess.run(["make", "-s", "-j2", "build/kipp"], cwd=wt, check=True, stdout=subprocess.DEVNULL)
            bins = {"this_tree": cur, "baseline": os.path.join(wt, "build", "kipp")}
        plain = {"this_tree": None, "baseline": "1" if a.vs_plain else None}

        def run_as(name: str, k: kbench.Kipp) -> dict:
            if plain[name]:
                os.environ["KIPP_PLAIN_OPS"] = plain[name]
            else:
                os.environ.pop("KIPP_PLAIN_OPS", None)
            return k.run_once()
        for m in a.model:
            manifest = benchlib.model_manifest(m, hash_file=False)
            ks = {name: kipp_for(b, m, a, manifest) for name, b in bins.items()}
            for name, k in ks.items():
                run_as(name, k)  # warm-up: the file in the page cache for both
            runs = {name: [] for name in ks}
            for r in range(a.rounds):
                order = list(ks.items()) if r % 2 == 0 else list(ks.items())[::-1]  # A B, then B A
                for name, k in order:
                    runs[name].append(run_as(name, k))
                    x = runs[name][-1]
                    print(f"{os.path.basename(m)} round {r + 1} {name}: prefill {x['prefill_tok_s']:.1f} "
                          f"decode {x['decode_tok_s']:.2f} tok/s", file=sys.stderr)
            med = {name: {c: statistics.median(x[c] for x in v) for c in ("prefill_tok_s", "decode_tok_s")}
                   for name, v in runs.items()}
            # the median of the rounds' ratios: each round's pair ran back to back, so a drift of
            # the machine's bandwidth between rounds cancels (the ratio of the medians is kept too)
            ratio = {c: statistics.median(x[c] / y[c] for x, y in zip(runs["this_tree"], runs["baseline"]))
                     for c in ("prefill_tok_s", "decode_tok_s")}
            ratio_of_medians = {c: med["this_tree"][c] / med["baseline"][c] for c in ("prefill_tok_s", "decode_tok_s")}
            holds = {c: v >= a.floor for c, v in ratio.items()}
            failed |= not all(holds.values())
            models[os.path.basename(m)] = {
                "model": {k: manifest[k] for k in ("path", "file_bytes", "architecture", "tensor_types")
                          if k in manifest},
                "prompt_tokens": a.prompt_tokens, "decode": a.decode_for(m), "median": med,
                "ratio_this_over_baseline": ratio, "ratio_of_medians": ratio_of_medians, "holds": holds,
                "isa_used": sorted({x.get("isa") or "?" for v in runs.values() for x in v}),
                "runs": {name: [{c: x[c] for c in ("prefill_tok_s", "decode_tok_s", "isa")} for x in v]
                         for name, v in runs.items()}}
    finally:
        if os.path.isdir(wt):
            subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    prov = benchlib.provenance(os.path.join(ROOT, "build", "kipp"), "cpu")
    cls = benchlib.cpu_class(prov)
    rec = {"bench": "this tree against a baseline commit, side by side (A B, B A rounds)",
           "harness": "bench/ab_bench.py", "argv": argv if argv is not None else sys.argv[1:],
           "provenance": prov, "cpu_class": cls,
           "baseline": "this tree under KIPP_PLAIN_OPS=1" if a.vs_plain else base_commit,
           "isa": a.isa or "auto", "threads": a.threads, "rounds": a.rounds, "floor": a.floor,
           "order": "per model: one warm-up run each, then rounds alternately (this tree, baseline) and "
                    "(baseline, this tree); ratio = the median of the rounds' ratios",
           "models": models, "all_hold": not failed}
    tag = f"-{a.isa}" if a.isa else ""
    what = "plain" if a.vs_plain else base_commit[:7]
    out = a.output or os.path.join(ROOT, "bench", "results", f"ab-{cls}{tag}-{what}.json")
    benchlib.write_record_file(out, json.dumps(rec, indent=2) + "\n")
    for name, r in models.items():
        print(f"{name:34s} prefill {r['ratio_this_over_baseline']['prefill_tok_s']:.3f}x  "
              f"decode {r['ratio_this_over_baseline']['decode_tok_s']:.3f}x  "
              f"{'holds' if all(r['holds'].values()) else 'BELOW ' + str(a.floor)}")
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
