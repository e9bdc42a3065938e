"""Converts a Hugging Face Qwen3 (dense), Qwen3-MoE or Qwen2.5 checkpoint directory to a GGUF v3 file.

What it does: reads config.json, model.safetensors (or the shards listed in
model.safetensors.index.json), tokenizer.json, tokenizer_config.json and, if
present, generation_config.json; writes the metadata keys and tensor names
that llama.cpp's convert_hf_to_gguf.py writes for `qwen3` (see
the project's qwen3-gguf-reference.md, §2-§3), with tensors stored as
f32, f16, bf16 or q8_0. 1-D tensors and *_norm.weight stay F32 in every
outtype. Safetensors headers are parsed here with numpy (F32/F16/BF16 sources);
tensors are converted and written one at a time, so memory use stays near the
size of the largest tensor. The output depends only on the input bytes, the
outtype and the directory name (general.name), with no timestamps: converting
twice gives identical files, and a sharded checkpoint gives the same file as
the unsharded one.
An embedding checkpoint (architectures Qwen3Model, or a sentence-transformers
modules.json whose Pooling module pools the last token; tensor names with or
without the "model." prefix) gets qwen3.pooling_type = 3 (last) and no
output.weight. A Qwen3-Reranker checkpoint (a Qwen3ForCausalLM whose README.md has a
"# Qwen3-Reranker" heading, as the Hub's model cards do, the test llama.cpp's converter
uses) is written as the causal LM it is, with its whole lm_head, plus
qwen3.classifier.output_labels = ["yes", "no"] (llama.cpp's key): kipp-server serves
POST /v1/rerank for a file that has it, scoring with those two tokens' logits. (llama.cpp
writes pooling_type = rank and a 2-row cls.output head instead, which Kipp does not load.)
A Qwen2ForCausalLM checkpoint (Qwen2.5) is written as llama.cpp writes
`qwen2`: its q/k/v biases as attn_{q,k,v}.bias (F32), no q/k norms, and key_length =
value_length = hidden_size / num_attention_heads.
A Qwen3MoeForCausalLM checkpoint (Qwen3-30B-A3B and its family) is written as llama.cpp
writes `qwen3moe`: qwen3's keys plus expert_count, expert_used_count and
expert_feed_forward_length, and per layer the router as ffn_gate_inp (F32 in every outtype,
as llama.cpp keeps it) and the experts stacked in expert order into three 3-D tensors,
ffn_gate_exps / ffn_up_exps (PyTorch shape [experts, expert_ffn, hidden]) and ffn_down_exps
([experts, hidden, expert_ffn]), instead of ffn_gate/up/down. It also writes
qwen3moe.expert_weights_norm = norm_topk_prob (llama.cpp's converter does not, and its
qwen3moe graph always renormalises the chosen experts' weights; Kipp reads an absent key as
true). The experts are read from the Hub's per-expert tensors
(mlp.experts.J.{gate,up,down}_proj.weight) or from the fused 3-D tensors transformers 5
writes with save_pretrained(save_original_format=False) (mlp.experts.gate_up_proj
[experts, 2*expert_ffn, hidden], gate rows first, and mlp.experts.down_proj). Configs the
format cannot describe are refused: dense layers among the sparse ones (mlp_only_layers,
decoder_sparse_step != 1), shared experts, attention biases, sliding-window attention.

What it does not do: other architectures (Qwen2-MoE, Llama, ...), other
quantizations (K-quants, Q4_0, ...), imatrix, vocab-only files, split GGUFs,
or the tokenizer fingerprinting that llama.cpp uses to pick `tokenizer.ggml.pre`
(the Qwen2 pre-tokenizer regex is checked in tokenizer.json instead).

Usage: python -m tools.convert_to_gguf HF_DIR --outtype {f32,f16,bf16,q8_0} [--outfile PATH]
Default outfile: HF_DIR/kipp-<dirname>-<outtype>.gguf (HF_DIR/<dirname>-<outtype>.gguf when
<dirname> starts with kipp-, as Kipp's own models do)
"""

from __future__ import annotations

if __package__ in (None, ""):  # run as a file: python3 tools/convert_to_gguf.py
    import os, sys; sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # noqa: E401,E702
from tools import _bootstrap  # noqa: E402,F401  (tools/_bootstrap.py)

import argparse
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.kipp_gguf_writer import (GGMLType, GGUFWriter, GGUFWriteError, TensorInfo, ValueType,
                              write_atomic)

ARCH = "qwen3"
HF_ARCH = "Qwen3ForCausalLM"
# Qwen2.5 (Qwen2.5-Coder, DeepSeek-R1-Distill-Qwen): q/k/v biases, no q/k norms; GGUF arch qwen2
HF_ARCH_QWEN2 = "Qwen2ForCausalLM"
ARCH_QWEN2 = "qwen2"
# Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): Qwen3's attention, every layer's FFN a routed
# mixture of experts (softmax router, top k, optional renormalisation); GGUF arch qwen3moe
HF_ARCH_QWEN3MOE = "Qwen3MoeForCausalLM"
ARCH_QWEN3MOE = "qwen3moe"
# A bare Qwen3Model (no lm_head) is an embedding model: Qwen3-Embedding pools the final-norm
# hidden state of the last token. llama.cpp's enum for qwen3.pooling_type: 3 = last.
HF_ARCH_EMBED = "Qwen3Model"
POOLING_LAST = 3
# Qwen3-Reranker: the tokens whose last-position logits score a (query, document) pair, the
# relevant one first (llama.cpp's <arch>.classifier.output_labels, in its order)
RERANK_LABELS = ["yes", "no"]

