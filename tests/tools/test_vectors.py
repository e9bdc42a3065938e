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
CHECKPOINTS = ["tiny-tied", "tiny-untied"]
TOP_KEYS = ["checkpoint", "checkpoint_files_sha256", "gguf_sha256", "versions", "n_vocab", "top_k", "bound",
            "bound_derivation", "prompts"]
PROMPT_KEYS = ["text", "tokens", "argmax", "top2_gap", "topk_ids", "topk_logits", "full_logits_positions",
               "full_logits_file"]


def load(name):
    path = VECTORS / name / "manifest.json"
    assert path.is_file(), f"{path} is missing: run .venv/bin/python -m tools.make_vectors --checkpoint {name}"
    return json.loads(path.read_text())


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_manifest_is_self_consistent(name):
    m = load(name)
    assert list(m) == TOP_KEYS
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
        assert list(p) == PROMPT_KEYS
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


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_checkpoint_and_gguf_reproduce(name, tiny_tied, tiny_untied, tmp_path):
    m = load(name)
    ckpt = tiny_tied if name == "tiny-tied" else tiny_untied
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


def test_make_vectors_reproduces_committed_vectors(tmp_path):
    """Regenerates tiny-tied vectors in a scratch directory and compares (needs torch)."""
    pytest.importorskip("torch", reason="torch is only in tools/requirements-vectors.txt")
    pytest.importorskip("transformers")
    res = run_module("tools.make_vectors", "--checkpoint", "tiny-tied",
                   "--models-dir", tmp_path / "models", "--out", tmp_path / "v")
    assert res.returncode == 0, res.stderr
    new = json.loads((tmp_path / "v" / "manifest.json").read_text())
    old = load("tiny-tied")
    for key in ("checkpoint_files_sha256", "gguf_sha256", "n_vocab", "top_k"):
        assert new[key] == old[key], key
    bound = old["bound"]
    for a, b in zip(new["prompts"], old["prompts"]):
        assert a["tokens"] == b["tokens"] and a["argmax"] == b["argmax"]
        assert np.abs(np.array(a["topk_logits"]) - np.array(b["topk_logits"])).max() <= bound
