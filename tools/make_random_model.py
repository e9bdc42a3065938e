#!/usr/bin/env python3
"""Writes a full-size Qwen3 (or Qwen3-MoE) GGUF with random weights (no download needed).

What it does: for --shape 0.6b/1.7b/4b/8b it writes the exact Qwen3 architecture
metadata, tensor names, shapes and order that tools/convert_to_gguf.py writes for the
real checkpoint (tied embeddings for 0.6B/1.7B/4B, untied for 8B; head_dim 128;
context 40960; rope θ 1e6), the real Qwen3 tokenizer (vocab, merges, special tokens and
chat template from tools/data/qwen3-tokenizer/), and seeded random weights stored as
bf16, f16, f32 or q8_0 (norms always f32). The file loads in Kipp and llama.cpp.
--shape 30b-a3b does the same for Qwen3-30B-A3B (GGUF arch qwen3moe, as the converter
writes a Qwen3MoeForCausalLM: hidden 2048, 48 layers, 32 query / 4 KV heads of 128, 128
experts of FFN width 768 with 8 chosen per token and renormalised, untied, dense
feed_forward_length 6144): per layer the F32 router ffn_gate_inp and the 3-D expert tensors
ffn_{gate,up,down}_exps. --type also takes the mixes of tools/quantize.py (q4_k_m, q6_k,
q5_k_m, q4_0, ...): each tensor gets the type quantize.py would give it in the bf16 file
(router and norms F32), and is generated and quantized chunk by chunk, so a quantized model
needs no bf16 copy on disk; the bytes equal quantize.py's output for the bf16 file.

The weights make a numerically tame model: projections ~ N(0, 1/fan_in) (fan_in: the
contiguous dimension, an expert's for the 3-D tensors), norm weights 1 + 0.1·N(0,1), the
MoE router ~ N(0, (ROUTER_LOGIT_STD/√hidden)²) (router logits of std ~3: the experts are
chosen evenly over random inputs), and the (tied) embedding / output matrix ~ N(0, (LOGIT_STD/√hidden)²), so
the hidden state stays O(1..10) over all layers and the logits have a std of about
LOGIT_STD with a clear top-1 (the gap to the top-2 is ~LOGIT_STD/5 on average). Every
value is first rounded to bf16, so the bf16 and f32 files hold the same numbers and the
q8_0 file equals `tools/quantize.py` applied to the bf16 file.

Values are generated tensor by tensor in chunks of CHUNK values (SFC64 generator seeded
with (seed, crc32(tensor name), chunk index)), on all cores, and streamed to disk, so
memory stays at a few hundred MB whatever the model size, and the bytes depend only on
the shape, type, layer count and seed (a --layers N model has the same first N layers as
the full one; in a quantize.py mix, its types are those of an N-layer model).

What it does not do: make the model say anything meaningful.

Usage: python -m tools.make_random_model --shape {0.6b,1.7b,4b,8b,30b-a3b} --type {bf16,f16,f32,q8_0,q4_k_m,...}
           --output PATH [--seed N] [--layers N] [--no-progress]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/make_random_model.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import concurrent.futures as cf
import functools
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from tools import convert_to_gguf as conv
from tools import kipp_quants as kq
from tools import quantize as qz
from tools.kipp_gguf_writer import (GGMLType, GGUFWriter, GGUFWriteError, TensorInfo, ValueType,
                              ordered_results, write_atomic)

TOKENIZER_DIR = Path(__file__).resolve().parent / "data" / "qwen3-tokenizer"
VOCAB_SIZE = 151936
BOS_ID, EOS_ID = 151643, 151645
CTX = 40960
ROPE_THETA = 1e6
RMS_EPS = 1e-6

# hidden, layers, heads, kv heads, head_dim, ffn, tied  (reference §3.2)
# [, experts, experts used per token, expert ffn]: Qwen3-MoE, GGUF arch qwen3moe
SHAPES = {
    "0.6b": (1024, 28, 16, 8, 128, 3072, True),
    "1.7b": (2048, 28, 16, 8, 128, 6144, True),
    "4b": (2560, 36, 32, 8, 128, 9728, True),
    "8b": (4096, 36, 32, 8, 128, 12288, False),
    # test-only shapes (small, fast; not Qwen3 releases). tiny-untied has row lengths
    # (96) that are not multiples of 256, to exercise the quantizer's fallbacks.
    "tiny": (256, 8, 4, 2, 64, 768, True),
    "tiny-untied": (96, 3, 3, 1, 32, 256, False),
    # Qwen3-30B-A3B (Qwen/Qwen3-30B-A3B config.json; Qwen3-Coder-30B-A3B has the same shape)
    "30b-a3b": (2048, 48, 32, 4, 128, 6144, False, 128, 8, 768),
    # test-only: a small qwen3moe whose every row is a multiple of 256 (the K-quants apply)
    "tiny-moe": (256, 4, 4, 2, 64, 512, True, 16, 4, 256),
}
RELEASE_NAMES = {"0.6b": "Qwen3-0.6B", "1.7b": "Qwen3-1.7B", "4b": "Qwen3-4B", "8b": "Qwen3-8B",
                 "30b-a3b": "Qwen3-30B-A3B"}

TYPES = {  # --type -> (ggml type of 2-D weights, general.file_type)
    "f32": (GGMLType.F32, 0),
    "f16": (GGMLType.F16, 1),
    "bf16": (GGMLType.BF16, 32),
    "q8_0": (GGMLType.Q8_0, 7),
}
# and every other tools/quantize.py --type (q4_k_m, q6_k, ...): its mix, tensor by tensor
MIXES = [t for t in qz.FTYPES if t not in TYPES]

LOGIT_STD = 5.0    # target std of the logits (sets the embedding / output scale)
ROUTER_LOGIT_STD = 3.0  # MoE: std of the router logits of an RMS-normalised input
NORM_JITTER = 0.1  # norm weights are 1 + NORM_JITTER * N(0, 1)
CHUNK = 1 << 22    # values per generator chunk (fixed: part of the output's definition)


class RandomModelError(Exception):
    """A user-facing, one-line error."""


def hparams(shape: str, layers: int | None = None) -> conv.HParams:
    if shape not in SHAPES:
        raise RandomModelError(f"unknown shape {shape!r} (choose from {', '.join(SHAPES)})")
    H, L, Nh, Nkv, D, F, tied = SHAPES[shape][:7]
    if layers is not None:
        if layers < 1:
            raise RandomModelError(f"--layers must be at least 1, got {layers}")
        L = layers
    hp = conv.HParams(n_layer=L, n_ctx=CTX, n_embd=H, n_ff=F, n_head=Nh, n_head_kv=Nkv, head_dim=D,
                      rms_eps=RMS_EPS, rope_theta=ROPE_THETA, n_vocab=VOCAB_SIZE, tied=tied,
                      rope_scaling=None)
    if len(SHAPES[shape]) > 7:  # Qwen3-MoE (norm_topk_prob true, as every Qwen3-MoE release)
        hp.arch = conv.ARCH_QWEN3MOE
        hp.n_expert, hp.n_expert_used, hp.n_ff_exp = SHAPES[shape][7:]
        hp.expert_weights_norm = True
    return hp


def tensor_plan(hp: conv.HParams) -> list[tuple[str, tuple[int, ...]]]:
    """(GGUF name, PyTorch shape) in file order: exactly the converter's plan."""
    return [(g, shape) for g, _, shape in conv.tensor_plan(hp)]


