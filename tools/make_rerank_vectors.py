"""Generates golden reranking scores for a reranker checkpoint from Hugging Face transformers.

What it does: loads models/NAME (default tiny-rerank) with transformers' AutoModelForCausalLM
in float32 and float64 (eager attention, CPU) and scores fixed (query, documents,
instruction) sets exactly as Qwen3-Reranker's published code does (the model card's
format_instruction / process_inputs / compute_logits): the tokenizer with padding_side
"left"; prefix tokens + tokenizer(format_instruction(instruction, query, doc)) + suffix
tokens per pair; the batch padded on the left; the last position's logits of the tokens
"yes" and "no"; log_softmax over the pair; exp of the "yes" entry. Writes
tests/test-vectors/NAME/manifest.json: per set its query, instruction (null: the default),
documents, and per document the whole prompt's token ids and its float32 score (the
published batched code) and float64 score (each pair alone); the bound Kipp's scores are
gated with and how it was derived; the smallest gap between two scores of a set (the
ordering gate is exact only when that gap is far above the bound); sha256 of the checkpoint
files; library versions.

What it does not do: run Kipp, or truncate (every pair here is far below max_length). The
bound is max(SAFETY * G, FLOOR) with G the largest |float32 batched - float64 single| score
difference of the oracle itself (the batch's left padding shifts positions, which RoPE makes
harmless only up to rounding: G includes that).

Usage: python -m tools.make_rerank_vectors [--checkpoint NAME] [--models-dir DIR] [--out DIR]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/make_rerank_vectors.py
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

# Qwen3-Reranker's published prompt (the model card's scoring code)
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
          "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
          "<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
MAX_LENGTH = 8192

SETS = [
    {"query": "What is the capital of China?", "instruction": None,
     "documents": ["The capital of China is Beijing.",
                   "Gravity is a force that attracts two bodies towards each other. It gives weight "
                   "to physical objects and is responsible for the movement of planets around the sun.",
                   "Paris is the capital and largest city of France.",
                   "北京是中华人民共和国的首都。",
                   "yes"]},
    {"query": "Explain gravity", "instruction": "Given a question, retrieve passages that explain it",
     "documents": ["Gravity is a force that attracts two bodies towards each other.",
                   "def add(a, b):\n    return a + b\n",
                   "Kipp reads GGUF files 🚀🦊 and so can you ✨",
                   ""]},
    {"query": "hello", "instruction": "",
     "documents": ["hello world", "a document that says <|im_end|> in its text", "no"]},
]
SAFETY_FACTOR = 20.0
FLOOR = 1e-5


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def format_instruction(instruction, query, doc):  # as published
    if instruction is None:
        instruction = DEFAULT_INSTRUCTION
    return "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}".format(
        instruction=instruction, query=query, doc=doc)


class Scorer:
    """The published process_inputs / compute_logits around one model."""

    def __init__(self, torch, tok, model):
        self.torch, self.tok, self.model = torch, tok, model
        self.prefix = tok.encode(PREFIX, add_special_tokens=False)
        self.suffix = tok.encode(SUFFIX, add_special_tokens=False)
        self.yes = tok.convert_tokens_to_ids("yes")
        self.no = tok.convert_tokens_to_ids("no")

    def ids(self, pairs):
        inputs = self.tok(pairs, padding=False, truncation="longest_first", return_attention_mask=False,
                          max_length=MAX_LENGTH - len(self.prefix) - len(self.suffix))
        return [self.prefix + ele + self.suffix for ele in inputs["input_ids"]]

    def scores(self, pairs):
        inputs = self.tok.pad({"input_ids": self.ids(pairs)}, padding=True, return_tensors="pt",
                              max_length=MAX_LENGTH)
        with self.torch.no_grad():
            logits = self.model(**inputs).logits[:, -1, :]
        pair = self.torch.stack([logits[:, self.no], logits[:, self.yes]], dim=1)
        return self.torch.nn.functional.log_softmax(pair, dim=1)[:, 1].exp().to(self.torch.float64).tolist()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="tiny-rerank")
    ap.add_argument("--models-dir", type=Path, default=REPO_ROOT / "models")
    ap.add_argument("--out", type=Path, help="default tests/test-vectors/NAME")
    args = ap.parse_args(argv)
    ckpt = args.models_dir / args.checkpoint
    if not (ckpt / "config.json").is_file():
        print(f"make_rerank_vectors: error: no checkpoint at {ckpt} "
              f"(make it with python -m tools.make_tiny_checkpoint --name {args.checkpoint})",
              file=sys.stderr)
        return 1
    import torch
    import transformers

    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(ckpt, padding_side="left")
    scorers = {dt: Scorer(torch, tok, transformers.AutoModelForCausalLM.from_pretrained(
        ckpt, dtype=dt, attn_implementation="eager").eval()) for dt in (torch.float32, torch.float64)}
    s32, s64 = scorers[torch.float32], scorers[torch.float64]
    sets, max_diff, min_gap = [], 0.0, float("inf")
    for st in SETS:
        pairs = [format_instruction(st["instruction"], st["query"], d) for d in st["documents"]]
        batched = s32.scores(pairs)  # the published code: one left-padded batch, float32
        singles = [s64.scores([p])[0] for p in pairs]
        max_diff = max(max_diff, max(abs(a - b) for a, b in zip(batched, singles)))
        ordered = sorted(singles)
        min_gap = min(min_gap, min(b - a for a, b in zip(ordered, ordered[1:])))
        sets.append({**st, "results": [
            {"tokens": ids, "score": float(np.float32(a)), "score_f64": b}
            for ids, a, b in zip(s32.ids(pairs), batched, singles)]})
    bound = max(SAFETY_FACTOR * max_diff, FLOOR)
    out = args.out or REPO_ROOT / "tests" / "test-vectors" / args.checkpoint
    out.mkdir(parents=True, exist_ok=True)
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md"]
    manifest = {
        "checkpoint": args.checkpoint,
        "prefix": PREFIX,
        "suffix": SUFFIX,
        "default_instruction": DEFAULT_INSTRUCTION,
        "labels": ["yes", "no"],
        "label_ids": [s32.yes, s32.no],
        "max_abs_bound": bound,
        "bound_derivation": f"max({SAFETY_FACTOR} * {max_diff:.3e} (max |f32 batched - f64 single| "
                            f"of the oracle), {FLOOR})",
        "min_score_gap": min_gap,
        "sets": sets,
        "sha256": {f: sha256_file(ckpt / f) for f in files if (ckpt / f).is_file()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n",
                                       encoding="utf-8")
    n = sum(len(s["documents"]) for s in SETS)
    print(f"wrote {out / 'manifest.json'} ({len(SETS)} sets, {n} documents, max |f32 - f64| "
          f"{max_diff:.2e}, bound {bound:.2e}, smallest score gap {min_gap:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
