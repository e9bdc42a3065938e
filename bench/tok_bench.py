#!/usr/bin/env python3
"""tok_bench.py — encode throughput of Kipp's tokenizer against HF `tokenizers`, side by
side in one run, on one thread each, over the same >= 10 MB mixed corpus; writes a JSON
record (default bench/results/tok-encode.json).

Corpus (deterministic, its sha256 is recorded): Python sources of the pinned packages in
.venv (numpy, gguf, tqdm, pytest, pip: code, comments, docstrings), interleaved with the
multilingual tokenizer golden strings (CJK, Arabic, Devanagari, Thai, emoji, combining
marks, whitespace runs, invalid UTF-8 repaired with U+FFFD), cut into chunks of about 4 KiB at
line boundaries. Both sides encode every chunk separately with added-token parsing on
(HF: encode(chunk, add_special_tokens=False)); the ids are hashed on both sides and must be
equal or the record says so. Runs alternate Kipp, HF, Kipp, HF ... after a warm-up.

Not a test: it never fails on speed. Protocol: bench/README.md.
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 bench/tok_bench.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import base64
import glob
import json
import os
import subprocess
import sys
import time

from bench import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"


def build_corpus(target_bytes: int) -> list[bytes]:
    site = glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages"))[0]
    code_files = []
    for pkg in ("numpy", "gguf", "tqdm", "_pytest", "pip"):
        code_files += sorted(glob.glob(os.path.join(site, pkg, "**/*.py"), recursive=True))
    multilingual = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/tok/*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                if "text" in o:
                    multilingual.append(o["text"])
                elif "bytes_b64" in o:
                    multilingual.append(base64.b64decode(o["bytes_b64"]).decode("utf-8", "replace"))
    multi_blob = "\n".join(multilingual).encode("utf-8")
    chunks: list[bytes] = []
    total = 0
    mi = 0
    for path in code_files:
        with open(path, "rb") as f:
            data = f.read()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        # one multilingual chunk after every code file keeps the mix roughly 4:1
        for part in (data, multi_blob[mi:mi + 4096]):
            start = 0
            while start < len(part):
                end = part.find(b"\n", start + 4096)
                end = len(part) if end < 0 else end + 1
                piece = part[start:end]
                try:
                    piece.decode("utf-8")
                except UnicodeDecodeError:  # a cut inside a character: skip that piece
                    start = end
                    continue
                chunks.append(piece)
                total += len(piece)
                start = end
        mi = (mi + 4096) % max(1, len(multi_blob) - 4096)
        if total >= target_bytes:
            break
    return chunks


def fnv1a(ids_lists) -> str:
    h = 1469598103934665603
    for ids in ids_lists:
        for i in ids:
            h ^= i
            h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/tiny-tied/kipp-tiny-tied-bf16.gguf",
                    help="any Qwen3 GGUF (only its vocabulary is used)")
    ap.add_argument("--tokenizer", default="tools/data/qwen3-tokenizer/tokenizer.json")
    ap.add_argument("--binary", default="build/kipp-tokbench")
    ap.add_argument("--mb", type=float, default=10.0, help="corpus size in MB (>= 10 for records)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--output", default="bench/results/tok-encode.json")
    args = ap.parse_args()
    os.chdir(ROOT)

    from tokenizers import Tokenizer, __version__ as tok_version

    chunks = build_corpus(int(args.mb * 1e6))
    corpus_path = "build/bench/tok-corpus.bin"
    os.makedirs(os.path.dirname(corpus_path), exist_ok=True)
    with open(corpus_path, "wb") as f:
        for c in chunks:
            f.write(len(c).to_bytes(4, "little"))
            f.write(c)
    n_bytes = sum(len(c) for c in chunks)
    texts = [c.decode("utf-8") for c in chunks]
    print(f"corpus: {len(chunks)} chunks, {n_bytes / 1e6:.2f} MB", file=sys.stderr)

    hf = Tokenizer.from_file(args.tokenizer)
    hf_ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    hf_hash = fnv1a(hf_ids)
    hf_tokens = sum(len(x) for x in hf_ids)

    def run_hf() -> float:
        t0 = time.perf_counter()
        for t in texts:
            hf.encode(t, add_special_tokens=False)
        return time.perf_counter() - t0

    def run_kipp() -> dict:
        out = subprocess.run([args.binary, args.model, corpus_path, "1"], capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout)

    for _ in range(args.warmup):
        run_kipp()
        run_hf()
    kipp_s, hf_s, kipp_info = [], [], None
    for _ in range(args.runs):
        kipp_info = run_kipp()
        kipp_s.append(kipp_info["run_seconds"][0])
        hf_s.append(run_hf())

    kipp_mbs = [n_bytes / s / 1e6 for s in kipp_s]
    hf_mbs = [n_bytes / s / 1e6 for s in hf_s]
    med_k = benchlib.summary(kipp_mbs)["median"]
    med_h = benchlib.summary(hf_mbs)["median"]
    rec = {
        "benchmark": "tokenizer encode throughput",
        "provenance": benchlib.provenance(args.binary),
        "settings": {"threads": 1, "runs": args.runs, "warmup": args.warmup,
                     "parse_special": True, "chunking": "~4 KiB at line boundaries"},
        "corpus": {"bytes": n_bytes, "chunks": len(chunks), "sha256": benchlib.sha256_file(corpus_path),
                   "composition": "pinned .venv package sources + tests/tok golden strings"},
        "peer": {"name": "HF tokenizers", "version": tok_version,
                 "tokenizer_sha256": benchlib.sha256_file(args.tokenizer)},
        "ids_equal": kipp_info["ids_fnv1a"] == hf_hash and kipp_info["tokens"] == hf_tokens,
        "tokens": {"kipp": kipp_info["tokens"], "hf": hf_tokens},
        "kipp_mb_per_s": {"runs": kipp_mbs, **benchlib.summary(kipp_mbs)},
        "hf_mb_per_s": {"runs": hf_mbs, **benchlib.summary(hf_mbs)},
        "ratio_kipp_over_hf_median": med_k / med_h,
        # the conservative figure for noisy machines: Kipp's slowest run vs HF's fastest
        "ratio_kipp_worst_over_hf_best": min(kipp_mbs) / max(hf_mbs),
        "target_ratio": 1.0,
    }
    spread = (max(kipp_mbs) - min(kipp_mbs)) / med_k
    rec["kipp_dispersion"] = spread
    benchlib.write_record_file(args.output, json.dumps(rec, indent=2))
    print(f"kipp {med_k:.2f} MB/s, HF tokenizers {med_h:.2f} MB/s, ratio {med_k / med_h:.2f}x, "
          f"ids equal: {rec['ids_equal']}, record: {args.output}")
    return 0 if rec["ids_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