def init_of(name: str, shape: tuple[int, ...], hp: conv.HParams) -> tuple[float, float]:
    """(mean, std) of the normal distribution a tensor's values are drawn from."""
    if len(shape) == 1:
        return 1.0, NORM_JITTER
    if name in ("token_embd.weight", "output.weight"):
        return 0.0, LOGIT_STD / np.sqrt(hp.n_embd)
    if name.endswith("ffn_gate_inp.weight"):
        return 0.0, ROUTER_LOGIT_STD / np.sqrt(shape[-1])
    return 0.0, 1.0 / np.sqrt(shape[-1])  # fan_in = the input (contiguous) dimension


def add_metadata(w: GGUFWriter, hp: conv.HParams, vocab: conv.Vocab, name: str, ftype: int) -> None:
    """The converter's key set and order (convert_to_gguf.build_writer)."""
    w.add_string("general.architecture", hp.arch)
    w.add_string("general.type", "model")
    w.add_string("general.name", name)
    conv.add_hparams_kv(w, hp, ftype)
    conv.add_tokenizer_kv(w, vocab)


@functools.lru_cache(maxsize=1)
def load_vocab() -> conv.Vocab:
    try:
        return conv.read_vocab(TOKENIZER_DIR, {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}, VOCAB_SIZE)
    except conv.ConvertError as exc:
        raise RandomModelError(f"vendored tokenizer: {exc}") from None


def _chunk_bf16(seed: int, name: str, index: int, n: int, mean: float, std: float) -> np.ndarray:
    """Chunk `index` of tensor `name`: n values as bf16 bits (the model's definition)."""
    ss = np.random.SeedSequence(entropy=seed, spawn_key=(zlib.crc32(name.encode()), index))
    x = np.random.Generator(np.random.SFC64(ss)).standard_normal(n, dtype=np.float32)
    x *= np.float32(std)
    if mean:
        x += np.float32(mean)
    return kq.f32_to_bf16(x)


