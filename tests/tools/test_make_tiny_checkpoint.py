"""Tests for tools/make_tiny_checkpoint.py: determinism, layout, HF compatibility."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from tools import make_tiny_checkpoint as mtc
from conftest import run_module


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_header(path):
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8:8 + n]), raw, 8 + n


def test_bytes_identical_across_runs(tiny_tied, tmp_path):
    res = run_module("tools.make_tiny_checkpoint", "--name", "tiny-tied", "--out", tmp_path / "again")
    assert res.returncode == 0, res.stderr
    for f in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
              "tokenizer_config.json"):
        assert sha256(tmp_path / "again" / f) == sha256(tiny_tied / f), f


def test_config_values(tiny_tied, tiny_untied):
    c = json.loads((tiny_tied / "config.json").read_text())
    assert c["architectures"] == ["Qwen3ForCausalLM"] and c["model_type"] == "qwen3"
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
            c["head_dim"], c["intermediate_size"]) == (64, 2, 4, 2, 32, 192)
    assert c["head_dim"] != c["hidden_size"] // c["num_attention_heads"]
    assert c["tie_word_embeddings"] is True and c["rope_theta"] == 1e6
    assert (c["vocab_size"], c["bos_token_id"], c["eos_token_id"]) == (151936, 151643, 151645)
    assert c["torch_dtype"] == "bfloat16" and c["rms_norm_eps"] == 1e-6 and c["max_position_embeddings"] == 512
    assert c["attention_bias"] is False and c["use_sliding_window"] is False
    u = json.loads((tiny_untied / "config.json").read_text())
    assert (u["hidden_size"], u["num_hidden_layers"], u["num_attention_heads"], u["num_key_value_heads"],
            u["head_dim"], u["intermediate_size"]) == (96, 3, 6, 2, 32, 256)
    assert u["tie_word_embeddings"] is False and u["rope_theta"] == 10000


def test_safetensors_layout(tiny_untied):
    header, raw, start = read_header(tiny_untied / "model.safetensors")
    names = [k for k in header if k != "__metadata__"]
    assert names == sorted(names)
    assert "lm_head.weight" in names
    expected = mtc.tensor_shapes(mtc.CHECKPOINTS["tiny-untied"])
    assert set(names) == set(expected)
    offset = 0
    for n in sorted(names):
        e = header[n]
        assert e["dtype"] == "BF16" and tuple(e["shape"]) == expected[n]
        assert e["data_offsets"][0] == offset
        offset = e["data_offsets"][1]
    assert start + offset == len(raw)
    assert start % 8 == 0


def test_tied_has_no_lm_head(tiny_tied):
    header, _, _ = read_header(tiny_tied / "model.safetensors")
    assert "lm_head.weight" not in header


def test_weight_statistics(tiny_tied):
    header, raw, start = read_header(tiny_tied / "model.safetensors")

    def load(n):
        b, e = header[n]["data_offsets"]
        bits = np.frombuffer(raw[start + b:start + e], dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(header[n]["shape"])
    emb = load("model.embed_tokens.weight")
    assert 0.95 < emb.std() < 1.05
    q = load("model.layers.0.self_attn.q_proj.weight")
    assert abs(q.std() * np.sqrt(64) - 1) < 0.1
    norm = load("model.layers.0.input_layernorm.weight")
    assert abs(norm.mean() - 1) < 0.05 and 0.05 < norm.std() < 0.15


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -2.5, 3.0e38], dtype=np.float32)
    bits = mtc.f32_to_bf16_bits(x)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    # bf16 ulp at 1 is 2^-7: 1+2^-8 is a tie -> even (1.0); 1+3*2^-8 is a tie -> even (1+2^-6)
    assert back.tolist()[:5] == [1.0, 1.0, 1.015625, 1.0, -2.5]


def test_sharded_matches_single(tiny_tied, tiny_tied_sharded):
    index = json.loads((tiny_tied_sharded / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (tiny_tied_sharded / "model.safetensors").exists()
    single, sraw, sstart = read_header(tiny_tied / "model.safetensors")
    total = 0
    for f in files:
        header, raw, start = read_header(tiny_tied_sharded / f)
        for n, e in header.items():
            if n == "__metadata__":
                continue
            assert index["weight_map"][n] == f
            b, en = e["data_offsets"]
            sb, se = single[n]["data_offsets"]
            assert raw[start + b:start + en] == sraw[sstart + sb:sstart + se]
            total += en - b
    assert index["metadata"]["total_size"] == total
    assert set(index["weight_map"]) == {k for k in single if k != "__metadata__"}


def test_unknown_name_fails(tmp_path):
    res = run_module("tools.make_tiny_checkpoint", "--name", "huge", "--out", tmp_path / "x")
    assert res.returncode == 1
    assert "unknown checkpoint name 'huge'" in res.stderr and "tiny-tied" in res.stderr


@pytest.mark.parametrize("name", ["tiny-tied", "tiny-untied"])
def test_loads_in_transformers(name, tiny_tied, tiny_untied):
    torch = pytest.importorskip("torch", reason="torch is only in tools/requirements-vectors.txt")
    transformers = pytest.importorskip("transformers")
    ckpt = tiny_tied if name == "tiny-tied" else tiny_untied
    model = transformers.Qwen3ForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    header, raw, start = read_header(ckpt / "model.safetensors")
    params = dict(model.named_parameters())
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == (name == "tiny-tied")
    # every parameter came from the file (nothing left randomly initialized)
    for pname, p in params.items():
        key = pname if pname in header else None
        assert key is not None, f"{pname} not in checkpoint"
        b, e = header[key]["data_offsets"]
        bits = np.frombuffer(raw[start + b:start + e], dtype="<u2").astype(np.uint32) << 16
        assert np.array_equal(bits.view(np.float32).reshape(p.shape), p.detach().numpy()), pname
    with torch.no_grad():
        logits = model(torch.tensor([[785, 6722, 315, 9625, 374]])).logits[0]
    top2 = logits.topk(2, dim=-1).values
    assert logits.std() > 3  # well spread
    assert torch.all(top2[:, 0] - top2[:, 1] > 1e-3)


# ---- Qwen3-MoE checkpoints (tiny-moe*) ----------------------------------------------------

MOE = {  # name: (hidden, layers, heads, kv heads, head_dim, experts, top-k, expert ffn, norm_topk_prob, tied)
    "tiny-moe": (64, 2, 4, 2, 32, 8, 2, 32, True, True),
    "tiny-moe-k1": (96, 3, 6, 2, 32, 16, 1, 48, False, False),
    "tiny-moe-64": (64, 2, 4, 1, 32, 64, 8, 32, True, False),
    "tiny-moe-k4": (64, 2, 8, 2, 16, 32, 4, 16, False, True),
    "tiny-moe-tie": (64, 2, 4, 2, 32, 8, 2, 32, True, True),
}


@pytest.fixture
def moe_ckpt(request):
    return request.getfixturevalue(request.param.replace("-", "_"))


def load_bf16(path, header, raw, start, name):
    b, e = header[name]["data_offsets"]
    bits = np.frombuffer(raw[start + b:start + e], dtype="<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(header[name]["shape"])


@pytest.mark.parametrize("moe_ckpt", list(MOE), indirect=True)
def test_moe_config_and_layout(moe_ckpt):
    name = moe_ckpt.name
    H, L, Nh, Nkv, D, E, k, Fe, norm, tied = MOE[name]
    c = json.loads((moe_ckpt / "config.json").read_text())
    assert c["architectures"] == ["Qwen3MoeForCausalLM"] and c["model_type"] == "qwen3_moe"
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
            c["head_dim"], c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"],
            c["norm_topk_prob"], c["tie_word_embeddings"]) == (H, L, Nh, Nkv, D, E, k, Fe, norm, tied)
    assert c["mlp_only_layers"] == [] and c["decoder_sparse_step"] == 1 and c["attention_bias"] is False
    assert list(c) == sorted(c)  # as the Hub's config.json
    header, raw, start = read_header(moe_ckpt / "model.safetensors")
    names = {n for n in header if n != "__metadata__"}
    assert names == set(mtc.tensor_shapes(mtc.CHECKPOINTS[name]))
    assert ("lm_head.weight" in names) == (not tied)
    assert not [n for n in names if ".mlp.gate_proj" in n or ".mlp.up_proj" in n or ".mlp.down_proj" in n]
    for i in range(L):
        p = f"model.layers.{i}.mlp."
        assert header[p + "gate.weight"]["shape"] == [E, H]
        for j in range(E):
            assert header[p + f"experts.{j}.gate_proj.weight"]["shape"] == [Fe, H]
            assert header[p + f"experts.{j}.up_proj.weight"]["shape"] == [Fe, H]
            assert header[p + f"experts.{j}.down_proj.weight"]["shape"] == [H, Fe]
    assert len(names) == 2 + (not tied) + L * (8 + 1 + 3 * E)  # norms, attention, router, experts
    router = load_bf16(moe_ckpt, header, raw, start, "model.layers.0.mlp.gate.weight")
    assert abs(router.std() * np.sqrt(H) / mtc.ROUTER_LOGIT_STD - 1) < 0.15
    expert = load_bf16(moe_ckpt, header, raw, start, "model.layers.0.mlp.experts.3.down_proj.weight")
    assert abs(expert.std() * np.sqrt(Fe) - 1) < 0.15


def test_moe_tie_rows(tiny_moe_tie, tiny_moe):
    """tiny-moe-tie: router rows 2 and 5 are the same bits in every layer, and no other two rows
    are; tiny-moe has no equal rows."""
    for ckpt, tied in ((tiny_moe_tie, True), (tiny_moe, False)):
        header, raw, start = read_header(ckpt / "model.safetensors")
        for i in range(2):
            r = load_bf16(ckpt, header, raw, start, f"model.layers.{i}.mlp.gate.weight")
            equal = {(a, b) for a in range(8) for b in range(a + 1, 8) if np.array_equal(r[a], r[b])}
            assert equal == ({(2, 5)} if tied else set())


def test_moe_bytes_identical_across_runs(tiny_moe_k4, tmp_path):
    res = run_module("tools.make_tiny_checkpoint", "--name", "tiny-moe-k4", "--out", tmp_path / "again")
    assert res.returncode == 0, res.stderr
    for f in ("model.safetensors", "config.json"):
        assert sha256(tmp_path / "again" / f) == sha256(tiny_moe_k4 / f), f


@pytest.mark.parametrize("moe_ckpt", list(MOE), indirect=True)
def test_moe_loads_in_transformers(moe_ckpt):
    """Qwen3MoeForCausalLM loads every tensor from the file (transformers 5 fuses the experts
    into gate_up_proj [E, 2*Fe, H] = gate rows then up rows, and down_proj [E, H, Fe]); the
    logits are finite and well spread."""
    torch = pytest.importorskip("torch", reason="torch is only in tools/requirements-vectors.txt")
    transformers = pytest.importorskip("transformers")
    name = moe_ckpt.name
    H, L, Nh, Nkv, D, E, k, Fe, norm, tied = MOE[name]
    model = transformers.Qwen3MoeForCausalLM.from_pretrained(
        moe_ckpt, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    header, raw, start = read_header(moe_ckpt / "model.safetensors")
    params = dict(model.named_parameters())
    assert (model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()) == tied
    used = set()
    for pname, p in params.items():
        got = p.detach().numpy()
        if pname.endswith("mlp.experts.gate_up_proj") or pname.endswith("mlp.experts.down_proj"):
            pre = pname.rsplit(".", 1)[0]
            parts = ("gate_proj", "up_proj") if pname.endswith("gate_up_proj") else ("down_proj",)
            for j in range(E):
                want = np.concatenate([load_bf16(moe_ckpt, header, raw, start, f"{pre}.{j}.{x}.weight")
                                       for x in parts])
                assert np.array_equal(got[j], want), (pname, j)
                used.update(f"{pre}.{j}.{x}.weight" for x in parts)
        else:
            assert np.array_equal(got, load_bf16(moe_ckpt, header, raw, start, pname)), pname
            used.add(pname)
    assert used == {n for n in header if n != "__metadata__"}
    with torch.no_grad():
        logits = model(torch.tensor([[785, 6722, 315, 9625, 374, 12095, 13]])).logits[0]
    assert torch.isfinite(logits).all()
    top2 = logits.topk(2, dim=-1).values
    assert logits.std() > 3  # well spread
    assert torch.all(top2[:, 0] - top2[:, 1] > 1e-3)
    assert len(set(logits.argmax(-1).tolist())) > 1
