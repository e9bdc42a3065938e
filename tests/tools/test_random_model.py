"""Tests for tools/make_random_model.py: shapes, metadata, values, Kipp loading, errors.

The full-size shapes are checked from the tensor plan (nothing written) against the
reference table typed in below; files are written only for the small test shapes and
for a one-layer 0.6B. Kipp is run through KIPP_BIN (as in test_interop_c.py).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from tools import make_random_model as rm
from tools import quantize as qz
from conftest import run_module
from random_model_helpers import (dequant_gguf_py, forward, kipp_generate, kipp_info, model_file,
                                  quantized_file, tensors)
from test_convert import EXPECTED_KEYS, EXPECTED_KEYS_MOE

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
    (["--shape", "0.6b", "--type", "q4_k"], "unsupported --type 'q4_k'"),
    (["--shape", "30b-a3b", "--type", "iq2_xxs"], "unsupported --type 'iq2_xxs'"),
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


# ---- Qwen3-MoE (qwen3moe): Qwen3-30B-A3B's shape, and the test shape tiny-moe -------------

def expected_moe_tensors(H, L, Nh, Nkv, D, F, tied, E, k, Fe) -> dict[str, tuple[int, ...]]:
    t = {n: s for n, s in expected_tensors(H, L, Nh, Nkv, D, F, tied).items()
         if not n.endswith(("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"))}
    for i in range(L):
        t.update({f"blk.{i}.ffn_gate_inp.weight": (E, H), f"blk.{i}.ffn_gate_exps.weight": (E, Fe, H),
                  f"blk.{i}.ffn_up_exps.weight": (E, Fe, H), f"blk.{i}.ffn_down_exps.weight": (E, H, Fe)})
    return t


def test_30b_a3b_shape_matches_reference():
    """Qwen/Qwen3-30B-A3B's config: hidden 2048, 48 layers, 32/4 heads of 128, 128 experts
    of 768 (8 used), untied, dense ffn 6144; 30.5 B parameters of which 3.3 B are active."""
    w, hp = rm.build("30b-a3b", "bf16")
    got = {t.name: tuple(reversed(t.ne)) for t in w.tensors}
    assert got == expected_moe_tensors(2048, 48, 32, 4, 128, 6144, False, 128, 8, 768)
    n_params = sum(int(np.prod(s)) for s in got.values())
    assert abs(n_params - 30.53e9) / 30.53e9 < 0.005
    active = n_params - sum(int(np.prod(s)) * (1 - 8 / 128) for n, s in got.items() if "_exps" in n)
    assert abs(active - 3.35e9) / 3.35e9 < 0.01
    assert w.keys == EXPECTED_KEYS_MOE
    for t in w.tensors:
        f32 = len(t.ne) == 1 or t.name.endswith("ffn_gate_inp.weight")
        assert t.ggml_type.name == ("F32" if f32 else "BF16"), t.name
    assert (hp.arch, hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_ctx, hp.rope_theta, hp.rms_eps) == \
        ("qwen3moe", 128, 8, 768, 40960, 1e6, 1e-6)
    assert rm.hparams("30b-a3b", layers=6).n_layer == 6


def test_30b_a3b_q4_k_m_types():
    """The q4_k_m mix of the real shape (48 layers, 128 experts: no 8-expert rule): experts'
    gate/up Q4_K, down Q6_K in the more-bits layers, attn_v likewise, output Q6_K, router F32."""
    w, _ = rm.build("30b-a3b", "q4_k_m")
    types = {t.name: t.ggml_type.name for t in w.tensors}
    more = {i for i in range(48) if qz.use_more_bits(i, 48)}
    assert sorted(more) == [0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47]
    for i in range(48):
        assert types[f"blk.{i}.ffn_gate_exps.weight"] == types[f"blk.{i}.ffn_up_exps.weight"] == "Q4_K"
        assert types[f"blk.{i}.ffn_down_exps.weight"] == types[f"blk.{i}.attn_v.weight"] == \
            ("Q6_K" if i in more else "Q4_K")
        assert types[f"blk.{i}.ffn_gate_inp.weight"] == "F32" and types[f"blk.{i}.attn_k.weight"] == "Q4_K"
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"


@pytest.fixture(scope="module")
def tiny_moe_random(tmp_path_factory):
    return model_file(tmp_path_factory, "tiny-moe")


@pytest.mark.parametrize("qtype", ["q4_k_m", pytest.param("q4_0", marks=pytest.mark.full)])
def test_moe_mix_equals_quantized_bf16(tmp_path_factory, tiny_moe_random, qtype):
    """A quantize.py mix made directly is byte for byte quantize.py applied to the bf16 file."""
    direct = model_file(tmp_path_factory, "tiny-moe", qtype)
    via = quantized_file(tmp_path_factory, "tiny-moe", qtype)
    assert direct.read_bytes() == via.read_bytes()
    types = {n: t.type_id for n, t in tensors(direct).items()}
    assert types["blk.0.ffn_gate_inp.weight"] == 0  # F32


def test_dense_mix_equals_quantized_bf16(tmp_path_factory):
    direct = model_file(tmp_path_factory, "tiny-untied", "q4_k_m")
    via = quantized_file(tmp_path_factory, "tiny-untied", "q4_k_m")
    assert direct.read_bytes() == via.read_bytes()


def test_moe_values_follow_the_init(tiny_moe_random):
    hp = rm.hparams("tiny-moe")
    ts = tensors(tiny_moe_random)
    for name in ("blk.2.ffn_gate_inp.weight", "blk.2.ffn_down_exps.weight", "blk.1.ffn_up_exps.weight"):
        vals = dequant_gguf_py(tiny_moe_random, ts[name])
        np.testing.assert_array_equal(vals, rm.tensor_values(name, vals.shape, hp, seed=0))
        mean, std = rm.init_of(name, vals.shape, hp)
        assert abs(vals.std() / std - 1) < 0.02, name
    assert rm.init_of("blk.0.ffn_down_exps.weight", (16, 256, 256), hp)[1] == pytest.approx(256 ** -0.5)
    assert rm.init_of("blk.0.ffn_gate_inp.weight", (16, 256), hp)[1] == pytest.approx(3 / 16)


def test_moe_forward_is_numerically_sane(tiny_moe_random):
    """No blow-up over the layers, logits spread with a clear top-1, router logits of std ~3
    and every expert chosen for some token."""
    tokens = [9707, 11, 847, 829, 374, 730, 2807, 323, 358, 1075, 13, 576, 6722, 315, 9625, 374]
    routing = []
    logits, hidden = forward(tiny_moe_random, tokens, routing)
    assert np.isfinite(logits).all()
    assert max(hidden) < 10 and min(hidden) > 0.1, hidden
    std = logits.std(axis=1)
    assert np.all((std > 2) & (std < 10)), std
    assert len(routing) == 4
    for r in routing:
        assert 2 < r.std() < 4.5, r.std()
    chosen = {int(e) for r in routing for row in r for e in np.argsort(-row, kind="stable")[:4]}
    assert chosen == set(range(16))


@pytest.mark.full
def test_30b_a3b_one_layer_cli(tmp_path):
    """One layer of the real shape in q8_0 (1.3 GB): metadata, types and a spot check of the
    experts' values. (Kipp's C loader does not read qwen3moe yet: no kipp --info here.)"""
    out = tmp_path / "moe.gguf"
    res = run_module("tools.make_random_model", "--shape", "30b-a3b", "--type", "q8_0", "--layers", "1",
                     "--output", out, "--no-progress")
    assert res.returncode == 0, res.stderr
    m = qz.read_model(out)
    assert (m.value("general.architecture"), m.value("qwen3moe.block_count"), m.value("qwen3moe.expert_count")) == \
        ("qwen3moe", 1, 128)
    t = tensors(out)
    assert t["blk.0.ffn_down_exps.weight"].ne == (768, 2048, 128) and t["blk.0.ffn_down_exps.weight"].type_id == 8
    assert t["blk.0.ffn_gate_inp.weight"].type_id == 0
    raw = np.fromfile(out, np.uint8, 34 * 24 * 2048, offset=t["blk.0.ffn_down_exps.weight"].offset)
    vals = gguf.quants.dequantize(raw.reshape(2048, -1), gguf.GGMLQuantizationType.Q8_0)
    assert abs(vals.std() * np.sqrt(768) - 1) < 0.02