def _chunk_values(seed: int, name: str, index: int, n: int, mean: float, std: float) -> np.ndarray:
    return kq.bf16_to_f32(_chunk_bf16(seed, name, index, n, mean, std))


def _encode_chunk(seed, name, index, n, mean, std, ggml_type) -> np.ndarray:
    bits = _chunk_bf16(seed, name, index, n, mean, std)
    if ggml_type == GGMLType.BF16:
        return bits
    return kq.encode(kq.bf16_to_f32(bits), ggml_type)


def tensor_values(name: str, shape: tuple[int, ...], hp: conv.HParams, seed: int) -> np.ndarray:
    """The whole tensor as float32 (for tests and small tensors)."""
    mean, std = init_of(name, shape, hp)
    n = int(np.prod(shape))
    parts = [_chunk_values(seed, name, i, min(CHUNK, n - s), mean, std) for i, s in enumerate(range(0, n, CHUNK))]
    return np.concatenate(parts).reshape(shape)


def build(shape: str, out_type: str, seed: int = 0, layers: int | None = None):
    """Returns (writer, hparams) with all metadata and tensor infos registered; writes nothing."""
    if out_type not in TYPES and out_type not in MIXES:
        raise RandomModelError(f"unsupported --type {out_type!r} (choose from {', '.join(list(TYPES) + MIXES)})")
    if seed < 0:
        raise RandomModelError(f"--seed must be non-negative, got {seed}")
    hp = hparams(shape, layers)
    weight_type, ftype = TYPES[out_type] if out_type in TYPES else (GGMLType.BF16, qz.FTYPES[out_type][1])
    vocab = load_vocab()
    label = RELEASE_NAMES.get(shape, f"qwen3-{shape}")
    w = GGUFWriter()
    add_metadata(w, hp, vocab, f"{label} random (seed {seed})", ftype)
    for gname, tshape in tensor_plan(hp):
        t = conv.stored_type(gname, tshape, weight_type)
        if out_type in MIXES and t == GGMLType.BF16:  # what quantize.py does to the bf16 file
            t = qz.target_type(gname, tshape, GGMLType.BF16, out_type, hp.n_layer, not hp.tied,
                               hp.n_head // hp.n_head_kv, hp.n_expert)
        w.add_tensor_info(gname, tshape, t)
    return w, hp


def write_model(shape: str, out_type: str, output: Path, seed: int = 0, layers: int | None = None,
                progress: bool = True, threads: int | None = None) -> Path:
    output = Path(output)
    w, hp = build(shape, out_type, seed, layers)  # bad arguments fail before anything is created
    if output.parent.exists() and not output.parent.is_dir():
        raise RandomModelError(f"output directory is not a directory: {output.parent}")
    output.parent.mkdir(parents=True, exist_ok=True)  # models/random/ on a fresh clone
    shapes = dict(tensor_plan(hp))
    threads = threads or os.cpu_count() or 1
    total = sum(t.nbytes for t in w.tensors)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=output.name,
                   file=sys.stderr, leave=False)
    pool = cf.ThreadPoolExecutor(max_workers=threads)

    def tensor_data(info: TensorInfo):
        mean, std = init_of(info.name, shapes[info.name], hp)
        n = int(np.prod(shapes[info.name]))
        jobs = [(i, min(CHUNK, n - s)) for i, s in enumerate(range(0, n, CHUNK))]
        calls = (functools.partial(_encode_chunk, seed, info.name, i, cn, mean, std, info.ggml_type)
                 for i, cn in jobs)
        yield from ordered_results(pool, calls, 2 * threads, bar)  # at most 2*threads in flight

    try:
        write_atomic(w, output, tensor_data)
    finally:
        pool.shutdown(cancel_futures=True)
        if bar is not None:
            bar.close()
    return output


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, help="0.6b, 1.7b, 4b, 8b or 30b-a3b (tiny, tiny-untied, tiny-moe: "
                    "test shapes)")
    ap.add_argument("--type", default="bf16", dest="out_type",
                    help="bf16, f16, f32, q8_0, or a tools/quantize.py mix: " + ", ".join(MIXES) + " (default bf16)")
    ap.add_argument("--output", "-o", required=True, type=Path, help="output GGUF path")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--layers", type=int, help="override the layer count (for tests)")
    ap.add_argument("--threads", type=int, help="generator threads (default: all cores)")
    ap.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        out = write_model(args.shape, args.out_type, args.output, args.seed, args.layers,
                          progress=not args.no_progress, threads=args.threads)
    except (RandomModelError, GGUFWriteError) as exc:
        print(f"make_random_model: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"make_random_model: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {args.shape} {args.out_type}, "
          f"{time.time() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
