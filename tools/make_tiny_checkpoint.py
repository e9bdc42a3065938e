#!/usr/bin/env python3
"""Writes a tiny, deterministic Qwen3 (Qwen2.5: tiny-qwen2; Qwen3-MoE: tiny-moe*) checkpoint in Hugging Face format.

What it does: for a known NAME (see CHECKPOINTS) it generates random weights
with numpy's PCG64 generator and a fixed per-name seed, rounds them to bf16,
and writes models/NAME/ (or --out DIR) with config.json,
generation_config.json, model.safetensors (or --shards N:
model-0000i-of-0000N.safetensors + model.safetensors.index.json), and the
vendored Qwen3 tokenizer (tokenizer.json, tokenizer_config.json from
tools/data/qwen3-tokenizer/). The safetensors files are written by hand (sorted
header keys, tensors in name order), so the bytes are identical on every run
and every machine. The checkpoints load in transformers' Qwen3ForCausalLM
(Qwen2ForCausalLM for tiny-qwen2, Qwen3MoeForCausalLM for tiny-moe*). The MoE
checkpoints use the Hub's per-expert layout (model.layers.L.mlp.experts.J.{gate,up,down}_proj
.weight and the router model.layers.L.mlp.gate.weight), as Qwen/Qwen3-30B-A3B ships it;
tiny-moe-tie's routers have rows 2 and 5 equal in every layer (an exact tie, every token).
tiny-rerank is a Qwen3-Reranker in miniature: a Qwen3ForCausalLM plus a README.md whose
"# Qwen3-Reranker" heading tells tools/convert_to_gguf.py it is a reranker.

What it does not do: train anything or make the model say anything sensible.
Weight scales are only chosen so that logits are well spread (clear top-1
tokens), which makes argmax comparisons between implementations meaningful, and
(MoE) so that the router's choices are spread over the experts with clear gaps
between the k-th and (k+1)-th expert.

Usage: python -m tools.make_tiny_checkpoint --name tiny-tied [--out DIR] [--shards N]
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/make_tiny_checkpoint.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import os
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = REPO_ROOT / "tools" / "data" / "qwen3-tokenizer"

VOCAB_SIZE = 151936
BOS_ID = 151643  # <|endoftext|>
EOS_ID = 151645  # <|im_end|>

# Shapes are deliberately "awkward": head_dim != hidden/heads, GQA ratios 2 and 3.
# Seeds were picked (from the first few candidates) so that every position of the
# tools/make_vectors.py prompts has a top1-top2 logit gap of at least 0.06, i.e.
# far above the vector bound (~1e-3): argmax comparisons are never ambiguous.
CHECKPOINTS = {
    "tiny-tied": dict(seed=20250107, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, intermediate_size=192,
                      tie_word_embeddings=True, rope_theta=1000000.0),
    "tiny-untied": dict(seed=20250205, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
                        num_key_value_heads=2, head_dim=32, intermediate_size=256,
                        tie_word_embeddings=False, rope_theta=10000.0),
    # A Qwen3-Embedding in miniature: a bare Qwen3Model (no lm_head, tensor names without
    # "model.", as Qwen3Model.save_pretrained writes them) with the sentence-transformers
    # last-token pooling config. Kept at 64 wide and 2 layers: the 151k-row embedding table
    # is nearly all of its 19 MB.
    "tiny-embed": dict(seed=20261202, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=32, intermediate_size=192,
                       tie_word_embeddings=False, rope_theta=1000000.0, embedding=True),
    # A Qwen2.5 in miniature (Qwen2ForCausalLM: q/k/v projections with biases, no q/k norms,
    # head_dim = hidden / heads, as Qwen2Config has no head_dim), tied like the small releases.
    "tiny-qwen2": dict(seed=20261207, hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                       num_key_value_heads=2, head_dim=16, intermediate_size=224,
                       tie_word_embeddings=True, rope_theta=1000000.0, arch="qwen2"),
    # Qwen3-MoE (Qwen3MoeForCausalLM, the Qwen3-30B-A3B family) in miniature: every layer sparse,
    # no shared expert. intermediate_size is the config's dense size (unused by a model whose
    # every layer is sparse; the converter writes it as feed_forward_length, as llama.cpp does).
    # moe_intermediate_size 48 and 16 are not multiples of 32: the experts' down projections
    # of tiny-moe-k1 and tiny-moe-k4 stay F16/BF16 in a q8_0/q4_0 file (the quantizers' fallback).
    # Seeds: see MOE_SEEDS below.
    "tiny-moe": dict(seed=20261301, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, intermediate_size=192,
                     tie_word_embeddings=True, rope_theta=1000000.0, arch="qwen3moe",
                     num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True),
    "tiny-moe-k1": dict(seed=20261313, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
                        num_key_value_heads=2, head_dim=32, intermediate_size=256,
                        tie_word_embeddings=False, rope_theta=10000.0, arch="qwen3moe",
                        num_experts=16, num_experts_per_tok=1, moe_intermediate_size=48,
                        norm_topk_prob=False),
    "tiny-moe-64": dict(seed=20261323, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=1, head_dim=32, intermediate_size=192,
                        tie_word_embeddings=False, rope_theta=1000000.0, arch="qwen3moe",
                        num_experts=64, num_experts_per_tok=8, moe_intermediate_size=32,
                        norm_topk_prob=True),
    "tiny-moe-k4": dict(seed=20261331, hidden_size=64, num_hidden_layers=2, num_attention_heads=8,
                        num_key_value_heads=2, head_dim=16, intermediate_size=128,
                        tie_word_embeddings=True, rope_theta=1000000.0, arch="qwen3moe",
                        num_experts=32, num_experts_per_tok=4, moe_intermediate_size=16,
                        norm_topk_prob=False),
    # tiny-moe's shape with an exact routing tie: in every layer the router's rows 2 and 5 are
    # the same bf16 values (row 5 is a copy of row 2), so experts 2 and 5 get the same logit for
    # every token, and where that logit is the k-th largest one of them is chosen by the tie rule.
    "tiny-moe-tie": dict(seed=20261342, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, intermediate_size=192,
                         tie_word_embeddings=True, rope_theta=1000000.0, arch="qwen3moe",
                         num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                         norm_topk_prob=True, tied_router_rows=(2, 5)),
    # A Qwen3-Reranker in miniature: a Qwen3ForCausalLM scored by its "yes" / "no" logits on
    # the reranker prompt. Its README.md starts with "# Qwen3-Reranker", as the Hub's model
    # cards do: that heading is what tools/convert_to_gguf.py (like llama.cpp's converter)
    # recognizes a reranker by. The final norm's weights are scaled by final_norm_scale so
    # that the yes-no logit gap is O(1) and the scores spread over (0, 1) instead of
    # saturating at 0 or 1 (a tied head's logits are otherwise ~N(0, hidden)).
    # tiny-tied's shape and weights with YaRN on (factor 4 over an original context of 16
    # tokens, rope_theta 10000 so the ramp spans several pairs): the make_vectors prompts
    # reach positions on both sides of the original context. A Qwen3 with rope_scaling as
    # Qwen3's model cards tell users to set it for 128k.
    "tiny-yarn": dict(seed=20250107, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, intermediate_size=192,
                      tie_word_embeddings=True, rope_theta=10000.0,
                      rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 16},
                      max_position_embeddings=64),
    "tiny-rerank": dict(seed=20261401, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=32, intermediate_size=192,
                        tie_word_embeddings=True, rope_theta=1000000.0, reranker=True,
                        final_norm_scale=0.2),
}

# Weight scales. The residual stream starts at std ~1 (embeddings); every
# projection is N(0, 1/fan_in) so each block adds O(1); norm weights are
# 1 + 0.1*N(0,1) so they are not trivially all-ones. Logits are then roughly
# N(0, hidden) per vocab entry, i.e. well spread.
EMBED_STD = 1.0
NORM_JITTER = 0.1
BIAS_STD = 0.5
# MoE router (mlp.gate.weight): N(0, (ROUTER_LOGIT_STD / sqrt(hidden))^2), so that the router
# logits of an RMS-normalised hidden state have a std of about ROUTER_LOGIT_STD: the softmax is
# neither flat nor one-hot, and the gaps between neighbouring logits are wide enough that
# f32/f64 rounding cannot reorder the top k.
ROUTER_LOGIT_STD = 3.0

# The model card of a reranker checkpoint: its first heading is what the converter looks for.
RERANKER_README = """# Qwen3-Reranker (Kipp's tiny-rerank)

