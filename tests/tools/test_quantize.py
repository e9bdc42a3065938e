"""Tests for tools/quantize.py and tools/kipp_quants.py.

Block layouts are checked by decoding our bytes with gguf-py (`gguf.quants.dequantize`)
and with Kipp's own C dequantizer (src/core/types.c through ctypes), which must agree
bit for bit; Q8_0/Q4_0 bytes must equal gguf-py's (ggml-exact) quantizers. The type mix
is checked against llama.cpp's rule with the expected layer lists written out by hand.
"""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from tools import kipp_quants as kq
from tools import quantize as qz
from conftest import run_module
from tools.kipp_gguf_writer import GGMLType, GGUFWriter, GGUFWriteError
from random_model_helpers import (dequant_gguf_py, kipp_dequant, kipp_generate, kipp_info,  # noqa: F401
                                  model_file, quantized_file, raw_bytes, tensors)

Q = gguf.GGMLQuantizationType
FILE_TYPE = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q6_k": 18}
# relative RMS error bounds on N(0,1)-like data (measured: Q8_0 0.005, Q6_K 0.018,
# Q4_K 0.072, Q4_0 0.086)
REL_RMSE = {Q.Q8_0: 0.008, Q.Q6_K: 0.025, Q.Q4_K: 0.085, Q.Q4_0: 0.10}
ENCODE = {Q.Q8_0: kq.quantize_q8_0, Q.Q4_0: kq.quantize_q4_0, Q.Q4_K: kq.quantize_q4_k, Q.Q6_K: kq.quantize_q6_k}


def rel_rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)) / np.sqrt(np.mean(b ** 2)))


# ---- the mix rule ---------------------------------------------------------------------

def test_use_more_bits_layers():
    # L=28: L/8=3, 7L/8=24 -> 0-2, 24-27, and i with (i-3) % 3 == 2
    assert [i for i in range(28) if qz.use_more_bits(i, 28)] == \
        [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]
    # L=36: L/8=4, 7L/8=31
    assert [i for i in range(36) if qz.use_more_bits(i, 36)] == \
        [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]
    assert [i for i in range(8) if qz.use_more_bits(i, 8)] == [0, 3, 6, 7]


def expected_type(name, shape, qtype, more_bits_layers, tied):
    base = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_k_m": "Q4_K", "q6_k": "Q6_K"}[qtype]
    if len(shape) == 1:
        return "F32"
    t = base
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        t = "Q8_0" if base == "Q8_0" else "Q6_K"
    elif qtype == "q4_k_m" and name.split(".")[-2] in ("attn_v", "ffn_down") \
            and int(name.split(".")[1]) in more_bits_layers:
        t = "Q6_K"
    block = 256 if t.endswith("_K") else 32
    if shape[-1] % block:
        t = "Q8_0"  # every test shape's rows are multiples of 32
    return t


@pytest.mark.parametrize("shape, qtype, more_bits", [
    ("tiny", "q4_k_m", {0, 3, 6, 7}),
    ("tiny-untied", "q4_k_m", {2}),
    ("tiny-untied", "q4_0", set()),
    ("tiny-untied", "q6_k", set()),
])
def test_file_types_follow_the_mix(tmp_path_factory, shape, qtype, more_bits):
    path = quantized_file(tmp_path_factory, shape, qtype)
    src = tensors(model_file(tmp_path_factory, shape))
    out = tensors(path)
    assert list(out) == list(src)
    tied = "output.weight" not in out
    got = {n: GGMLType(t.type_id).name for n, t in out.items()}
    want = {n: expected_type(n, t.torch_shape, qtype, more_bits, tied) for n, t in out.items()}
    assert got == want
    for n in out:
        assert out[n].ne == src[n].ne
    if shape == "tiny":  # spot checks of the rule on the 8-layer model
        assert got["blk.3.ffn_down.weight"] == "Q6_K" and got["blk.4.ffn_down.weight"] == "Q4_K"
        assert got["blk.6.attn_v.weight"] == "Q6_K" and got["blk.5.attn_v.weight"] == "Q4_K"
        assert got["token_embd.weight"] == "Q6_K" and got["blk.0.ffn_gate.weight"] == "Q4_K"


