"""Helpers shared by test_random_model.py and test_quantize.py.

Files are generated once per test session (cached here, in a pytest temporary
directory), so the two test modules do not build the same model twice. Tensors are
read with tools/quantize.py's own layout reader (gguf-py's GGUFReader takes tens of
seconds on the 151,936-entry vocabulary) and decoded with gguf-py's
`gguf.quants.dequantize` and with Kipp's C dequantizer (src/core/types.c, compiled
here into a shared library and called through ctypes).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from tools import make_random_model as rm
from tools import quantize as qz
from conftest import REPO_ROOT, run_tool

_files: dict = {}


def model_file(tmp_path_factory, shape: str, out_type: str = "bf16", layers: int | None = None) -> Path:
    """make_random_model output for (shape, type, layers), seed 0, built once per session."""
    key = ("gen", shape, out_type, layers)
    if key not in _files:
        out = tmp_path_factory.mktemp("random") / f"{shape}-{out_type}-{layers}.gguf"
        _files[key] = rm.write_model(shape, out_type, out, seed=0, layers=layers, progress=False)
    return _files[key]


def quantized_file(tmp_path_factory, shape: str, qtype: str) -> Path:
    key = ("quant", shape, qtype)
    if key not in _files:
        src = model_file(tmp_path_factory, shape)
        out = tmp_path_factory.mktemp("quant") / f"{shape}-{qtype}.gguf"
        _files[key] = qz.quantize_file(src, out, qtype, progress=False)
    return _files[key]


def tensors(path: Path) -> dict[str, qz.SrcTensor]:
    return {t.name: t for t in qz.read_model(path).tensors}


def raw_bytes(path: Path, t: qz.SrcTensor) -> np.ndarray:
    return np.fromfile(path, dtype=np.uint8, count=t.nbytes, offset=t.offset)


def dequant_gguf_py(path: Path, t: qz.SrcTensor) -> np.ndarray:
    """float32 values with the tensor's PyTorch shape, decoded by gguf-py."""
    raw = raw_bytes(path, t)
    qt = gguf.GGMLQuantizationType(t.type_id)
    if qt == gguf.GGMLQuantizationType.F32:
        vals = raw.view(np.float32)
    elif qt == gguf.GGMLQuantizationType.F16:
        vals = raw.view(np.float16).astype(np.float32)
    else:
        rows = int(np.prod(t.ne[1:])) if len(t.ne) > 1 else 1
        vals = gguf.quants.dequantize(raw.reshape(rows, -1), qt)
    return np.asarray(vals, dtype=np.float32).reshape(t.torch_shape)


class KippDequant:
    """ctypes binding of kipp_dequantize_row from src/core/types.c."""

    def __init__(self, workdir: Path):
        lib = workdir / "libkipptypes.so"
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O2", "-std=c11", "-shared", "-fPIC", f"-I{REPO_ROOT / 'src'}",
                        str(REPO_ROOT / "src" / "core" / "types.c"), "-o", str(lib)], check=True)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.kipp_dequantize_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_uint64]
        self.lib.kipp_dequantize_row.restype = None

    def __call__(self, raw: np.ndarray, type_id: int, n: int) -> np.ndarray:
        raw = np.ascontiguousarray(raw, dtype=np.uint8)
        out = np.empty(n, dtype=np.float32)
        self.lib.kipp_dequantize_row(type_id, raw.ctypes.data, out.ctypes.data, n)
        return out


def kipp_bin() -> Path:
    from test_interop_c import kipp_bin as kb
    return kb()


def kipp_info(path: Path) -> dict:
    res = run_tool(kipp_bin(), "--model", path, "--info", timeout=120)
    assert res.returncode == 0, f"kipp --info failed on {path}:\n{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout)


def kipp_generate(path: Path, n: int = 2) -> subprocess.CompletedProcess:
    res = run_tool(kipp_bin(), "--model", path, "--backend", "cpu-ref", "--check-weights", "--greedy",
                   "-p", "Hello", "-n", n, "--no-stats", timeout=300)
    assert res.returncode == 0, f"kipp failed on {path} (exit {res.returncode}):\n{res.stdout}\n{res.stderr}"
    return res


