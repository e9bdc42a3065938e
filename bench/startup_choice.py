"""Would a start-up micro-benchmark choose kernels better than the committed table?

Issue 31 asks for the kernel choice to come from committed per-class measurements or from a
micro-benchmark run at start-up, "whichever proves more reliable: measure both". This runs
what a start-up benchmark could afford -- `kipp-kernbench` with a short time slice per
kernel and a small weight pool (a loading model cannot spend seconds or half a GiB on it) --
several times, takes each run's fastest kernel per weight type and token count as that
run's pick, and scores every pick, and the auto table's own choice, by a long reference run
of the same benchmark (the committed bench/results/kernels-CLASS.json made on this CPU
class, or a --reference record): the loss is 1 - (reference GFLOP/s of the pick) /
(reference GFLOP/s of the fastest kernel). Writes a JSON record.

  .venv/bin/python -m bench.startup_choice --reference bench/results/kernels-epyc-avx512bf16.json \\
      --runs 5 --seconds 0.02 --pool-mib 64 --output bench/results/startup-choice-CLASS.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def best_by_count(results: list[dict]) -> dict[tuple[str, int], tuple[str, float]]:
    """(type, tok) -> ("isa:variant", GFLOP/s) of the fastest kernel in one benchmark run."""
    best: dict[tuple[str, int], tuple[str, float]] = {}
    for r in results:
        key = (r["type"], r["tok"])
        if key not in best or r["gflops"] > best[key][1]:
            best[key] = (f'{r["isa"]}:{r["variant"]}', r["gflops"])
    return best


def table_kernel(choice: dict, tok: int) -> str:
    """The auto table's "isa:variant" for tok tokens (the last range starting at or below it)."""
    start = max(int(m) for m in choice["from"] if int(m) <= tok)
    return choice["from"][str(start)]


def losses(picks: dict[tuple[str, int], str], ref: list[dict]) -> dict:
    """Scores picks ((type, tok) -> "isa:variant") by the reference run."""
    by = {(r["type"], r["tok"], f'{r["isa"]}:{r["variant"]}'): r["gflops"] for r in ref}
    top = best_by_count(ref)
    out = []
    for (typ, tok), k in sorted(picks.items()):
        if (typ, tok) not in top or (typ, tok, k) not in by:
            continue  # a kernel the reference did not time (a level newer than the record)
        out.append({"type": typ, "tok": tok, "pick": k, "loss": round(1 - by[(typ, tok, k)] / top[(typ, tok)][1], 4)})
    ls = [o["loss"] for o in out]
    return {
        "cells": len(out),
        "mean_loss": round(statistics.fmean(ls), 4) if ls else None,
        "worst_loss": max(ls) if ls else None,
        "over_10_percent": sum(1 for x in ls if x > 0.10),
        "worst": sorted(out, key=lambda o: -o["loss"])[:5],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", required=True, help="a kernels-CLASS.json record made on this CPU class")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.02, help="kipp-kernbench --seconds of each short run")
    ap.add_argument("--pool-mib", type=int, default=64, help="kipp-kernbench --pool-mib of each short run")
    ap.add_argument("--kernbench", default=str(ROOT / "build/kipp-kernbench"))
    ap.add_argument("--output", required=True)
    a = ap.parse_args(argv)
    ref = json.loads(Path(a.reference).read_text())
    if ref.get("kind") != "kernels" and "results" not in ref:
        print(f"startup_choice: {a.reference} is not a kipp-kernbench record", file=sys.stderr)
        return 2
    if not os.access(a.kernbench, os.X_OK):
        print(f"startup_choice: {a.kernbench} missing (make build/kipp-kernbench)", file=sys.stderr)
        return 2
    table = {(t, r["tok"]): table_kernel(c, r["tok"]) for t, c in ref["auto"].items() for r in ref["results"]
             if r["type"] == t}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            path = Path(tmp) / f"short{i}.json"
            t0 = time.monotonic()
            p = subprocess.run([a.kernbench, "--seconds", str(a.seconds), "--pool-mib", str(a.pool_mib),
                                "--json", str(path)], capture_output=True, text=True)
            wall = time.monotonic() - t0
            if p.returncode != 0:
                print(f"startup_choice: kipp-kernbench failed: {p.stderr.strip()[-500:]}", file=sys.stderr)
                return 1
            short = json.loads(path.read_text())
            picks = {key: k for key, (k, _) in best_by_count(short["results"]).items()}
            n_types = len({r["type"] for r in short["results"]})
            # a start-up benchmark would time only the loaded model's types (2-3 for a K-quant mix)
            runs.append({"wall_s": round(wall, 2), "types": n_types, "wall_s_per_type": round(wall / n_types, 2),
                         **losses(picks, ref["results"])})
            print(f"run {i + 1}/{a.runs}: {wall:.1f} s, mean loss {runs[-1]['mean_loss']}, "
                  f"worst {runs[-1]['worst_loss']}, {runs[-1]['over_10_percent']} picks >10 % slower", flush=True)
    record = {
        "benchmark": "start-up micro-benchmark vs the committed kernel table",
        "harness": "bench/startup_choice.py",
        "argv": sys.argv[1:] if argv is None else argv,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "reference": {"path": os.path.relpath(a.reference, ROOT), "cpu": ref.get("cpu"), "commit": ref.get("commit"),
                      "seconds": ref.get("seconds")},
        "short_runs": {"seconds": a.seconds, "pool_mib": a.pool_mib, "runs": runs},
        "table": losses(table, ref["results"]),
    }
    Path(a.output).write_text(json.dumps(record, indent=1) + "\n")
    t = record["table"]
    print(f"table: mean loss {t['mean_loss']}, worst {t['worst_loss']}, {t['over_10_percent']} choices >10 % slower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