Random weights in Qwen3-Reranker's layout, made by tools/make_tiny_checkpoint.py: it ranks
nothing sensibly. It is scored as Qwen3-Reranker is, by the last position's "yes" and "no"
logits on the reranker prompt (tools/make_rerank_vectors.py).
"""


def make_config(spec: dict) -> dict:
    """config.json in the layout the official Qwen3 (or Qwen2.5) releases use."""
    cfg = {
        "architectures": ["Qwen3Model" if spec.get("embedding") else "Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "head_dim": spec["head_dim"],
        "hidden_act": "silu",
        "hidden_size": spec["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": spec["intermediate_size"],
        "max_position_embeddings": spec.get("max_position_embeddings", 512),
        "max_window_layers": spec["num_hidden_layers"],
        "model_type": "qwen3",
        "num_attention_heads": spec["num_attention_heads"],
        "num_hidden_layers": spec["num_hidden_layers"],
        "num_key_value_heads": spec["num_key_value_heads"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": spec.get("rope_scaling"),
        "rope_theta": spec["rope_theta"],
        "sliding_window": None,
        "tie_word_embeddings": spec["tie_word_embeddings"],
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
    }
    if spec.get("arch") == "qwen2":  # Qwen2Config: no head_dim (hidden / heads), biases always on
        assert spec["head_dim"] * spec["num_attention_heads"] == spec["hidden_size"]
        del cfg["attention_bias"], cfg["head_dim"]
        cfg["architectures"], cfg["model_type"] = ["Qwen2ForCausalLM"], "qwen2"
    if spec.get("arch") == "qwen3moe":  # Qwen/Qwen3-30B-A3B's config.json keys, sorted as there
        cfg["architectures"], cfg["model_type"] = ["Qwen3MoeForCausalLM"], "qwen3_moe"
        cfg.update(decoder_sparse_step=1, mlp_only_layers=[], moe_intermediate_size=spec["moe_intermediate_size"],
                   norm_topk_prob=spec["norm_topk_prob"], num_experts=spec["num_experts"],
                   num_experts_per_tok=spec["num_experts_per_tok"], output_router_logits=False,
                   router_aux_loss_coef=0.001)
        cfg = dict(sorted(cfg.items()))
    return cfg


def make_generation_config() -> dict:
    return {
        "bos_token_id": BOS_ID,
        "do_sample": True,
        "eos_token_id": [EOS_ID, BOS_ID],
        "pad_token_id": BOS_ID,
        "temperature": 0.6,
        "top_k": 20,
        "top_p": 0.95,
    }


def tensor_shapes(spec: dict) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> PyTorch shape, for every tensor the checkpoint holds."""
    H, F, D = spec["hidden_size"], spec["intermediate_size"], spec["head_dim"]
    Nh, Nkv = spec["num_attention_heads"], spec["num_key_value_heads"]
    pre = "" if spec.get("embedding") else "model."
    shapes = {f"{pre}embed_tokens.weight": (VOCAB_SIZE, H), f"{pre}norm.weight": (H,)}
    if not spec["tie_word_embeddings"] and not spec.get("embedding"):
        shapes["lm_head.weight"] = (VOCAB_SIZE, H)
    for i in range(spec["num_hidden_layers"]):
        p = f"{pre}layers.{i}."
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "self_attn.q_proj.weight"] = (Nh * D, H)
        shapes[p + "self_attn.k_proj.weight"] = (Nkv * D, H)
        shapes[p + "self_attn.v_proj.weight"] = (Nkv * D, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, Nh * D)
        if spec.get("arch") == "qwen2":  # biases on q, k, v; no head norms
            shapes[p + "self_attn.q_proj.bias"] = (Nh * D,)
            shapes[p + "self_attn.k_proj.bias"] = (Nkv * D,)
            shapes[p + "self_attn.v_proj.bias"] = (Nkv * D,)
        else:
            shapes[p + "self_attn.q_norm.weight"] = (D,)
            shapes[p + "self_attn.k_norm.weight"] = (D,)
        if spec.get("arch") == "qwen3moe":  # the Hub's per-expert layout
            E, Fe = spec["num_experts"], spec["moe_intermediate_size"]
            shapes[p + "mlp.gate.weight"] = (E, H)
            for j in range(E):
                shapes[p + f"mlp.experts.{j}.gate_proj.weight"] = (Fe, H)
                shapes[p + f"mlp.experts.{j}.up_proj.weight"] = (Fe, H)
                shapes[p + f"mlp.experts.{j}.down_proj.weight"] = (H, Fe)
            continue
        shapes[p + "mlp.gate_proj.weight"] = (F, H)
        shapes[p + "mlp.up_proj.weight"] = (F, H)
        shapes[p + "mlp.down_proj.weight"] = (H, F)
    return shapes


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (round to nearest, ties to even); returns the uint16 bits."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def generate_weights(spec: dict) -> dict[str, np.ndarray]:
    """HF name -> uint16 bf16 bits. Tensors are drawn in sorted-name order from
    one PCG64 stream, so the result depends only on the seed and the shapes."""
    rng = np.random.Generator(np.random.PCG64(spec["seed"]))
    out = {}
    for name, shape in sorted(tensor_shapes(spec).items()):
        z = rng.standard_normal(shape, dtype=np.float32)
        if name.endswith(".bias"):  # Qwen2's q/k/v biases: O(1) against the projections' O(1)
            w = BIAS_STD * z
        elif len(shape) == 1:  # RMSNorm weights (input/post-attention/final/q/k norms)
            w = 1.0 + NORM_JITTER * z
            if name == "model.norm.weight":
                w = w * np.float32(spec.get("final_norm_scale", 1.0))
        elif name in ("model.embed_tokens.weight", "embed_tokens.weight", "lm_head.weight"):
            w = EMBED_STD * z
        elif name.endswith(".mlp.gate.weight"):  # the MoE router
            w = z * np.float32(ROUTER_LOGIT_STD / np.sqrt(shape[1]))
            if spec.get("tied_router_rows"):
                a, b = spec["tied_router_rows"]
                w[b] = w[a]
        else:
            w = z / np.float32(np.sqrt(shape[1]))  # fan_in = in_features = shape[1]
        out[name] = f32_to_bf16_bits(w.astype(np.float32))
    return out


