"""tools/convert_to_gguf.py on a Qwen3-Reranker checkpoint (tools/make_tiny_checkpoint.py's
tiny-rerank: a Qwen3ForCausalLM whose README.md has a "# Qwen3-Reranker" heading): the GGUF
is the causal LM with its whole (here tied) lm_head plus qwen3.classifier.output_labels =
["yes", "no"], which kipp-server serves POST /v1/rerank for (tests/server/test_rerank.py); the
same checkpoint without the heading gets no such key; a heading on a checkpoint that is not a
Qwen3ForCausalLM is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools import convert_to_gguf as conv
from tools import make_tiny_checkpoint
from conftest import gguf_reader


@pytest.fixture(scope="module")
def tiny_rerank(ckpt_root) -> Path:
    return make_tiny_checkpoint.write_checkpoint("tiny-rerank", ckpt_root / "single" / "tiny-rerank")


def test_reranker_gets_output_labels_and_keeps_its_head(tiny_rerank, tmp_path):
    r = gguf_reader(conv.convert(tiny_rerank, "bf16", tmp_path / "r.gguf", progress=False))
    assert r.fields["qwen3.classifier.output_labels"].contents() == ["yes", "no"]
    assert "qwen3.pooling_type" not in r.fields  # a causal LM, not llama.cpp's rank pooling
    names = {t.name for t in r.tensors}
    assert "token_embd.weight" in names and "cls.output.weight" not in names


def test_without_the_model_card_heading_no_labels(tiny_rerank, tmp_path):
    ckpt = tmp_path / "plain"
    shutil.copytree(tiny_rerank, ckpt)
    (ckpt / "README.md").write_text("# A model\n\nQwen3-Reranker is mentioned, not the heading.\n")
    r = gguf_reader(conv.convert(ckpt, "bf16", tmp_path / "p.gguf", progress=False))
    assert "qwen3.classifier.output_labels" not in r.fields


def test_heading_on_an_embedding_checkpoint_is_refused(tiny_embed, tmp_path):
    ckpt = tmp_path / "embed-reranker"
    shutil.copytree(tiny_embed, ckpt)
    (ckpt / "README.md").write_text("# Qwen3-Reranker-0.6B\n")
    with pytest.raises(conv.ConvertError, match="names a Qwen3-Reranker, but config.json is not"):
        conv.convert(ckpt, "bf16", tmp_path / "e.gguf", progress=False)
