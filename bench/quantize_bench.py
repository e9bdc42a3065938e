#!/usr/bin/env python3
"""Quantizer speed and quality: build/kipp-quantize beside llama.cpp's llama-quantize.

What it does, for a bf16 GGUF (default models/random/qwen3-0.6b-bf16.gguf) and each --types
entry (default q8_0, q4_k_m, q6_k):
  1. times build/kipp-quantize -t N (the whole process) and llama.cpp's quantizer
     (llama_model_quantize through the pinned llama-cpp-python: the code path of
     llama-quantize; only the call is timed, in its own process) on the same file with the
     same thread count, --runs times each, alternating, and keeps the medians;
  2. quality: the relative squared dequantization error, sum((deq - x)^2) / sum(x^2), of
     both outputs against the bf16 source over the same sample of rows (--rows rows of
     every 2-D weight, evenly spaced; dequantized by the PyPI gguf package), plus each
     output's tensor-type mix (both follow llama.cpp's rules, so the mixes should agree);
  3. KL-divergence (a random-weight model's logits say nothing): kipp-quantize re-makes the
     files a bench/ppl_bench.py record judged on the trained kipp-tiny (--kl-record); when
     the bytes are the same (sha256), that record's KL-divergence against llama-quantize's
     files is kipp-quantize's;
  4. the issue's targets: speed >= 1.0x llama-quantize's per type; KL-divergence no worse.
The record carries the provenance every bench record does (commit, dirty tree, binary
sha256, compiler, hardware, model manifest) and the peer's version.

Usage:
    python -m bench.quantize_bench --output bench/results/quantize-0.6b.json
        [--model F.gguf] [--types q8_0 q4_k_m q6_k] [--threads 2] [--runs 3] [--rows 16]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/quantize_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import benchlib  # noqa: E402
from tools.quantize import FTYPES  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "random", "qwen3-0.6b-bf16.gguf")
LLAMA_FTYPE = {name: ftype for name, (_, ftype) in FTYPES.items()}  # every type both tools make

# llama_model_quantize in a child process: prints the seconds the call took
PEER = r"""
import ctypes, sys, time, llama_cpp
src, dst, ftype, nth = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
llama_cpp.llama_backend_init()
p = llama_cpp.llama_model_quantize_default_params()
p.nthread = nth
p.ftype = ftype
t0 = time.perf_counter()
rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
dt = time.perf_counter() - t0
if rc != 0:
    sys.exit(f"llama_model_quantize returned {rc}")
print(f"SECONDS {dt:.6f}")
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def time_kipp(binary: str, src: str, dst: str, typ: str, threads: int) -> float:
    r = benchlib.run_measured([binary, "--no-progress", "-t", str(threads), src, dst, typ])
    if r["rc"] != 0:
        raise SystemExit(f"kipp-quantize {typ} failed (exit {r['rc']}): {r['stderr'][-2000:]}")
    return r["wall_s"]