@pytest.mark.parametrize("qtype", list(FILE_TYPE))
def test_metadata_is_copied(tmp_path_factory, qtype):
    shape = "tiny" if qtype == "q4_k_m" else "tiny-untied"
    src = qz.read_model(model_file(tmp_path_factory, shape))
    out = qz.read_model(quantized_file(tmp_path_factory, shape, qtype))
    assert [k for k, _, _ in out.kv] == [k for k, _, _ in src.kv]
    for (k, t1, p1), (_, t2, p2) in zip(src.kv, out.kv):
        if k == "general.file_type":
            assert (t2, p2) == (4, struct.pack("<I", FILE_TYPE[qtype]))
        else:
            assert (t1, p1) == (t2, p2), k


@pytest.mark.parametrize("shape, qtype", [("tiny", "q4_k_m"), ("tiny-untied", "q4_0"), ("tiny-untied", "q6_k")])
def test_round_trip_and_kipp_agrees(tmp_path_factory, kipp_dequant, shape, qtype):  # noqa: F811
    path = quantized_file(tmp_path_factory, shape, qtype)
    srcpath = model_file(tmp_path_factory, shape)
    src, out = tensors(srcpath), tensors(path)
    seen = set()
    for name, t in out.items():
        if t.type_id == src[name].type_id:
            assert np.array_equal(raw_bytes(path, t), raw_bytes(srcpath, src[name])), name
            continue
        qt = Q(t.type_id)
        seen.add(qt)
        ours = dequant_gguf_py(path, t)
        ref = dequant_gguf_py(srcpath, src[name])
        assert rel_rmse(ours, ref) < REL_RMSE[qt], (name, qt.name, rel_rmse(ours, ref))
        # Kipp's dequantizer on the first rows (all of a small tensor) is bit-identical
        rows = min(ours.shape[0], 64)
        row_bytes = t.nbytes // ours.shape[0]
        k = kipp_dequant(raw_bytes(path, t)[:rows * row_bytes], t.type_id, rows * ours.shape[1])
        np.testing.assert_array_equal(k, ours[:rows].reshape(-1), err_msg=name)
    assert seen, "nothing was quantized"


def test_q8_0_and_q4_0_are_ggml_exact():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 512)) * rng.uniform(0.001, 3, (64, 1))).astype(np.float32)
    x[0, :32] = 0                      # all-zero block
    x[1, 32:64] = 0.5                  # constant block
    for qt in (Q.Q8_0, Q.Q4_0):
        ours = ENCODE[qt](x).reshape(-1)
        assert np.array_equal(ours, gguf.quants.quantize(x, qt).reshape(-1)), qt.name


