#!/usr/bin/env python3
"""Writes a tiny qwen3 GGUF with gguf-py's GGUFWriter (the llama.cpp project's writer).

Purpose: an independently written GGUF for interop checks. The C loader must
accept it (tests/tools/test_interop_c.py), and test_convert.py checks that its
tensors and metadata equal what tools/convert_to_gguf.py writes. So this file
deliberately shares no code with our converter: it parses safetensors with its
own few lines, maps names with gguf-py's TensorNameMap, and takes merges,
special ids and the chat template from gguf-py's SpecialVocab.

It does not aim to be a general converter: Qwen3 dense only, no error handling
beyond what the tests need.

Usage: make_gguf_with_gguf_py.py OUT [--checkpoint DIR] [--outtype f32|f16|bf16|q8_0]
(default checkpoint: models/tiny-tied, created if missing)
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

FTYPES = {
    "f32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (gguf.GGMLQuantizationType.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """name -> float32 array (bf16/f16/f32 sources)."""
    buf = path.read_bytes()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = buf[8 + n + b:8 + n + end]
        if e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4").copy()
        else:
            raise SystemExit(f"unsupported dtype {e['dtype']}")
        out[name] = a.reshape(e["shape"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--checkpoint", type=Path, default=REPO_ROOT / "models" / "tiny-tied")
    ap.add_argument("--outtype", choices=sorted(FTYPES), default="f32")
    args = ap.parse_args()
    ckpt: Path = args.checkpoint
    if not (ckpt / "config.json").is_file() and ckpt.name == "tiny-tied":
        subprocess.run([sys.executable, "-m", "tools.make_tiny_checkpoint",
                        "--name", "tiny-tied", "--out", str(ckpt.resolve())], check=True, cwd=REPO_ROOT)

    cfg = json.loads((ckpt / "config.json").read_text())
    qtype, ftype = FTYPES[args.outtype]
    n_vocab = cfg["vocab_size"]

    tensors: dict[str, np.ndarray] = {}
    index = ckpt / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() \
        else ["model.safetensors"]
    for f in files:
        tensors.update(read_safetensors(ckpt / f))

    w = gguf.GGUFWriter(str(args.out), "qwen3")
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(ckpt.resolve().name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(ftype)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tok = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    id_to_text = {v: k for k, v in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    tokens, types = [], []
    for i in range(n_vocab):
        if i in added:
            t = added[i]["content"]
            special = added[i]["special"] or (t.startswith("<|") and t.endswith("|>"))
            tokens.append(t)
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        elif i in id_to_text:
            tokens.append(id_to_text[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(ckpt, load_merges=True, n_vocab=n_vocab).add_to_gguf(w, quiet=True)

    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, cfg["num_hidden_layers"])
    for hf_name in sorted(tensors):
        if hf_name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        new_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise SystemExit(f"cannot map tensor {hf_name}")
        data = tensors[hf_name]
        if data.ndim <= 1 or new_name.endswith("_norm.weight"):
            w.add_tensor(new_name, data.astype(np.float32))
        elif qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(new_name, data.astype(np.float32))
        else:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor(new_name, q, raw_dtype=qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