def time_llama(src: str, dst: str, typ: str, threads: int) -> float:
    r = subprocess.run([sys.executable, "-c", PEER, src, dst, str(LLAMA_FTYPE[typ]), str(threads)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama_model_quantize {typ} failed: {r.stderr[-2000:]}")
    return float(r.stdout.split("SECONDS")[-1])


def sample_error(src: str, files: dict[str, str], rows: int) -> dict:
    """relative squared error of each file's sampled rows against src; type mixes."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    base = GGUFReader(src)
    readers = {k: GGUFReader(f) for k, f in files.items()}
    tensors = {k: {t.name: t for t in r.tensors} for k, r in readers.items()}
    num = {k: 0.0 for k in files}
    den = 0.0
    mix = {k: {} for k in files}
    for k in files:
        for t in readers[k].tensors:
            mix[k][t.tensor_type.name] = mix[k].get(t.tensor_type.name, 0) + 1
    for t in base.tensors:
        if len(t.shape) < 2:
            continue
        n_rows = t.data.shape[0]
        idx = np.unique(np.linspace(0, n_rows - 1, min(rows, n_rows)).astype(int))
        x = dequantize(t.data[idx], t.tensor_type).astype(np.float64)
        den += float((x * x).sum())
        for k in files:
            q = tensors[k][t.name]
            y = dequantize(q.data[idx], q.tensor_type).astype(np.float64)
            num[k] += float(((y - x) ** 2).sum())
    return {k: {"rel_sq_error": num[k] / den, "tensor_types": mix[k]} for k in files}


def kl_from_record(record: str, binary: str, threads: int, work: str) -> dict:
    """The KL-divergence of kipp-quantize's files, from a bench/ppl_bench.py record: each type's
    file is re-made from the record's base with kipp-quantize and counts only if its sha256 is
    the one the record judged (the C tool writes tools/quantize.py's bytes)."""
    rec = json.load(open(record))
    base = os.path.join(ROOT, rec["base"]["path"])
    out = {"record": os.path.relpath(record, ROOT), "base": rec["base"]["path"], "types": {}}
    for typ, f in rec["files"].items():
        if typ.startswith("llama-") or typ not in LLAMA_FTYPE or typ not in rec.get("targets", {}):
            continue
        dst = os.path.join(work, f"kl-{typ}.gguf")
        time_kipp(binary, base, dst, typ, threads)
        same = benchlib.sha256_file(dst) == f["sha256"]
        os.remove(dst)
        t = rec["targets"][typ]
        out["types"][typ] = {
            "same_bytes_as_judged_file": same,
            "kld_ratio_vs_llama_quantize": {eng: t[eng]["ratio"] for eng in ("kipp", "llama_cpp") if eng in t},
            "record_target": t.get("target"), "record_met": all(t[e]["met"] for e in ("kipp", "llama_cpp") if e in t),
        } if same else {"same_bytes_as_judged_file": False}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="bf16 GGUF (default: %(default)s)")
    ap.add_argument("--types", nargs="+", default=["q8_0", "q4_k_m", "q6_k"], choices=sorted(LLAMA_FTYPE))
    ap.add_argument("--threads", type=benchlib.positive("--threads"), default=2)
    ap.add_argument("--runs", type=benchlib.positive("--runs"), default=3)
    ap.add_argument("--rows", type=benchlib.positive("--rows"), default=16,
                    help="rows sampled per 2-D tensor for the error (default 16)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "kipp-quantize"))
    ap.add_argument("--workdir", help="where the quantized files go (default: a temporary folder)")
    ap.add_argument("--kl-record", default=os.path.join(ROOT, "bench", "results", "ppl-kipp-tiny.json"),
                    help="ppl_bench record whose KL-divergence figures apply to kipp-quantize's files when "
                         "it re-makes them byte for byte (default: %(default)s; 'none' to skip)")
    ap.add_argument("--output", help="JSON record path (default: stdout)")
    args = ap.parse_args(argv)
    for p, what in ((args.model, "model"), (args.binary, "kipp-quantize binary (make build/kipp-quantize)")):
        if not os.path.isfile(p):
            raise SystemExit(f"quantize_bench: missing {what}: {p}")
    import llama_cpp

    work = args.workdir or tempfile.mkdtemp(prefix="quantize_bench.")
    os.makedirs(work, exist_ok=True)
    results = {}
    for typ in args.types:
        kf, lf = os.path.join(work, f"kipp-{typ}.gguf"), os.path.join(work, f"llama-{typ}.gguf")
        tk, tl = [], []
        for i in range(args.runs):
            tk.append(time_kipp(args.binary, args.model, kf, typ, args.threads))
            tl.append(time_llama(args.model, lf, typ, args.threads))
            log(f"{typ} run {i + 1}/{args.runs}: kipp-quantize {tk[-1]:.2f} s, llama-quantize {tl[-1]:.2f} s")
        q = sample_error(args.model, {"kipp": kf, "llama": lf}, args.rows)
        mk, ml = statistics.median(tk), statistics.median(tl)
        results[typ] = {
            "kipp_s": benchlib.summary(tk), "llama_s": benchlib.summary(tl),
            "speedup": ml / mk,
            "kipp_bytes": os.path.getsize(kf), "llama_bytes": os.path.getsize(lf),
            "kipp": q["kipp"], "llama": q["llama"],
            "error_ratio": q["kipp"]["rel_sq_error"] / q["llama"]["rel_sq_error"],
            "target_speed_met": ml / mk >= 1.0,
        }
        log(f"{typ}: {ml / mk:.2f}x llama-quantize's speed; squared error {results[typ]['error_ratio']:.4f}x its")
        if not args.workdir:
            os.remove(kf)
            os.remove(lf)
    kl = None
    if args.kl_record != "none":
        kl = kl_from_record(args.kl_record, args.binary, args.threads, work)
        log(f"KL-divergence from {args.kl_record}: {json.dumps(kl['types'])}")
    rec = {
        "benchmark": "quantizer speed and dequantization error, kipp-quantize vs llama-quantize",
        "harness": "bench/quantize_bench.py",
        "argv": sys.argv[1:] if argv is None else argv,
        "provenance": benchlib.provenance(os.path.relpath(args.binary, ROOT)),
        "model": benchlib.model_manifest(args.model),
        "peer": {"llama_cpp_python": getattr(llama_cpp, "__version__", "?"),
                 "entry": "llama_model_quantize (llama-quantize's code path), default params"},
        "threads": args.threads, "runs": args.runs, "rows_sampled_per_tensor": args.rows,
        "results": results,
        "kl_divergence": kl,
        "targets": {"speed": ">= 1.0x llama-quantize, same file, type and threads",
                    "quality": "KL-divergence no worse than llama-quantize's (kl_divergence, judged by "
                               "bench/ppl_bench.py on a trained model); rel_sq_error is informative"},
    }
    text = json.dumps(rec, indent=2)
    if args.output:
        benchlib.write_record_file(args.output, text)
        log(f"wrote {args.output}")
    else:
        print(text)
    if not args.workdir:
        os.rmdir(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