EDGE_CASES = {
    "gaussian": lambda r: r.standard_normal((8, 1024)),
    "zeros": lambda r: np.zeros((2, 512)),
    "constant": lambda r: np.full((2, 512), 0.75),
    "negative": lambda r: -np.abs(r.standard_normal((4, 512))) - 1,
    "positive offset": lambda r: np.abs(r.standard_normal((4, 512))) + 5,
    "one spike": lambda r: np.where(np.arange(512) == 77, 100.0, r.standard_normal((4, 512)) * 0.01),
    "mixed ranges": lambda r: r.standard_normal((4, 512)) * np.repeat(10.0 ** r.uniform(-4, 2, (4, 16)), 32, 1),
    "small values": lambda r: r.standard_normal((2, 512)) * 1e-3,
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
@pytest.mark.parametrize("qt", [Q.Q4_K, Q.Q6_K, Q.Q4_0, Q.Q8_0])
def test_encoders_round_trip(kipp_dequant, case, qt):  # noqa: F811
    x = EDGE_CASES[case](np.random.default_rng(11)).astype(np.float32)
    raw = ENCODE[qt](x).reshape(-1)
    assert raw.nbytes == kq.GGML_BLOCK[GGMLType(qt)][1] * x.size // kq.GGML_BLOCK[GGMLType(qt)][0]
    y = gguf.quants.dequantize(raw.reshape(x.shape[0], -1), qt).reshape(x.shape)
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(kipp_dequant(raw, int(qt), x.size), y.reshape(-1))
    if case == "zeros":
        assert not y.any()
    elif case in ("gaussian", "negative", "positive offset"):
        assert rel_rmse(y, x) < REL_RMSE[qt], rel_rmse(y, x)
    # the error stays within a fraction of the largest |x| of the block (K-quants: of the
    # super-block, since their sub-block scales are quantized against its maximum)
    block = 256 if qt in (Q.Q4_K, Q.Q6_K) else 32
    xb, yb = x.reshape(-1, block), y.reshape(-1, block)
    span = np.abs(xb).max(axis=1)
    bound = {Q.Q8_0: 0.01, Q.Q6_K: 0.04, Q.Q4_K: 0.14, Q.Q4_0: 0.13}[qt]
    assert np.all(np.abs(yb - xb).max(axis=1) <= bound * span + 1e-7), case


def test_quantized_files_load_in_kipp(tmp_path_factory):
    for shape, qtype in [("tiny", "q4_k_m"), ("tiny-untied", "q4_0"), ("tiny-untied", "q6_k")]:
        path = quantized_file(tmp_path_factory, shape, qtype)
        assert kipp_info(path)["n_layer"] == qz.read_model(path).value("qwen3.block_count")
        kipp_generate(path)


# ---- the writer's streaming extension ---------------------------------------------------

def test_writer_accepts_pieces(tmp_path):
    w = GGUFWriter()
    w.add_tensor_info("a", (4, 8), GGMLType.F32)
    data = np.arange(32, dtype=np.float32)
    w.write(tmp_path / "p.gguf", lambda info: (data[i:i + 5] for i in range(0, 32, 5)))
    w2 = GGUFWriter()
    w2.add_tensor_info("a", (4, 8), GGMLType.F32)
    w2.write(tmp_path / "w.gguf", lambda info: data)
    assert (tmp_path / "p.gguf").read_bytes() == (tmp_path / "w.gguf").read_bytes()
    for pieces in ([data[:31]], [data, data[:1]]):
        with pytest.raises(GGUFWriteError, match="tensor 'a': got"):
            w.write(tmp_path / "bad.gguf", lambda info: iter(pieces))


# ---- bad input --------------------------------------------------------------------------

def test_bad_inputs(tmp_path, tmp_path_factory):
    good = model_file(tmp_path_factory, "tiny-untied")
    text = tmp_path / "notes.gguf"
    text.write_text("hello, not a model\n")
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(good.read_bytes()[:100_000])
    cases = [
        ([tmp_path / "missing.gguf", tmp_path / "o.gguf", "--type", "q8_0"], "missing input file"),
        ([text, tmp_path / "o.gguf", "--type", "q8_0"], "not a GGUF file"),
        ([trunc, tmp_path / "o.gguf", "--type", "q8_0"], "malformed GGUF header"),
        ([good, tmp_path / "o.gguf", "--type", "iq2_xxs"], "unsupported --type 'iq2_xxs'"),
        ([quantized_file(tmp_path_factory, "tiny-untied", "q8_0"), tmp_path / "o.gguf", "--type", "q4_0"],
         "input must be an f32/f16/bf16 GGUF"),
        ([good, tmp_path / "no" / "o.gguf", "--type", "q8_0"], "missing output directory"),
    ]
    for args, message in cases:
        res = run_module("tools.quantize", *args, "--no-progress")
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert res.stderr.startswith("quantize: error: ") and message in res.stderr, (args, res.stderr)
        assert not (tmp_path / "o.gguf").exists()