def safetensors_bytes_header(tensors: dict[str, np.ndarray]) -> tuple[bytes, list[str]]:
    """Builds the 8-byte length + JSON header for BF16 tensors laid out in
    sorted-name order. Returns (header bytes, ordered names)."""
    names = sorted(tensors)
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for n in names:
        nbytes = tensors[n].nbytes
        header[n] = {"dtype": "BF16", "shape": list(tensors[n].shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    blob += b" " * ((8 - len(blob) % 8) % 8)  # keep the data 8-byte aligned, as safetensors does
    return struct.pack("<Q", len(blob)) + blob, names


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    head, names = safetensors_bytes_header(tensors)
    with open(path, "wb") as f:
        f.write(head)
        for n in names:
            f.write(np.ascontiguousarray(tensors[n]).astype("<u2", copy=False).tobytes())


def split_shards(tensors: dict[str, np.ndarray], n_shards: int) -> list[list[str]]:
    """Splits the sorted names into n contiguous, non-empty groups of nearly equal
    tensor count (not byte size: the embedding alone outweighs everything else
    in a tiny model, and the point of sharding here is to exercise the index)."""
    names = sorted(tensors)
    if n_shards > len(names):
        raise ValueError(f"--shards {n_shards} exceeds the number of tensors ({len(names)})")
    q, r = divmod(len(names), n_shards)
    groups, start = [], 0
    for i in range(n_shards):
        size = q + (1 if i < r else 0)
        groups.append(names[start:start + size])
        start += size
    return groups


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def write_checkpoint(name: str, out_dir: Path, n_shards: int = 1) -> Path:
    if name not in CHECKPOINTS:
        raise ValueError(f"unknown checkpoint name {name!r}; valid: {', '.join(sorted(CHECKPOINTS))}")
    if n_shards < 1:
        raise ValueError("--shards must be >= 1")
    spec = CHECKPOINTS[name]
    out_dir.mkdir(parents=True, exist_ok=True)
    # remove weight files from an earlier run with a different sharding
    for old in list(out_dir.glob("model*.safetensors")) + [out_dir / "model.safetensors.index.json"]:
        if old.exists():
            old.unlink()

    write_json(out_dir / "config.json", make_config(spec))
    write_json(out_dir / "generation_config.json", make_generation_config())
    for fname in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(TOKENIZER_DIR / fname, out_dir / fname)
    if spec.get("embedding"):
        # as Qwen3-Embedding ships it: the tokenizer appends <|endoftext|> to every input
        # (a TemplateProcessing post-processor), and that last token is the one pooled
        tok = json.loads((TOKENIZER_DIR / "tokenizer.json").read_text(encoding="utf-8"))
        eot = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
        tok["post_processor"] = {"type": "Sequence", "processors": [tok["post_processor"], {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, eot],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, eot,
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [BOS_ID], "tokens": ["<|endoftext|>"]}}}]}
        (out_dir / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")

    if spec.get("embedding"):  # sentence-transformers: last-token pooling, then normalize
        write_json(out_dir / "modules.json", [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
        (out_dir / "1_Pooling").mkdir(exist_ok=True)
        write_json(out_dir / "1_Pooling" / "config.json", {
            "word_embedding_dimension": spec["hidden_size"], "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": True, "include_prompt": True})
    if spec.get("reranker"):
        (out_dir / "README.md").write_text(RERANKER_README, encoding="utf-8")
    tensors = generate_weights(spec)
    if n_shards == 1:
        write_safetensors(out_dir / "model.safetensors", tensors)
    else:
        weight_map = {}
        for i, group in enumerate(split_shards(tensors, n_shards)):
            fname = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
            write_safetensors(out_dir / fname, {n: tensors[n] for n in group})
            weight_map.update({n: fname for n in group})
        index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())},
                 "weight_map": dict(sorted(weight_map.items()))}
        write_json(out_dir / "model.safetensors.index.json", index)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", required=True, help="one of: " + ", ".join(sorted(CHECKPOINTS)))
    ap.add_argument("--out", type=Path, help="checkpoint directory (default: models/NAME)")
    ap.add_argument("--shards", type=int, default=1, help="number of safetensors shards (default 1)")
    args = ap.parse_args(argv)
    out = args.out if args.out is not None else REPO_ROOT / "models" / args.name
    try:
        path = write_checkpoint(args.name, out, args.shards)
    except (ValueError, OSError) as exc:
        print(f"make_tiny_checkpoint: error: {exc}", file=sys.stderr)
        return 1
    n_params = sum(int(np.prod(s)) for s in tensor_shapes(CHECKPOINTS[args.name]).values())
    print(f"wrote {args.name} ({n_params:,} parameters, bf16) to {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
