"""tools/quantize.py on Qwen3-MoE (qwen3moe) files: the router stays F32, the 3-D expert
tensors are quantized row by row (rows of ne[0], expert after expert), and the type mix
follows llama-quantize's, MoE rules included (ffn_down_exps as ffn_down; Mixtral's 8-expert
rules for attn_v, attn_k and attn_output). The expected mixes are written out by hand from
llama.cpp's llama_tensor_get_type (src/llama-quant.cpp, llama-cpp-python 0.3.36's tree);
where that tree's llama-quantize has been built (bench/README.md), test_mix_matches_llama_quantize
also compares every ftype with it directly.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from tools import convert_to_gguf as conv
from tools import kipp_quants as kq
from tools import quantize as qz
from tools.kipp_gguf_writer import GGMLType, GGUFWriter
from conftest import gguf_reader, run_module
from random_model_helpers import dequant_gguf_py, kipp_dequant, raw_bytes, tensors  # noqa: F401

Q = gguf.GGMLQuantizationType
LLAMA_QUANTIZE = Path(os.environ.get(
    "LLAMA_QUANTIZE", "/tmp/lsrv/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-quantize"))


def write_moe_model(path: Path, n_expert: int, width: int = 256, ffn_exp: int = 256, n_layers: int = 8,
                    tied: bool = True) -> Path:
    """A qwen3moe bf16 GGUF with the converter's keys and tensor plan (no tokenizer: neither
    quantizer reads it): 4 heads of 64 over 2 KV heads (gqa 2), a 64-token vocabulary, top-2."""
    hp = conv.HParams(n_layer=n_layers, n_ctx=512, n_embd=width, n_ff=512, n_head=4, n_head_kv=2, head_dim=64,
                      rms_eps=1e-6, rope_theta=1e6, n_vocab=64, tied=tied, rope_scaling=None,
                      arch=conv.ARCH_QWEN3MOE, n_expert=n_expert, n_expert_used=2, n_ff_exp=ffn_exp)
    w = GGUFWriter()
    w.add_string("general.architecture", hp.arch)
    w.add_string("general.name", path.stem)
    conv.add_hparams_kv(w, hp, 32)
    rng = np.random.default_rng(n_expert)
    data = {}
    for name, _, shape in conv.tensor_plan(hp):
        t = conv.stored_type(name, shape, GGMLType.BF16)
        w.add_tensor_info(name, shape, t)
        x = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        data[name] = x if t == GGMLType.F32 else kq.f32_to_bf16(x)
    w.write(path, lambda info: data[info.name])
    return path


@pytest.fixture(scope="module")
def moe8(tmp_path_factory) -> Path:
    return write_moe_model(tmp_path_factory.mktemp("moe") / "moe8-bf16.gguf", 8)


@pytest.fixture(scope="module")
def moe16(tmp_path_factory) -> Path:
    return write_moe_model(tmp_path_factory.mktemp("moe") / "moe16-bf16.gguf", 16)


def types_of(path: Path) -> dict[str, str]:
    return {n: GGMLType(t.type_id).name for n, t in tensors(path).items()}


MB = {0, 3, 6, 7}  # use_more_bits over 8 layers
ALL = range(8)
# qtype -> (base, per-kind exceptions {kind: {layer: type}}, token_embd (tied: the output))
MIX = {
    # 16 experts: the dense rules, ffn_down_exps as ffn_down, gate/up exps the base type
    (16, "q4_k_m"): ("Q4_K", {"attn_v": dict.fromkeys(MB, "Q6_K"), "ffn_down_exps": dict.fromkeys(MB, "Q6_K")}, "Q6_K"),
    (16, "q3_k_m"): ("Q3_K", {"attn_v": {0: "Q5_K", 1: "Q5_K", **dict.fromkeys(range(2, 8), "Q4_K")},
                              "ffn_down_exps": dict.fromkeys(ALL, "Q4_K"), "attn_output": dict.fromkeys(ALL, "Q4_K")},
                     "Q6_K"),
    (16, "q4_0"): ("Q4_0", {}, "Q6_K"),
    (16, "q8_0"): ("Q8_0", {}, "Q8_0"),
    # 8 experts: attn_v and attn_k Q8_0 whatever the type; attn_output Q5_K in the listed types
    (8, "q4_k_m"): ("Q4_K", {"attn_v": dict.fromkeys(ALL, "Q8_0"), "attn_k": dict.fromkeys(ALL, "Q8_0"),
                             "attn_output": dict.fromkeys(ALL, "Q5_K"), "ffn_down_exps": dict.fromkeys(MB, "Q6_K")},
                    "Q6_K"),
    (8, "q3_k_l"): ("Q3_K", {"attn_v": dict.fromkeys(ALL, "Q8_0"), "attn_k": dict.fromkeys(ALL, "Q8_0"),
                             "ffn_down_exps": dict.fromkeys(ALL, "Q5_K")}, "Q6_K"),
    (8, "q5_k_m"): ("Q5_K", {"attn_v": dict.fromkeys(ALL, "Q8_0"), "attn_k": dict.fromkeys(ALL, "Q8_0"),
                             "ffn_down_exps": dict.fromkeys(MB, "Q6_K")}, "Q6_K"),
    (8, "q4_0"): ("Q4_0", {"attn_v": dict.fromkeys(ALL, "Q8_0"), "attn_k": dict.fromkeys(ALL, "Q8_0")}, "Q6_K"),
    (8, "q8_0"): ("Q8_0", {}, "Q8_0"),
}


@pytest.mark.parametrize("n_expert, qtype", list(MIX))
def test_moe_mix(moe8, moe16, n_expert, qtype):
    src = moe8 if n_expert == 8 else moe16
    got = {t.name: g.name for t, g in qz.plan(qz.read_model(src), qtype)}
    base, rules, embd = MIX[n_expert, qtype]
    want = {}
    for name, t in tensors(src).items():
        if len(t.ne) == 1 or name.endswith("ffn_gate_inp.weight"):
            want[name] = "F32"
        elif name == "token_embd.weight":
            want[name] = embd
        else:
            _, i, kind, _ = name.split(".")
            want[name] = rules.get(kind, {}).get(int(i), base)
    assert got == want


def test_router_never_quantized(tmp_path):
    """ffn_gate_inp keeps its type whatever the ftype (llama.cpp's tensor_allows_quantization),
    here even with rows of 256 that every type could hold."""
    src = write_moe_model(tmp_path / "m.gguf", 16, n_layers=2)
    for qtype in qz.FTYPES:
        plan = {t.name: g for t, g in qz.plan(qz.read_model(src), qtype)}
        assert plan["blk.0.ffn_gate_inp.weight"] == GGMLType.F32 and plan["blk.1.ffn_gate_inp.weight"] == GGMLType.F32


@pytest.mark.parametrize("qtype", ["q4_k_m", "q4_0"])
def test_expert_tensors_quantized_row_by_row(moe16, kipp_dequant, tmp_path, qtype):  # noqa: F811
    """A 3-D expert tensor's bytes are those of its experts' matrices quantized one after the
    other (rows of ne[0]); gguf-py and Kipp's C dequantizer decode each expert to within the
    type's error of its source; the router's bytes are copied unchanged."""
    out = qz.quantize_file(moe16, tmp_path / f"moe16-{qtype}.gguf", qtype, progress=False)
    src_t, out_t = tensors(moe16), tensors(out)
    for name in ("blk.3.ffn_gate_exps.weight", "blk.3.ffn_up_exps.weight", "blk.3.ffn_down_exps.weight"):
        t, s = out_t[name], src_t[name]
        assert t.ne == s.ne and len(t.ne) == 3 and t.ne[2] == 16
        ref = dequant_gguf_py(moe16, s)  # [E, rows, cols], bf16 values
        qt = GGMLType(t.type_id)
        per_expert = np.concatenate([kq.encode(ref[j], qt).reshape(-1) for j in range(16)])
        assert np.array_equal(raw_bytes(out, t), per_expert), name
        got = dequant_gguf_py(out, t)
        np.testing.assert_array_equal(kipp_dequant(raw_bytes(out, t), t.type_id, got.size), got.reshape(-1))
        for j in (0, 7, 15):
            e = np.sqrt(np.mean((got[j] - ref[j]) ** 2) / np.mean(ref[j] ** 2))
            assert e < 0.1, (name, j, e)
    r = out_t["blk.3.ffn_gate_inp.weight"]
    assert r.type_id == GGMLType.F32 and np.array_equal(raw_bytes(out, r), raw_bytes(moe16, src_t[r.name]))


def test_tiny_moe_checkpoint_quantizes(converted, tmp_path):
    """tiny-moe (rows of 64 and an expert ffn of 32: the K-quants fall back) in q4_k_m and
    q4_0 through the CLI; gguf-py reads the file; the 8-expert rules and the fallbacks."""
    src = converted("tiny-moe", "bf16")
    dst = tmp_path / "tiny-moe-q4_k_m.gguf"
    res = run_module("tools.quantize", src, dst, "--type", "q4_k_m", "--no-progress")
    assert res.returncode == 0, res.stderr
    got = {t.name: t.tensor_type.name for t in gguf_reader(dst).tensors}
    assert got["blk.0.ffn_gate_inp.weight"] == "F32"
    assert got["blk.0.attn_v.weight"] == got["blk.0.attn_k.weight"] == "Q8_0"   # 8 experts
    assert got["blk.0.attn_output.weight"] == "Q5_1"       # Q5_K, rows of 128: llama.cpp's fallback
    assert got["blk.1.ffn_down_exps.weight"] == "Q8_0"     # more bits: Q6_K -> Q8_0 (rows of 32)
    assert got["blk.0.ffn_down_exps.weight"] == "Q8_0"     # Q4_K -> Kipp's Q8_0 (llama.cpp: Q5_0)
    assert got["blk.0.ffn_gate_exps.weight"] == got["blk.0.ffn_up_exps.weight"] == "Q8_0"
    assert got["token_embd.weight"] == "Q8_0"
    q40 = {t.name: g.name for t, g in qz.plan(qz.read_model(src), "q4_0")}
    assert q40["blk.1.ffn_up_exps.weight"] == q40["blk.1.ffn_down_exps.weight"] == "Q4_0"
    assert q40["blk.1.ffn_gate_inp.weight"] == "F32" and q40["blk.1.attn_v.weight"] == "Q8_0"


def _llama_quantize(src: Path, dst: Path, qtype: str) -> dict[str, str]:
    res = subprocess.run([str(LLAMA_QUANTIZE), str(src), str(dst), qtype.upper(), "1"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return types_of(dst)


@pytest.mark.skipif(not LLAMA_QUANTIZE.is_file(), reason=f"llama-quantize not built at {LLAMA_QUANTIZE} "
                    "(set LLAMA_QUANTIZE)")
@pytest.mark.parametrize("which", ["moe8", pytest.param("moe16", marks=pytest.mark.full)])
def test_mix_matches_llama_quantize(request, tmp_path, which):
    """Every ftype, tensor for tensor, as llama-quantize chooses (rows of 256: no fallbacks,
    where Kipp differs from llama.cpp on purpose, see tools/quantize.py)."""
    src = request.getfixturevalue(which)
    for qtype in qz.FTYPES:
        theirs = _llama_quantize(src, tmp_path / f"{qtype}.gguf", qtype)
        ours = {t.name: g.name for t, g in qz.plan(qz.read_model(src), qtype)}
        assert ours == theirs, (qtype, {n: (ours[n], theirs[n]) for n in ours if ours[n] != theirs[n]})
