#!/usr/bin/env python3
"""Packs a trained model for the repository: weights/NAME-bf16.gguf.xz and its manifest entry.

What it does: converts the Hugging Face checkpoint that tools/train_tiny.py wrote (default
models/NAME) to models/NAME/NAME-bf16.gguf with tools/convert_to_gguf.py, compresses it with
`xz -9e` into weights/NAME-bf16.gguf.xz, and records in weights/MANIFEST.json: the sha256 and
size of both files (the build unpacks the .xz and checks the GGUF's sha256), the training
command, commit, time, CPU and versions, parameters, tokens seen, held-out perplexity against
the unigram baseline and the greedy samples (from the checkpoint's train-report.json). It
also rewrites weights/corpus-files.tsv, the list of every corpus file with its split and
sha256 (tools/corpus.py), which PROVENANCE.md refers to.

What it does not do: train, or make the quantized files (the Makefile makes those from the
bf16 file with tools/quantize.py).

Usage: python -m tools.ship_weights --name kipp-tiny [--checkpoint DIR]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/ship_weights.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tools import atomic_file, convert_to_gguf, corpus
from tools.make_vectors import sha256_file as sha256

REPO_ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = REPO_ROOT / "weights"
MANIFEST = WEIGHTS / "MANIFEST.json"
REPORT_KEYS = ("shape", "trained_parameters", "file_parameters", "kept_tokens", "kept_coverage",
               "steps", "tokens_seen", "seq_len", "batch", "lr", "seed", "mix", "teacher",
               "train_minutes", "threads", "command", "commit", "cpu", "versions",
               "debian_packages", "heldout", "samples")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="kipp-tiny or kipp-tiny-draft")
    ap.add_argument("--checkpoint", type=Path, help="HF checkpoint folder (default models/NAME)")
    args = ap.parse_args(argv)
    ckpt = args.checkpoint or REPO_ROOT / "models" / args.name
    report_path = ckpt / "train-report.json"
    if not report_path.is_file():
        sys.exit(f"ship_weights: {report_path} is missing: train with tools/train_tiny.py first")
    report = json.loads(report_path.read_text())
    dest = REPO_ROOT / "models" / args.name
    dest.mkdir(parents=True, exist_ok=True)
    if ckpt.resolve() != dest.resolve():  # make vectors reads the checkpoint from models/NAME
        for f in ckpt.iterdir():
            if f.is_file() and f.name != "train-state.pt":
                shutil.copy(f, dest / f.name)
    gguf = convert_to_gguf.convert(dest, "bf16", dest / f"{args.name}-bf16.gguf", progress=False)
    WEIGHTS.mkdir(exist_ok=True)
    xz = WEIGHTS / f"{args.name}-bf16.gguf.xz"
    print(f"ship_weights: compressing {gguf.name} (xz -9e) ...", flush=True)
    with atomic_file.replace_on_success(xz) as tmp, open(tmp, "wb") as out:
        subprocess.run(["xz", "-9e", "-T1", "-c", str(gguf)], stdout=out, check=True)
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"models": {}}
    manifest["about"] = ("Kipp's trained models: weights/NAME-bf16.gguf.xz unpacks (make, "
                         "scripts/unpack_weights.sh) to models/NAME/NAME-bf16.gguf with this "
                         "gguf_sha256. Corpus and licenses: weights/PROVENANCE.md.")
    manifest["models"][args.name] = {
        "gguf": f"{args.name}-bf16.gguf", "gguf_sha256": sha256(gguf), "gguf_bytes": gguf.stat().st_size,
        "xz": xz.name, "xz_sha256": sha256(xz), "xz_bytes": xz.stat().st_size,
        "checkpoint_files_sha256": {f.name: sha256(f) for f in sorted(dest.iterdir())
                                    if f.name in ("config.json", "model.safetensors")},
        "corpus": {"provenance": "weights/PROVENANCE.md", "files": "weights/corpus-files.tsv",
                   "heldout_rule": f"sha256(file name)[0] < {corpus.HELDOUT_BYTE}",
                   "heldout_text": "bench/data/kipp-tiny-heldout.txt"},
        **{k: report[k] for k in REPORT_KEYS if k in report},
    }
    atomic_file.write_text(MANIFEST, json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    corpus.main(["--list", str(WEIGHTS / "corpus-files.tsv")])
    print(f"ship_weights: {xz.relative_to(REPO_ROOT)} ({xz.stat().st_size / 1e6:.1f} MB, "
          f"from {gguf.stat().st_size / 1e6:.1f} MB); {MANIFEST.relative_to(REPO_ROOT)} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
