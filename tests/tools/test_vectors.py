"""Consistency checks of the committed golden vectors (tests/test-vectors/*), without torch.

Checks the manifest schema, that argmax/top-k/gaps agree with each other and with
the full-logit rows, that no argmax is ambiguous under the recorded bound, and
that today's tools still reproduce the recorded inputs: the regenerated tiny
checkpoint has the recorded sha256 and our converter gives the recorded GGUF
sha256. If the last two fail, the vectors are stale: rerun tools/make_vectors.py.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from tools import convert_to_gguf as conv
from conftest import REPO_ROOT, run_module

VECTORS = REPO_ROOT / "tests" / "test-vectors"
MOE_CHECKPOINTS = ["tiny-moe", "tiny-moe-k1", "tiny-moe-64", "tiny-moe-k4", "tiny-moe-tie"]
CHECKPOINTS = ["tiny-tied", "tiny-untied"] + MOE_CHECKPOINTS
TOP_KEYS = ["checkpoint", "checkpoint_files_sha256", "gguf_sha256", "versions", "n_vocab", "top_k", "bound",
            "bound_derivation", "prompts"]
PROMPT_KEYS = ["text", "tokens", "argmax", "top2_gap", "topk_ids", "topk_logits", "full_logits_positions",
               "full_logits_file"]
# a mixture-of-experts checkpoint's manifest also has the routing block and per-prompt routing
MOE_TOP_KEYS = TOP_KEYS[:-1] + ["routing", "prompts"]
MOE_PROMPT_KEYS = PROMPT_KEYS + ["experts", "routing_min_logit_gap"]
ROUTING_KEYS = ["tie_rule", "experts_implementation", "n_expert", "top_k", "n_token_layer_pairs", "min_prob_gap",
                "min_logit_gap", "n_logit_gap_below_1e-3", "exact_ties", "min_logit_gap_excluding_exact_ties",
                "f32_f64_differences", "expert_use", "torch_topk_at_exact_ties"]


def load(name):
    path = VECTORS / name / "manifest.json"
    assert path.is_file(), f"{path} is missing: run .venv/bin/python -m tools.make_vectors --checkpoint {name}"
    return json.loads(path.read_text())


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_manifest_is_self_consistent(name):
    m = load(name)
    moe = name in MOE_CHECKPOINTS
    assert list(m) == (MOE_TOP_KEYS if moe else TOP_KEYS)
    assert m["checkpoint"] == name and m["n_vocab"] == 151936 and m["top_k"] == 10
    assert set(m["gguf_sha256"]) == {"f32", "bf16"}
    assert set(m["versions"]) == {"torch", "transformers", "numpy", "python"}
    d = m["bound_derivation"]
    assert d["formula"] == "bound = max(S*G, F)"
    assert m["bound"] == max(d["safety_factor"] * d["max_abs_f32_vs_f64"], d["floor"])
    assert 0 < d["max_abs_f32_vs_f64"] < 1e-3
    bound, n_vocab, k = m["bound"], m["n_vocab"], m["top_k"]
    assert len(m["prompts"]) == 4
    for i, p in enumerate(m["prompts"]):
        assert list(p) == (MOE_PROMPT_KEYS if moe else PROMPT_KEYS)
        assert p["text"].isascii()
        n = len(p["tokens"])
        assert 8 <= n <= 40
        assert len(p["argmax"]) == len(p["top2_gap"]) == len(p["topk_ids"]) == len(p["topk_logits"]) == n
        ids, logits = np.array(p["topk_ids"]), np.array(p["topk_logits"], dtype=np.float64)
        assert ids.shape == logits.shape == (n, k)
        assert (np.diff(logits, axis=1) <= 0).all()
        assert (ids[:, 0] == np.array(p["argmax"])).all()
        gap32 = (logits[:, 0].astype(np.float32) - logits[:, 1].astype(np.float32)).astype(np.float64)
        assert np.array_equal(gap32, np.array(p["top2_gap"]))
        assert min(p["top2_gap"]) > 2 * bound, "ambiguous argmax"
        assert p["full_logits_positions"] == sorted({0, n - 1}) and p["full_logits_file"] == f"logits_{i}.f32"
        rows = np.fromfile(VECTORS / name / p["full_logits_file"], dtype="<f4")
        assert rows.size == len(p["full_logits_positions"]) * n_vocab
        rows = rows.reshape(-1, n_vocab)
        for row, pos in zip(rows, p["full_logits_positions"]):
            order = np.argsort(-row, kind="stable")[:k]
            assert order.tolist() == p["topk_ids"][pos]
            assert row[order].astype(np.float64).tolist() == p["topk_logits"][pos]


@pytest.mark.parametrize("name", MOE_CHECKPOINTS)
def test_moe_routing_record(name):
    """The routing block agrees with the per-prompt experts: k distinct experts per token and
    layer, largest weight first, the use counts; every gap at the k-th place at least 1e-3
    except the exact ties, which only tiny-moe-tie has; no float32/float64 difference."""
    from tools import make_tiny_checkpoint as mtc
    spec = mtc.CHECKPOINTS[name]
    r = load(name)["routing"]
    assert list(r) == ROUTING_KEYS
    E, k, L = spec["num_experts"], spec["num_experts_per_tok"], spec["num_hidden_layers"]
    assert (r["n_expert"], r["top_k"], r["experts_implementation"]) == (E, k, "eager")
    assert r["f32_f64_differences"] == 0
    assert r["min_logit_gap_excluding_exact_ties"] >= 1e-3
    use = np.zeros(E, dtype=int)
    pairs = 0
    for p in load(name)["prompts"]:
        assert len(p["experts"]) == L
        for layer in p["experts"]:
            assert len(layer) == len(p["tokens"])
            for ids in layer:
                assert len(ids) == k == len(set(ids)) and all(0 <= e < E for e in ids)
                use[ids] += 1
                pairs += 1
        assert p["routing_min_logit_gap"] >= r["min_logit_gap"]
    assert pairs == r["n_token_layer_pairs"] and use.tolist() == r["expert_use"]
    assert min(use) > 0  # every expert is used: routing is spread
    if "tied_router_rows" not in spec:
        assert r["exact_ties"] == 0 and r["min_logit_gap"] == r["min_logit_gap_excluding_exact_ties"]


def test_moe_tie_goldens_follow_the_lower_index_rule():
    """tiny-moe-tie: experts 2 and 5 have the same logit for every token. By Kipp's rule
    expert 5 is only ever chosen together with expert 2 (and after it); where the tie sits at
    the k-th place expert 2 alone is chosen: that is every exact tie the routing block counts.
    torch.topk itself picked expert 5 at some of them (recorded), so these goldens are not
    what unmodified transformers prints there."""
    m = load("tiny-moe-tie")
    r = m["routing"]
    alone = 0
    for p in m["prompts"]:
        for layer in p["experts"]:
            for ids in layer:
                if 5 in ids:
                    assert 2 in ids and ids.index(2) < ids.index(5), ids
                elif 2 in ids:
                    alone += 1
    assert alone == r["exact_ties"] > 20
    picks = r["torch_topk_at_exact_ties"]
    assert picks["f64_run"] == picks["f32_run"] and sum(picks["f64_run"].values()) == r["exact_ties"]
    assert picks["f64_run"]["higher"] > 0


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_and_gguf_reproduce(name, request, tmp_path):
    m = load(name)
    ckpt = request.getfixturevalue(name.replace("-", "_"))
    got = {f: sha256(ckpt / f) for f in m["checkpoint_files_sha256"]}
    assert got == m["checkpoint_files_sha256"], "make_tiny_checkpoint.py output changed: regenerate the vectors"
    for outtype, want in m["gguf_sha256"].items():
        # same directory name -> same general.name -> same bytes
        out = conv.convert(ckpt, outtype, tmp_path / f"{outtype}.gguf", progress=False)
        assert sha256(out) == want, f"convert_to_gguf.py {outtype} output changed: regenerate the vectors"


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_tokens_match_hf_tokenizers(name):
    tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is only in tools/requirements-vectors.txt")
    tok = tokenizers.Tokenizer.from_file(str(REPO_ROOT / "tools/data/qwen3-tokenizer/tokenizer.json"))
    for p in load(name)["prompts"]:
        assert tok.encode(p["text"], add_special_tokens=False).ids == p["tokens"]


def test_make_vectors_explains_missing_torch(tmp_path):
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "torch.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    env = dict(os.environ, PYTHONPATH=str(stub))
    res = run_module("tools.make_vectors", "--checkpoint", "tiny-tied", "--out", tmp_path / "v",
                   env=env)
    assert res.returncode == 1
    assert "torch is not installed" in res.stderr and "make vectors" in res.stderr
    assert "tools/requirements-vectors.txt" in res.stderr
    assert not (tmp_path / "v").exists()


@pytest.mark.full  # 14 s on tiny-tied: make test-full only (the test tier's budget, docs/testing.md)
@pytest.mark.parametrize("name", ["tiny-tied", "tiny-moe-tie"])
def test_make_vectors_reproduces_committed_vectors(tmp_path, name):
    """Regenerates a checkpoint's vectors in a scratch directory and compares (needs torch)."""
    pytest.importorskip("torch", reason="torch is only in tools/requirements-vectors.txt")
    pytest.importorskip("transformers")
    res = run_module("tools.make_vectors", "--checkpoint", name,
                   "--models-dir", tmp_path / "models", "--out", tmp_path / "v")
    assert res.returncode == 0, res.stderr
    new = json.loads((tmp_path / "v" / "manifest.json").read_text())
    old = load(name)
    for key in ("checkpoint_files_sha256", "gguf_sha256", "n_vocab", "top_k"):
        assert new[key] == old[key], key
    bound = old["bound"]
    for a, b in zip(new["prompts"], old["prompts"]):
        assert a["tokens"] == b["tokens"] and a["argmax"] == b["argmax"]
        assert np.abs(np.array(a["topk_logits"]) - np.array(b["topk_logits"])).max() <= bound
        assert a.get("experts") == b.get("experts")
    if "routing" in old:
        assert new["routing"]["exact_ties"] == old["routing"]["exact_ties"]
        assert new["routing"]["torch_topk_at_exact_ties"] == old["routing"]["torch_topk_at_exact_ties"]
