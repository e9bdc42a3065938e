"""Tests for tools/make_random_model.py: shapes, metadata, values, Kipp loading, errors.

The full-size shapes are checked from the tensor plan (nothing written) against the
reference table typed in below; files are written only for the small test shapes and
for a one-layer 0.6B. Kipp is run through KIPP_BIN (as in test_interop_c.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tools import make_random_model as rm
from tools import quantize as qz
from conftest import run_module
from random_model_helpers import (dequant_gguf_py, forward, kipp_generate, kipp_info, model_file,
                                  quantized_file, tensors)
from test_convert import EXPECTED_KEYS

# Qwen3 release shapes (reference §3.2): hidden, layers, heads, kv heads, head_dim, ffn, tied
REFERENCE = {
    "0.6b": (1024, 28, 16, 8, 128, 3072, True),
    "1.7b": (2048, 28, 16, 8, 128, 6144, True),
    "4b": (2560, 36, 32, 8, 128, 9728, True),
    "8b": (4096, 36, 32, 8, 128, 12288, False),
}
PARAMS = {"0.6b": 596e6, "1.7b": 1.72e9, "4b": 4.02e9, "8b": 8.19e9}  # total, incl. embeddings
V = 151936


def expected_tensors(H, L, Nh, Nkv, D, F, tied) -> dict[str, tuple[int, ...]]:
    t = {"token_embd.weight": (V, H), "output_norm.weight": (H,)}
    if not tied:
        t["output.weight"] = (V, H)
    for i in range(L):
        t.update({
            f"blk.{i}.attn_norm.weight": (H,), f"blk.{i}.ffn_norm.weight": (H,),
            f"blk.{i}.attn_q.weight": (Nh * D, H), f"blk.{i}.attn_k.weight": (Nkv * D, H),
            f"blk.{i}.attn_v.weight": (Nkv * D, H), f"blk.{i}.attn_output.weight": (H, Nh * D),
            f"blk.{i}.attn_q_norm.weight": (D,), f"blk.{i}.attn_k_norm.weight": (D,),
            f"blk.{i}.ffn_gate.weight": (F, H), f"blk.{i}.ffn_up.weight": (F, H),
            f"blk.{i}.ffn_down.weight": (H, F),
        })
    return t


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return model_file(tmp_path_factory, "tiny")


@pytest.mark.parametrize("shape", list(REFERENCE))
def test_release_shapes_match_reference(shape):
    w, hp = rm.build(shape, "bf16")
    got = {t.name: tuple(reversed(t.ne)) for t in w.tensors}
    want = expected_tensors(*REFERENCE[shape])
    assert got == want
    assert [t.name for t in w.tensors][0] == "token_embd.weight"
    n_params = sum(int(np.prod(s)) for s in got.values())
    assert abs(n_params - PARAMS[shape]) / PARAMS[shape] < 0.01
    assert w.keys == EXPECTED_KEYS  # the converter's key set and order
    for t in w.tensors:
        assert t.ggml_type.name == ("F32" if len(t.ne) == 1 else "BF16"), t.name


def test_tiny_loads_in_kipp(tiny):
    info = kipp_info(tiny)
    H, L, Nh, Nkv, D, F, tied = rm.SHAPES["tiny"]
    assert info == {**info, "architecture": "qwen3", "n_layer": L, "n_embd": H, "n_head": Nh, "n_head_kv": Nkv,
                    "head_dim": D, "n_ff": F, "n_vocab": V, "n_ctx_train": 40960, "rope_theta": 1e6,
                    "rms_eps": 1e-6, "tied_embeddings": tied, "bos_id": 151643, "eos_id": 151645}
    kipp_generate(tiny)


def test_0_6b_one_layer_cli(tmp_path):
    out = tmp_path / "q06.gguf"
    res = run_module("tools.make_random_model", "--shape", "0.6b", "--type", "f16", "--layers", "1",
                   "--seed", "7", "--output", out, "--no-progress")
    assert res.returncode == 0, res.stderr
    info = kipp_info(out)
    assert (info["n_layer"], info["n_embd"], info["n_head"], info["n_head_kv"], info["head_dim"], info["n_ff"],
            info["tied_embeddings"]) == (1, 1024, 16, 8, 128, 3072, True)
    t = tensors(out)
    assert t["blk.0.attn_q.weight"].type_id == 1 and t["blk.0.attn_norm.weight"].type_id == 0
    kipp_generate(out, n=1)


def test_values_follow_the_init_and_are_deterministic(tiny):
    hp = rm.hparams("tiny")
    ts = tensors(tiny)
    for name in ("token_embd.weight", "blk.3.attn_q.weight", "blk.3.ffn_down.weight", "blk.0.attn_k_norm.weight"):
        vals = dequant_gguf_py(tiny, ts[name])
        # the file holds exactly the generator's values (seed 0), whatever the thread count
        np.testing.assert_array_equal(vals, rm.tensor_values(name, vals.shape, hp, seed=0))
        mean, std = rm.init_of(name, vals.shape, hp)
        n = vals.size  # 5-sigma bounds on the sample mean and std
        assert abs(vals.mean() - mean) < 5 * std / np.sqrt(n), name
        assert abs(vals.std() / std - 1) < 5 / np.sqrt(2 * n) + 0.01, name
    assert rm.init_of("blk.0.ffn_down.weight", (256, 768), hp)[1] == pytest.approx(768 ** -0.5)
    other = rm.tensor_values("blk.3.attn_q.weight", (256, 256), hp, seed=1)
    assert not np.array_equal(other, dequant_gguf_py(tiny, ts["blk.3.attn_q.weight"]))


def test_forward_is_numerically_sane(tiny):
    """No blow-up over the layers; logits spread (std of a few units) with a clear top-1."""
    tokens = [9707, 11, 847, 829, 374, 730, 2807, 323, 358, 1075, 13, 576]
    logits, hidden = forward(tiny, tokens)
    assert np.isfinite(logits).all()
    assert max(hidden) < 10 and min(hidden) > 0.1, hidden
    std = logits.std(axis=1)
    assert np.all((std > 2) & (std < 10)), std  # "a few units", whatever LOGIT_STD says
    top2 = np.sort(logits, axis=1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    assert np.median(gap) > 0.3, gap


def test_q8_0_output_equals_quantized_bf16(tmp_path_factory):
    direct = model_file(tmp_path_factory, "tiny-untied", "q8_0")
    via = quantized_file(tmp_path_factory, "tiny-untied", "q8_0")
    assert direct.read_bytes() == via.read_bytes()


def test_layers_override_keeps_the_first_layers(tmp_path_factory, tiny):
    short = model_file(tmp_path_factory, "tiny", "bf16", layers=2)
    a, b = tensors(tiny), tensors(short)
    assert set(b) == {n for n in a if not n.startswith("blk.") or n.split(".")[1] in ("0", "1")}
    for name in ("blk.1.ffn_up.weight", "token_embd.weight"):
        assert np.array_equal(dequant_gguf_py(tiny, a[name]), dequant_gguf_py(short, b[name]))
    assert qz.read_model(short).value("qwen3.block_count") == 2


@pytest.mark.parametrize("args, message", [
    (["--shape", "3b", "--type", "bf16"], "unknown shape '3b'"),
    (["--shape", "0.6b", "--type", "q4_k_m"], "unsupported --type 'q4_k_m'"),
    (["--shape", "0.6b", "--layers", "0"], "--layers must be at least 1"),
])
def test_bad_arguments(tmp_path, args, message):
    out = tmp_path / "x.gguf"
    res = run_module("tools.make_random_model", *args, "--output", out, "--no-progress")
    assert res.returncode == 1
    assert res.stderr.startswith("make_random_model: error: ") and message in res.stderr, res.stderr
    assert not out.exists()


def test_missing_output_directory_is_created(tmp_path):
    out = tmp_path / "no" / "such" / "x.gguf"
    res = run_module("tools.make_random_model", "--shape", "tiny", "--output", out, "--no-progress")
    assert res.returncode == 0, res.stderr
    assert out.is_file() and out.read_bytes()[:4] == b"GGUF"


def test_output_parent_is_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    res = run_module("tools.make_random_model", "--shape", "tiny", "--output", tmp_path / "f" / "x.gguf")
    assert res.returncode == 1 and "output directory is not a directory" in res.stderr, res.stderr