def forward(path: Path, tokens: list[int], routing: list | None = None) -> tuple[np.ndarray, list[float]]:
    """A plain numpy f32 Qwen3 forward (reference §4) over every position; for a qwen3moe
    file the FFN is the routed mixture (softmax router, top k with exact ties to the lower
    index, weights renormalised when expert_weights_norm is true or absent), and `routing`,
    if given, receives each layer's router logits [n, experts].
    Returns (logits [n, vocab], RMS of the residual stream after each layer)."""
    model = qz.read_model(path)
    T = {t.name: t for t in model.tensors}
    a_ = model.value("general.architecture")

    def v(key):
        return model.value(key.replace("qwen3.", f"{a_}.", 1))
    L, Nh, Nkv = v("qwen3.block_count"), v("qwen3.attention.head_count"), v("qwen3.attention.head_count_kv")
    D, eps, theta = v("qwen3.attention.key_length"), v("qwen3.attention.layer_norm_rms_epsilon"), \
        v("qwen3.rope.freq_base")

    def W(name):
        return dequant_gguf_py(path, T[name])

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    emb = W("token_embd.weight")
    out = W("output.weight") if "output.weight" in T else emb
    n = len(tokens)
    x = emb[tokens]
    ang = np.arange(n)[:, None] * theta ** (-np.arange(0, D, 2) / D)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

    def rope(t):
        a, b = t[..., :D // 2], t[..., D // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    mask = np.triu(np.full((n, n), -np.inf), 1)
    hidden = []
    for i in range(L):
        p = f"blk.{i}."
        a = rms(x, W(p + "attn_norm.weight"))
        q = rope(rms((a @ W(p + "attn_q.weight").T).reshape(n, Nh, D), W(p + "attn_q_norm.weight")))
        k = rope(rms((a @ W(p + "attn_k.weight").T).reshape(n, Nkv, D), W(p + "attn_k_norm.weight")))
        vv = (a @ W(p + "attn_v.weight").T).reshape(n, Nkv, D)
        k, vv = np.repeat(k, Nh // Nkv, 1), np.repeat(vv, Nh // Nkv, 1)
        s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(D) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hij,jhd->ihd", s, vv).reshape(n, Nh * D) @ W(p + "attn_output.weight").T
        b = rms(x, W(p + "ffn_norm.weight"))
        if a_ == "qwen3moe":
            x = x + moe_ffn(b, W(p + "ffn_gate_inp.weight"), W(p + "ffn_gate_exps.weight"), W(p + "ffn_up_exps.weight"),
                            W(p + "ffn_down_exps.weight"), v("qwen3.expert_used_count"),
                            v("qwen3.expert_weights_norm") is not False, routing)
        else:
            g, u = b @ W(p + "ffn_gate.weight").T, b @ W(p + "ffn_up.weight").T
            x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
        hidden.append(float(np.sqrt((x * x).mean())))
    return rms(x, W("output_norm.weight")) @ out.T, hidden


def moe_ffn(b, router, gate, up, down, k: int, norm: bool, routing: list | None = None) -> np.ndarray:
    """Qwen3-MoE's sparse block on rows b [n, H]: router [E, H], gate/up [E, Fe, H], down [E, H, Fe]."""
    logits = b @ router.T
    if routing is not None:
        routing.append(logits)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.zeros_like(b)
    for t in range(b.shape[0]):
        chosen = np.argsort(-p[t], kind="stable")[:k]  # exact ties: the lower index first
        w = p[t, chosen] / (p[t, chosen].sum() if norm else 1.0)
        for e, we in zip(chosen, w):
            g, u = gate[e] @ b[t], up[e] @ b[t]
            out[t] += we * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


@pytest.fixture(scope="session")
def kipp_dequant(tmp_path_factory) -> KippDequant:
    if "kipp-types" not in _files:
        _files["kipp-types"] = KippDequant(tmp_path_factory.mktemp("kipp-types"))
    return _files["kipp-types"]
