"""Generates golden embeddings for an embedding checkpoint from Hugging Face transformers.

What it does: loads models/NAME (default tiny-embed) with transformers' Qwen3Model in
float32 and float64 (eager attention, CPU), tokenizes a fixed set of inputs (ASCII, CJK,
emoji, a one-word input) with the checkpoint's own tokenizer as sentence-transformers does
(special tokens added: Qwen3-Embedding's tokenizer appends <|endoftext|>, the pooled token),
pools the last token of last_hidden_state (Qwen3Model applies the final RMSNorm), L2
normalizes it, and writes tests/test-vectors/NAME/manifest.json: per input its text,
token ids and float32 embedding; the bounds Kipp's embeddings are gated with (cosine >=
0.9999 and max |a - b| <= max_abs_bound) and how the latter was derived; sha256 of the
checkpoint files; library versions.

What it does not do: run Kipp, or mean/CLS pooling. The max-abs bound is
max(SAFETY * G, FLOOR) with G the largest |float32 - float64| element difference of the
oracle itself; Kipp computes in float32 from the same bf16 weights, so its error is of G's
order.

Usage: python -m tools.make_embed_vectors [--checkpoint NAME] [--models-dir DIR] [--out DIR]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/make_embed_vectors.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent

INPUTS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "北京是中华人民共和国的首都。",
    "Kipp reads GGUF files 🚀🦊 and so can you ✨",
    "def add(a, b):\n    return a + b\n",
    "hello",
]
COSINE_MIN = 0.9999
SAFETY_FACTOR = 50.0
FLOOR = 1e-5


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def embed(model, torch, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        h = model(torch.tensor([ids])).last_hidden_state[0, -1].to(torch.float64).numpy()
    return h / np.linalg.norm(h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="tiny-embed")
    ap.add_argument("--models-dir", type=Path, default=REPO_ROOT / "models")
    ap.add_argument("--out", type=Path, help="default tests/test-vectors/NAME")
    args = ap.parse_args(argv)
    ckpt = args.models_dir / args.checkpoint
    if not (ckpt / "config.json").is_file():
        print(f"make_embed_vectors: error: no checkpoint at {ckpt} "
              f"(make it with python -m tools.make_tiny_checkpoint --name {args.checkpoint})",
              file=sys.stderr)
        return 1
    import torch
    import transformers

    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(ckpt)
    models = {dt: transformers.Qwen3Model.from_pretrained(ckpt, dtype=dt, attn_implementation="eager").eval()
              for dt in (torch.float32, torch.float64)}
    entries, max_diff = [], 0.0
    for text in INPUTS:
        ids = tok(text)["input_ids"]
        e32 = embed(models[torch.float32], torch, ids)
        e64 = embed(models[torch.float64], torch, ids)
        max_diff = max(max_diff, float(np.max(np.abs(e32 - e64))))
        entries.append({"text": text, "tokens": ids,
                        "embedding": [float(np.float32(v)) for v in e32]})
    bound = max(SAFETY_FACTOR * max_diff, FLOOR)
    out = args.out or REPO_ROOT / "tests" / "test-vectors" / args.checkpoint
    out.mkdir(parents=True, exist_ok=True)
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
             "modules.json", "1_Pooling/config.json"]
    manifest = {
        "checkpoint": args.checkpoint,
        "pooling": "last",
        "normalized": True,
        "cosine_min": COSINE_MIN,
        "max_abs_bound": bound,
        "bound_derivation": f"max({SAFETY_FACTOR} * {max_diff:.3e} (max |f32 - f64| of the oracle), {FLOOR})",
        "n_embd": len(entries[0]["embedding"]),
        "inputs": entries,
        "sha256": {f: sha256_file(ckpt / f) for f in files if (ckpt / f).is_file()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    print(f"wrote {out / 'manifest.json'} ({len(entries)} inputs, max |f32 - f64| {max_diff:.2e}, "
          f"bound {bound:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