# outtype -> (ggml type of 2-D weights, llama ftype written to general.file_type)
OUTTYPES = {
    "f32": (GGMLType.F32, 0),
    "f16": (GGMLType.F16, 1),
    "bf16": (GGMLType.BF16, 32),
    "q8_0": (GGMLType.Q8_0, 7),
}
GGML_QUANT_VERSION = 2

# llama.cpp token types
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5

# The Qwen2 pre-tokenizer regex (tokenizer.ggml.pre = "qwen2"), reference §6.3.
QWEN2_PRETOKENIZER_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SAFETENSORS_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit


class ConvertError(Exception):
    """A user-facing, one-line error."""


# ---------------------------------------------------------------------------
# Input: JSON files and safetensors


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ConvertError(f"missing {what}: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConvertError(f"malformed {what} {path}: {exc}") from None
    if not isinstance(obj, dict):
        raise ConvertError(f"malformed {what} {path}: top level is not a JSON object")
    return obj


@dataclass
class SourceTensor:
    name: str
    file: Path
    dtype: str                # safetensors dtype string
    shape: tuple[int, ...]    # PyTorch order
    offset: int               # absolute byte offset in the file
    nbytes: int


def read_safetensors_header(path: Path) -> dict[str, SourceTensor]:
    """Parses one .safetensors header and checks every entry against the file size."""
    if not path.is_file():
        raise ConvertError(f"missing safetensors file: {path}")
    file_size = path.stat().st_size
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise ConvertError(f"malformed safetensors file {path}: shorter than 8 bytes")
        (n,) = struct.unpack("<Q", raw_len)
        if n > MAX_SAFETENSORS_HEADER or 8 + n > file_size:
            raise ConvertError(f"malformed safetensors file {path}: header length {n} is out of range")
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConvertError(f"malformed safetensors header in {path}: {exc}") from None
    if not isinstance(header, dict):
        raise ConvertError(f"malformed safetensors header in {path}: not a JSON object")
    data_start = 8 + n
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise ConvertError(f"malformed safetensors header in {path}: bad entry for tensor {name!r}") from None
        if dtype not in SAFETENSORS_DTYPES:
            raise ConvertError(
                f"unsupported dtype {dtype} for tensor {name!r} in {path} (supported: "
                f"{', '.join(SAFETENSORS_DTYPES)})")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if any(d < 0 for d in shape) or not 0 <= begin <= end or data_start + end > file_size \
                or end - begin != count * SAFETENSORS_DTYPES[dtype].itemsize:
            raise ConvertError(f"malformed safetensors header in {path}: tensor {name!r} has "
                               f"inconsistent shape/offsets {list(shape)} {[begin, end]}")
        out[name] = SourceTensor(name, path, dtype, shape, data_start + begin, end - begin)
    return out


def load_source_tensors(hf_dir: Path) -> dict[str, SourceTensor]:
    """All tensors of the checkpoint, from model.safetensors or the sharded index."""
    index_path = hf_dir / "model.safetensors.index.json"
    single = hf_dir / "model.safetensors"
    if index_path.is_file():
        index = read_json(index_path, "safetensors index")
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise ConvertError(f"malformed safetensors index {index_path}: 'weight_map' must map tensor names "
                               "to file names")
        tensors: dict[str, SourceTensor] = {}
        for fname in sorted(set(weight_map.values())):
            if "/" in fname or "\\" in fname or fname in (".", ".."):
                raise ConvertError(f"malformed safetensors index {index_path}: bad file name {fname!r}")
            for name, t in read_safetensors_header(hf_dir / fname).items():
                if name in tensors:
                    raise ConvertError(f"tensor {name!r} appears in both {tensors[name].file.name} and {fname}")
                tensors[name] = t
        for name, fname in weight_map.items():
            if name not in tensors or tensors[name].file.name != fname:
                raise ConvertError(f"malformed safetensors index {index_path}: tensor {name!r} is not in {fname}")
        return tensors
    if single.is_file():
        return read_safetensors_header(single)
    raise ConvertError(f"missing weights: neither {single} nor {index_path} exists")


def load_f32(t: SourceTensor) -> np.ndarray:
    """Reads a source tensor as float32 (bf16 -> f32 is an exact 16-bit shift)."""
    raw = np.memmap(t.file, dtype=SAFETENSORS_DTYPES[t.dtype], mode="r", offset=t.offset,
                    shape=(t.nbytes // SAFETENSORS_DTYPES[t.dtype].itemsize,))
    if t.dtype == "BF16":
        data = (raw.astype(np.uint32) << 16).view(np.float32)
    else:
        data = np.asarray(raw, dtype=np.float32)
    return data.reshape(t.shape)


# ---------------------------------------------------------------------------
# Numeric conversions (match gguf-py / ggml bit for bit)


def f32_to_f16(x: np.ndarray) -> np.ndarray:
    """IEEE binary16, round to nearest even (numpy's cast)."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """bfloat16 bits, round to nearest even; NaNs become quiet NaNs (as gguf-py does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = np.where((u & 0x7FFFFFFF) > 0x7F800000, (u & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), u)
    u = (u.astype(np.uint64) + (0x7FFF + ((u >> 16) & 1))) >> 16
    return u.astype(np.uint16)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_0_ref: per 32 values, d = amax/127 (f32), q =
    round-half-away-from-zero(x * (1/d)), then d stored as f16. Returns bytes as
    uint8 rows of 34 bytes per block."""
    blocks = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv_d = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    v = blocks * inv_d
    # roundf(): halves away from zero. (floor(a + 0.5) would be wrong for
    # a = 0.49999997, where a + 0.5 rounds up to 1 in f32.)
    a = np.abs(v)
    fl = np.floor(a)
    q = np.sign(v) * (fl + (a - fl >= np.float32(0.5)))
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8)
    out[:, 2:] = q.astype(np.int8).view(np.uint8)
    return out


def dequantize_q8_0(raw: np.ndarray) -> np.ndarray:
    """Reference Q8_0 dequantization (used by the tests): value = q * d."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(-1)


def encode_tensor(x: np.ndarray, ggml_type: GGMLType) -> np.ndarray:
    if ggml_type == GGMLType.F32:
        return np.ascontiguousarray(x, dtype="<f4")
    if ggml_type == GGMLType.F16:
        return f32_to_f16(x)
    if ggml_type == GGMLType.BF16:
        return f32_to_bf16(x)
    if ggml_type == GGMLType.Q8_0:
        return quantize_q8_0(x)
    raise ConvertError(f"internal error: no encoder for {ggml_type.name}")


# ---------------------------------------------------------------------------
# Model description


@dataclass
class HParams:
    n_layer: int
    n_ctx: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    n_vocab: int
    tied: bool
    rope_scaling: dict | None
    embedding: bool = False  # no lm_head; qwen3.pooling_type = last
    reranker: bool = False   # Qwen3-Reranker: qwen3.classifier.output_labels = RERANK_LABELS
    arch: str = ARCH  # the GGUF general.architecture: qwen3, qwen2 or qwen3moe
    n_expert: int = 0        # qwen3moe: experts per layer (num_experts)
    n_expert_used: int = 0   # qwen3moe: experts chosen per token (num_experts_per_tok)
    n_ff_exp: int = 0        # qwen3moe: an expert's FFN width (moe_intermediate_size)
    expert_weights_norm: bool = True  # qwen3moe: norm_topk_prob (renormalise the top k weights)


def _rope_scaling(config: dict, path) -> dict | None:
    """config.json's rope scaling as the GGUF keys Kipp and llama.cpp read, or None.

    Both forms: transformers < 5's "rope_scaling" dict and transformers 5's "rope_parameters"
    (which also holds rope_theta); "type" or "rope_type". yarn and linear are converted; any
    other type ("dynamic", "longrope", "llama3", ...) is refused by name. HF's explicit
    attention_factor (or mscale / mscale_all_dim) becomes yarn_attn_factor, the multiplier on
    YaRN's 0.1 ln(factor) + 1 that llama.cpp's --yarn-attn-factor means, so that
    Kipp's product equals HF's attention factor."""
    rs = config.get("rope_scaling")
    if rs is None:
        rs = config.get("rope_parameters")
    if rs is None:
        return None
    if not isinstance(rs, dict):
        raise ConvertError(f"config.json {path}: malformed rope scaling {rs!r}")
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind in ("default", None):
        return None
    if kind not in ("yarn", "linear"):
        raise ConvertError(f"config.json {path}: rope scaling type {kind!r} is not supported "
                           "(Kipp converts yarn and linear)")
    factor = rs.get("factor")
    if not isinstance(factor, (int, float)) or not factor >= 1:
        raise ConvertError(f"config.json {path}: {kind} rope scaling needs a 'factor' >= 1, not {factor!r}")
    out = {"type": kind, "factor": float(factor)}
    if kind == "linear":
        return out
    orig = rs.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))
    if orig is None:  # transformers' standardize_rope_params: the config's own limit
        orig = config.get("max_position_embeddings")
    if not isinstance(orig, int) or orig <= 0:
        raise ConvertError(f"config.json {path}: yarn rope scaling needs 'original_max_position_embeddings'")
    out["original_context_length"] = orig
    if rs.get("truncate", True) is not True:
        raise ConvertError(f"config.json {path}: yarn rope scaling with truncate false is not supported")

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn = rs.get("attention_factor")
    if attn is None and rs.get("mscale") and rs.get("mscale_all_dim"):
        attn = mscale(factor, rs["mscale"]) / mscale(factor, rs["mscale_all_dim"])
    if attn is not None:
        out["yarn_attn_factor"] = float(attn) / mscale(factor)
    for k in ("beta_fast", "beta_slow"):
        if rs.get(k):
            out["yarn_" + k] = float(rs[k])
    return out


def _require_int(config: dict, key: str, path: Path) -> int:
    v = config.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConvertError(f"config.json {path}: '{key}' must be a positive integer, got {v!r}")
    return v


def read_pooling(hf_dir: Path) -> str | None:
    """The sentence-transformers pooling mode (modules.json -> its Pooling module's
    config.json), or None when the checkpoint has no sentence-transformers config."""
    modules_path = hf_dir / "modules.json"
    if not modules_path.is_file():
        return None
    modules = json.loads(modules_path.read_text(encoding="utf-8"))
    for mod in modules if isinstance(modules, list) else []:
        if isinstance(mod, dict) and str(mod.get("type", "")).endswith(".Pooling"):
            cfg = read_json(hf_dir / str(mod.get("path", "")) / "config.json", "pooling config")
            on = [k[len("pooling_mode_"):] for k, v in sorted(cfg.items())
                  if k.startswith("pooling_mode_") and v is True]
            if len(on) != 1:
                raise ConvertError(f"{hf_dir}: the sentence-transformers pooling config names "
                                   f"{len(on)} pooling modes {on!r}; expected exactly one")
            return on[0]
    return None


def is_reranker(hf_dir: Path) -> bool:
    """A Qwen3-Reranker checkpoint: its README.md (the model card) has a heading that starts
    with "# Qwen3-Reranker" (config.json says only Qwen3ForCausalLM)."""
    readme = hf_dir / "README.md"
    if not readme.is_file():
        return False
    lines = readme.read_text(encoding="utf-8", errors="replace").splitlines()
    return any(line.lower().startswith("# qwen3-reranker") for line in lines)


def read_hparams(config: dict, path: Path, pooling: str | None = None) -> HParams:
    archs = config.get("architectures")
    if not isinstance(archs, list) or not ({HF_ARCH, HF_ARCH_EMBED, HF_ARCH_QWEN2, HF_ARCH_QWEN3MOE} & set(archs)):
        raise ConvertError(f"unsupported architecture {archs!r} in {path} (only {HF_ARCH}, "
                           f"{HF_ARCH_EMBED}, {HF_ARCH_QWEN2} and {HF_ARCH_QWEN3MOE} are supported)")
    qwen2 = HF_ARCH_QWEN2 in archs
    moe = HF_ARCH_QWEN3MOE in archs
    if (qwen2 or moe) and config.get("use_sliding_window"):
        raise ConvertError(f"config.json {path}: use_sliding_window=true is not supported (Kipp attends "
                           "over the whole context)")
    if pooling is not None and pooling != "lasttoken":
        raise ConvertError(f"{path}: sentence-transformers pooling mode {pooling!r} is not supported "
                           "(Kipp pools only 'lasttoken', as Qwen3-Embedding does)")
    n_head = _require_int(config, "num_attention_heads", path)
    n_embd = _require_int(config, "hidden_size", path)
    head_dim = config.get("head_dim") or n_embd // n_head
    n_head_kv = config.get("num_key_value_heads", n_head)
    rope_theta = config.get("rope_theta")
    if rope_theta is None:  # transformers >= 5 moves it into rope_parameters
        rope_theta = (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    rope_scaling = _rope_scaling(config, path)
    hp = HParams(
        n_layer=_require_int(config, "num_hidden_layers", path),
        n_ctx=_require_int(config, "max_position_embeddings", path),
        n_embd=n_embd,
        n_ff=_require_int(config, "intermediate_size", path),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        rms_eps=float(config.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope_theta),
        n_vocab=_require_int(config, "vocab_size", path),
        tied=bool(config.get("tie_word_embeddings", False)),
        rope_scaling=rope_scaling,
        embedding=HF_ARCH_EMBED in archs or pooling == "lasttoken",
        arch=ARCH_QWEN2 if qwen2 else ARCH_QWEN3MOE if moe else ARCH,
    )
    if qwen2 and hp.embedding:
        raise ConvertError(f"{path}: a Qwen2 embedding model is not supported")
    if moe:
        read_moe_hparams(config, path, hp)
    if not isinstance(hp.n_head_kv, int) or hp.n_head_kv <= 0 or hp.n_head % hp.n_head_kv:
        raise ConvertError(f"config.json {path}: num_key_value_heads {hp.n_head_kv!r} must divide "
                           f"num_attention_heads {hp.n_head}")
    if not qwen2 and config.get("attention_bias"):
        raise ConvertError(f"config.json {path}: attention_bias=true is not supported for {hp.arch}")
    return hp


def read_moe_hparams(config: dict, path: Path, hp: HParams) -> None:
    """Qwen3MoeConfig's expert fields into hp; refuses what GGUF qwen3moe cannot describe."""
    if hp.embedding:
        raise ConvertError(f"{path}: a Qwen3-MoE embedding model is not supported")
    # transformers 5 writes num_experts as num_local_experts (Qwen3MoeConfig's attribute_map)
    hp.n_expert = _require_int(config, "num_local_experts" if "num_experts" not in config else "num_experts", path)
    hp.n_expert_used = _require_int(config, "num_experts_per_tok", path)
    hp.n_ff_exp = _require_int(config, "moe_intermediate_size", path)
    if hp.n_expert_used > hp.n_expert:
        raise ConvertError(f"config.json {path}: num_experts_per_tok {hp.n_expert_used} exceeds num_experts "
                           f"{hp.n_expert}")
    # transformers' Qwen3MoeConfig defaults: decoder_sparse_step 1, mlp_only_layers [], norm_topk_prob false
    mlp_only = config.get("mlp_only_layers") or []
    if mlp_only:
        raise ConvertError(f"config.json {path}: mlp_only_layers={mlp_only!r} is not supported (qwen3moe has "
                           "no dense layers: every layer's FFN must be sparse)")
    step = config.get("decoder_sparse_step", 1)
    if step != 1:
        raise ConvertError(f"config.json {path}: decoder_sparse_step={step!r} is not supported (qwen3moe has "
                           "no dense layers: it must be 1)")
    shared = {k: config[k] for k in ("shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts")
              if config.get(k)}
    if shared:
        raise ConvertError(f"config.json {path}: shared experts ({', '.join(f'{k}={v!r}' for k, v in shared.items())}) "
                           "are not supported (qwen3moe has none)")
    norm = config.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise ConvertError(f"config.json {path}: 'norm_topk_prob' must be true or false, got {norm!r}")
    hp.expert_weights_norm = norm


# Per-layer tensors: (GGUF suffix, HF suffix, PyTorch shape function). The order
# here is the order in the output file.
_LAYER_TENSORS = [
    ("attn_norm.weight", "input_layernorm.weight", lambda h: (h.n_embd,)),
    ("attn_q.weight", "self_attn.q_proj.weight", lambda h: (h.n_head * h.head_dim, h.n_embd)),
    ("attn_k.weight", "self_attn.k_proj.weight", lambda h: (h.n_head_kv * h.head_dim, h.n_embd)),
    ("attn_v.weight", "self_attn.v_proj.weight", lambda h: (h.n_head_kv * h.head_dim, h.n_embd)),
    ("attn_q_norm.weight", "self_attn.q_norm.weight", lambda h: (h.head_dim,)),
    ("attn_k_norm.weight", "self_attn.k_norm.weight", lambda h: (h.head_dim,)),
    ("attn_output.weight", "self_attn.o_proj.weight", lambda h: (h.n_embd, h.n_head * h.head_dim)),
    ("ffn_norm.weight", "post_attention_layernorm.weight", lambda h: (h.n_embd,)),
    ("ffn_gate.weight", "mlp.gate_proj.weight", lambda h: (h.n_ff, h.n_embd)),
    ("ffn_up.weight", "mlp.up_proj.weight", lambda h: (h.n_ff, h.n_embd)),
    ("ffn_down.weight", "mlp.down_proj.weight", lambda h: (h.n_embd, h.n_ff)),
]


# Qwen2's: no q/k norms; q/k/v biases after the attention weights (llama.cpp's order)
_LAYER_TENSORS_QWEN2 = [t for t in _LAYER_TENSORS if "_norm.weight" not in t[0] or t[0] in
                        ("attn_norm.weight", "ffn_norm.weight")]
_LAYER_TENSORS_QWEN2[4:4] = [
    ("attn_q.bias", "self_attn.q_proj.bias", lambda h: (h.n_head * h.head_dim,)),
    ("attn_k.bias", "self_attn.k_proj.bias", lambda h: (h.n_head_kv * h.head_dim,)),
    ("attn_v.bias", "self_attn.v_proj.bias", lambda h: (h.n_head_kv * h.head_dim,)),
]


# Qwen3-MoE's: qwen3's attention and norms, then the router and the stacked experts. The
# experts' HF "name" is a pattern (with EXPERT_MARK): the tensor is assembled from the
# per-expert tensors (or sliced from the fused ones) by expert_loader().
EXPERT_MARK = ".experts.*."
_LAYER_TENSORS_QWEN3MOE = [t for t in _LAYER_TENSORS if not t[0].startswith("ffn_") or t[0] == "ffn_norm.weight"] + [
    ("ffn_gate_inp.weight", "mlp.gate.weight", lambda h: (h.n_expert, h.n_embd)),
    ("ffn_gate_exps.weight", "mlp.experts.*.gate_proj.weight", lambda h: (h.n_expert, h.n_ff_exp, h.n_embd)),
    ("ffn_up_exps.weight", "mlp.experts.*.up_proj.weight", lambda h: (h.n_expert, h.n_ff_exp, h.n_embd)),
    ("ffn_down_exps.weight", "mlp.experts.*.down_proj.weight", lambda h: (h.n_expert, h.n_embd, h.n_ff_exp)),
]
_LAYER_TABLES = {ARCH: _LAYER_TENSORS, ARCH_QWEN2: _LAYER_TENSORS_QWEN2, ARCH_QWEN3MOE: _LAYER_TENSORS_QWEN3MOE}


def tensor_plan(hp: HParams, prefix: str = "model.") -> list[tuple[str, str, tuple[int, ...]]]:
    """(GGUF name, HF name, expected PyTorch shape), in output order. prefix: "model." for
    Qwen3ForCausalLM; "" for a checkpoint saved from a bare Qwen3Model (Qwen3-Embedding).
    A qwen3moe expert tensor's HF name is a pattern with ".experts.*." (see expert_loader)."""
    plan = [("token_embd.weight", f"{prefix}embed_tokens.weight", (hp.n_vocab, hp.n_embd))]
    for i in range(hp.n_layer):
        for gname, hname, shape in _LAYER_TABLES[hp.arch]:
            plan.append((f"blk.{i}.{gname}", f"{prefix}layers.{i}.{hname}", shape(hp)))
    plan.append(("output_norm.weight", f"{prefix}norm.weight", (hp.n_embd,)))
    if not hp.tied and not hp.embedding:
        plan.append(("output.weight", "lm_head.weight", (hp.n_vocab, hp.n_embd)))
    return plan


def stored_type(gguf_name: str, shape: tuple[int, ...], weight_type: GGMLType) -> GGMLType:
    """1-D tensors, norms and the MoE router (ffn_gate_inp) stay F32 (as in
    convert_hf_to_gguf.py); Q8_0 falls back to F16 for a row length that is not a multiple
    of 32 (same rule; a 3-D expert tensor's rows are its last PyTorch dimension)."""
    if len(shape) <= 1 or gguf_name.endswith("_norm.weight") or gguf_name.endswith("ffn_gate_inp.weight"):
        return GGMLType.F32
    if weight_type == GGMLType.Q8_0 and shape[-1] % 32 != 0:
        print(f"convert_to_gguf: warning: {gguf_name} row length {shape[-1]} is not a multiple of 32, "
              "storing it as F16", file=sys.stderr)
        return GGMLType.F16
    return weight_type


def expert_loader(sources: dict[str, SourceTensor], pattern: str, gname: str, hp: HParams, hf_dir: Path):
    """For a qwen3moe expert tensor (pattern "<layer>.mlp.experts.*.<gate|up|down>_proj.weight"):
    (load() -> float32 [experts, ...] in expert order, the source tensor names it reads).
    The Hub's per-expert tensors are stacked; without them, transformers 5's fused tensors
    are sliced: mlp.experts.gate_up_proj [E, 2*Fe, H] holds each expert's gate rows, then its
    up rows (Concatenate(dim=1) in its conversion mapping); mlp.experts.down_proj is [E, H, Fe].
    Either name may carry a ".weight" suffix (llama.cpp accepts both)."""
    head, tail = pattern.split(EXPERT_MARK)
    proj = tail[:-len("_proj.weight")]  # gate, up or down
    E, Fe, H = hp.n_expert, hp.n_ff_exp, hp.n_embd
    per = [f"{head}.experts.{j}.{tail}" for j in range(E)]
    want = (H, Fe) if proj == "down" else (Fe, H)
    present = [n for n in per if n in sources]
    fused_base = f"{head}.experts.{'down_proj' if proj == 'down' else 'gate_up_proj'}"
    fused = next((n for n in (fused_base, fused_base + ".weight") if n in sources), None)
    if present or fused is None:
        missing = [n for n in per if n not in sources]
        if missing:
            raise ConvertError(f"missing tensor {missing[0]!r} (for {gname}; {len(missing)} of its {E} experts "
                               f"missing) in {hf_dir}")
        for n in per:
            if sources[n].shape != want:
                raise ConvertError(f"tensor {n!r} has shape {list(sources[n].shape)}, expected {list(want)} "
                                   "from config.json")
        return (lambda: np.stack([load_f32(sources[n]) for n in per])), per
    fshape = (E, H, Fe) if proj == "down" else (E, 2 * Fe, H)
    if sources[fused].shape != fshape:
        raise ConvertError(f"tensor {fused!r} has shape {list(sources[fused].shape)}, expected {list(fshape)} "
                           "from config.json")
    if proj == "down":
        return (lambda: load_f32(sources[fused])), [fused]
    rows = slice(0, Fe) if proj == "gate" else slice(Fe, 2 * Fe)
    return (lambda: np.ascontiguousarray(load_f32(sources[fused])[:, rows, :])), [fused]


# ---------------------------------------------------------------------------
# Tokenizer metadata


def _template_eos(tok: dict, content_to_id: dict[str, int], special: dict[str, int],
                  add_special: dict[str, bool], hf_dir: Path) -> None:
    """Qwen3-Embedding's tokenizer.json appends <|endoftext|> to every input through a
    TemplateProcessing post-processor (single = [$A, <|endoftext|>]); its last token is the
    one pooled. As gguf-py does (llama.cpp #14314), that token becomes the EOS and
    add_eos_token is set. A template that adds anything else is refused: Kipp would not
    reproduce it."""
    pp = tok.get("post_processor") or {}
    procs = pp.get("processors", []) if pp.get("type") == "Sequence" else [pp]
    for proc in procs:
        if not isinstance(proc, dict) or proc.get("type") != "TemplateProcessing":
            continue
        single = proc.get("single") or []
        if (len(single) == 2 and "Sequence" in single[0] and "SpecialToken" in single[1]):
            text = single[1]["SpecialToken"].get("id")
            if text not in content_to_id:
                raise ConvertError(f"{hf_dir / 'tokenizer.json'}: the post-processor appends "
                                   f"{text!r}, which is not an added token")
            special["eos"] = content_to_id[text]
            add_special["eos"] = True
        elif not (len(single) == 1 and "Sequence" in single[0]):
            raise ConvertError(f"{hf_dir / 'tokenizer.json'}: a TemplateProcessing post-processor "
                               f"with single = {single!r} is not supported (only [$A] or "
                               "[$A, <special token>])")


def _looks_special(text: str) -> bool:
    """convert_hf_to_gguf.py's does_token_look_special()."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


@dataclass
class Vocab:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    special_ids: dict[str, int]      # in insertion order: eos, pad, bos, ... (as gguf-py)
    add_special: dict[str, bool]
    chat_template: str | None


def _token_content(entry) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


def read_vocab(hf_dir: Path, config: dict, n_vocab: int) -> Vocab:
    tok_path = hf_dir / "tokenizer.json"
    tok = read_json(tok_path, "tokenizer file")
    tok_cfg = read_json(hf_dir / "tokenizer_config.json", "tokenizer config")
    gen_path = hf_dir / "generation_config.json"
    gen_cfg = read_json(gen_path, "generation config") if gen_path.is_file() else {}

    model = tok.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ConvertError(f"unsupported tokenizer in {tok_path}: expected a byte-level BPE model with a vocab")
    pattern = json.dumps(tok.get("pre_tokenizer"))
    if json.dumps(QWEN2_PRETOKENIZER_REGEX)[1:-1] not in pattern:
        raise ConvertError(f"unsupported pre-tokenizer in {tok_path}: the Qwen2 split regex was not found "
                           "(tokenizer.ggml.pre would be wrong)")

    id_to_text: dict[int, str] = {}
    added = {}
    try:
        for text, tid in model["vocab"].items():
            id_to_text[int(tid)] = text
        for entry in tok.get("added_tokens", []):
            tid, text = int(entry["id"]), entry["content"]
            if not isinstance(text, str):
                raise TypeError
            id_to_text[tid] = text
            added[tid] = entry
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ConvertError(f"malformed vocab or added_tokens in {tok_path}") from None
    if id_to_text and min(id_to_text) < 0:
        raise ConvertError(f"tokenizer {tok_path} has a negative token id")
    if id_to_text and max(id_to_text) >= n_vocab:
        raise ConvertError(f"tokenizer {tok_path} has token id {max(id_to_text)} >= vocab_size {n_vocab}")

    tokens, types = [], []
    for i in range(n_vocab):
        if i not in id_to_text:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
        elif i in added:
            tokens.append(id_to_text[i])
            types.append(TOKEN_CONTROL if added[i].get("special") or _looks_special(id_to_text[i])
                         else TOKEN_USER_DEFINED)
        else:
            tokens.append(id_to_text[i])
            types.append(TOKEN_NORMAL)

    raw_merges = model.get("merges") or []
    merges = []
    for m in raw_merges:
        if isinstance(m, str):
            merges.append(m)
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(s, str) for s in m):
            # newer tokenizers store pairs; spaces inside a part are encoded as U+0120 like gguf-py does
            merges.append(" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in m))
        else:
            raise ConvertError(f"malformed merges in {tok_path}: entry {m!r}")
    if not merges:
        raise ConvertError(f"tokenizer {tok_path} has no BPE merges")

    # Special token ids follow gguf-py's SpecialVocab: tokenizer_config first
    # (text looked up among added tokens), then config.json *_token_id. As a
    # last resort we also accept generation_config.json.
    content_to_id: dict[str, int] = {}
    for entry in tok.get("added_tokens", []):  # first match wins, as in gguf-py
        content_to_id.setdefault(entry["content"], int(entry["id"]))
    special: dict[str, int] = {}
    add_special: dict[str, bool] = {}
    kinds = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
    for kind in kinds:
        add_entry = tok_cfg.get(f"add_{kind}_token")
        if isinstance(add_entry, bool):
            add_special[kind] = add_entry
        text = _token_content(tok_cfg.get(f"{kind}_token"))
        if text is not None and text in content_to_id:
            special[kind] = content_to_id[text]
    for source in (config, gen_cfg):
        for kind in kinds:
            tid = source.get(f"{kind}_token_id")
            if isinstance(tid, list) and source is gen_cfg and tid:
                tid = tid[0]
            if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid < n_vocab and kind not in special:
                special[kind] = tid

    _template_eos(tok, content_to_id, special, add_special, hf_dir)

    chat_template = tok_cfg.get("chat_template")
    if isinstance(chat_template, list):  # [{"name":..., "template":...}]
        chat_template = next((t.get("template") for t in chat_template if t.get("name") == "default"), None)
    if chat_template is None and (hf_dir / "chat_template.jinja").is_file():
        chat_template = (hf_dir / "chat_template.jinja").read_text(encoding="utf-8")
    if chat_template is not None and not isinstance(chat_template, str):
        raise ConvertError(f"malformed chat_template in {hf_dir / 'tokenizer_config.json'}")
    return Vocab(tokens, types, merges, special, add_special, chat_template)


# ---------------------------------------------------------------------------
# Conversion


def add_tokenizer_kv(w: GGUFWriter, vocab) -> None:
    """The tokenizer.* metadata of a Qwen3 GGUF (llama.cpp's gpt2/qwen2 BPE keys), shared by
    this converter and tools/make_random_model.py."""
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", ValueType.STRING, vocab.tokens)
    w.add_array("tokenizer.ggml.token_type", ValueType.INT32, vocab.token_types)
    w.add_array("tokenizer.ggml.merges", ValueType.STRING, vocab.merges)
    key_names = {"pad": "padding"}
    for kind, tid in vocab.special_ids.items():
        w.add_uint32(f"tokenizer.ggml.{key_names.get(kind, kind)}_token_id", tid)
    for kind, flag in vocab.add_special.items():
        w.add_bool(f"tokenizer.ggml.add_{kind}_token", flag)
    if vocab.chat_template is not None:
        w.add_string("tokenizer.chat_template", vocab.chat_template)


def build_writer(hf_dir: Path, outtype: str, name: str | None = None):
    """Returns (writer, tensor_data callback) without writing anything."""
    if not hf_dir.is_dir():
        raise ConvertError(f"missing checkpoint directory: {hf_dir}")
    if outtype not in OUTTYPES:
        raise ConvertError(f"unsupported outtype {outtype!r} (choose from {', '.join(OUTTYPES)})")
    weight_type, ftype = OUTTYPES[outtype]
    config_path = hf_dir / "config.json"
    config = read_json(config_path, "model config")
    hp = read_hparams(config, config_path, read_pooling(hf_dir))
    hp.reranker = is_reranker(hf_dir)
    if hp.reranker and (hp.arch != ARCH or hp.embedding):
        raise ConvertError(f"{hf_dir}: README.md names a Qwen3-Reranker, but config.json is not a "
                           f"{HF_ARCH} (a reranker is scored by its lm_head's yes/no logits)")
    vocab = read_vocab(hf_dir, config, hp.n_vocab)
    sources = load_source_tensors(hf_dir)

    # Qwen3Model.save_pretrained writes names without the "model." of Qwen3ForCausalLM
    prefix = "" if "embed_tokens.weight" in sources and "model.embed_tokens.weight" not in sources \
        else "model."
    plan = tensor_plan(hp, prefix)
    wanted: set[str] = set()
    loaders = {}  # GGUF name -> () -> float32 array in PyTorch shape
    for gname, hname, shape in plan:
        if EXPERT_MARK in hname:
            loaders[gname], used = expert_loader(sources, hname, gname, hp, hf_dir)
            wanted.update(used)
            continue
        if hname not in sources:
            raise ConvertError(f"missing tensor {hname!r} (for {gname}) in {hf_dir}")
        if sources[hname].shape != shape:
            raise ConvertError(f"tensor {hname!r} has shape {list(sources[hname].shape)}, "
                               f"expected {list(shape)} from config.json")
        loaders[gname] = (lambda t=sources[hname]: load_f32(t))
        wanted.add(hname)
    # an embedding model's lm_head (if a checkpoint carries one) is never used: dropped
    ignorable = {"lm_head.weight"} if hp.tied or hp.embedding else set()
    extra = sorted(n for n in sources if n not in wanted and n not in ignorable
                   and not n.endswith("rotary_emb.inv_freq"))
    if extra:
        raise ConvertError(f"unexpected tensor {extra[0]!r} in {hf_dir} ({len(extra)} unexpected in total); "
                           "this converter handles dense Qwen3 (without biases), Qwen2 and Qwen3-MoE "
                           "(without shared experts)")

    w = GGUFWriter()
    w.add_string("general.architecture", hp.arch)
    w.add_string("general.type", "model")
    w.add_string("general.name", name or hf_dir.resolve().name)
    add_hparams_kv(w, hp, ftype)
    add_tokenizer_kv(w, vocab)

    for gname, hname, shape in plan:
        w.add_tensor_info(gname, shape, stored_type(gname, shape, weight_type))

    def tensor_data(info: TensorInfo) -> np.ndarray:
        return encode_tensor(loaders[info.name](), info.ggml_type)

    return w, tensor_data


def add_hparams_kv(w: GGUFWriter, hp: HParams, ftype: int) -> None:
    """The architecture's keys and general.file_type / quantization_version, in the order
    llama.cpp's converter writes them; shared with tools/make_random_model.py."""
    arch = hp.arch
    w.add_uint32(f"{arch}.block_count", hp.n_layer)
    w.add_uint32(f"{arch}.context_length", hp.n_ctx)
    w.add_uint32(f"{arch}.embedding_length", hp.n_embd)
    w.add_uint32(f"{arch}.feed_forward_length", hp.n_ff)
    w.add_uint32(f"{arch}.attention.head_count", hp.n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", hp.n_head_kv)
    w.add_float32(f"{arch}.rope.freq_base", hp.rope_theta)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", hp.rms_eps)
    if arch == ARCH_QWEN3MOE:
        w.add_uint32(f"{arch}.expert_count", hp.n_expert)
        w.add_uint32(f"{arch}.expert_used_count", hp.n_expert_used)
    w.add_uint32(f"{arch}.attention.key_length", hp.head_dim)
    w.add_uint32(f"{arch}.attention.value_length", hp.head_dim)
    if hp.rope_scaling is not None:  # llama.cpp's keys (gguf-py constants ROPE_SCALING_*)
        rs = hp.rope_scaling
        w.add_string(f"{arch}.rope.scaling.type", rs["type"])
        w.add_float32(f"{arch}.rope.scaling.factor", float(rs["factor"]))
        if rs.get("original_context_length"):
            w.add_uint32(f"{arch}.rope.scaling.original_context_length", int(rs["original_context_length"]))
        for k in ("yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"):
            if k in rs:
                w.add_float32(f"{arch}.rope.scaling.{k}", float(rs[k]))
    if hp.embedding:
        w.add_uint32(f"{arch}.pooling_type", POOLING_LAST)
    if hp.reranker:
        w.add_array(f"{arch}.classifier.output_labels", ValueType.STRING, RERANK_LABELS)
    w.add_uint32("general.file_type", ftype)
    if arch == ARCH_QWEN3MOE:  # llama.cpp writes it here (Qwen2MoeModel.set_gguf_parameters)
        w.add_uint32(f"{arch}.expert_feed_forward_length", hp.n_ff_exp)
        w.add_bool(f"{arch}.expert_weights_norm", hp.expert_weights_norm)  # Kipp's addition
    w.add_uint32("general.quantization_version", GGML_QUANT_VERSION)


def _progress_bar(tqdm, label: str):
    def wrap(items):
        return tqdm(items, desc=f"writing {label}", unit="tensor", file=sys.stderr, leave=False)
    return wrap


def default_name(name: str, outtype: str) -> str:
    """kipp-NAME-TYPE.gguf; Kipp's own models (NAME kipp-*) keep their name: kipp-tiny-bf16.gguf."""
    return f"{name}-{outtype}.gguf" if name.startswith("kipp-") else f"kipp-{name}-{outtype}.gguf"


def convert(hf_dir: Path, outtype: str, outfile: Path | None = None, progress: bool = True) -> Path:
    hf_dir = Path(hf_dir)
    writer, tensor_data = build_writer(hf_dir, outtype)
    if outfile is None:
        outfile = hf_dir / default_name(hf_dir.resolve().name, outtype)
    outfile = Path(outfile)
    if not outfile.parent.is_dir():
        raise ConvertError(f"missing output directory: {outfile.parent}")
    wrap = None
    if progress:
        from tqdm import tqdm
        wrap = _progress_bar(tqdm, outfile.name)
    write_atomic(writer, outfile, tensor_data, progress=wrap)
    return outfile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir", type=Path, help="Hugging Face checkpoint directory")
    ap.add_argument("--outtype", default="bf16", help="f32, f16, bf16 or q8_0 (default bf16)")
    ap.add_argument("--outfile", type=Path, help="output path (default HF_DIR/kipp-<dirname>-<outtype>.gguf)")
    ap.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    args = ap.parse_args(argv)
    try:
        out = convert(args.hf_dir, args.outtype, args.outfile, progress=not args.no_progress)
    except (ConvertError, GGUFWriteError) as exc:
        print(f"convert_to_gguf: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"convert_to_gguf: error: {exc.strerror or exc}: {exc.filename or ''}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {args.outtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
