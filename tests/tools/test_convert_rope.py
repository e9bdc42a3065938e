"""tools/convert_to_gguf.py's rope scaling (issue 36): config.json's rope_scaling (transformers
< 5) or rope_parameters (transformers 5) become llama.cpp's <arch>.rope.scaling.* keys; yarn and
linear are converted, every other type is refused by name. The end-to-end check (a converted
YaRN checkpoint against HF's logits) is tests/model/yarn_gates.sh."""
from __future__ import annotations

import math

import pytest

from tools import convert_to_gguf as conv

BASE = {"max_position_embeddings": 40960, "rope_theta": 1000000.0}


def rs(**kw):
    return conv._rope_scaling({**BASE, **kw}, "config.json")


def test_none_and_default():
    assert rs() is None
    assert rs(rope_scaling=None) is None
    assert rs(rope_parameters={"rope_type": "default", "rope_theta": 1e6}) is None


def test_yarn_qwen3_model_card():
    # what Qwen3's model cards tell users to add for 131,072 tokens
    got = rs(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    assert got == {"type": "yarn", "factor": 4.0, "original_context_length": 32768}


def test_yarn_transformers5_rope_parameters_and_type_spelling():
    got = rs(rope_parameters={"type": "yarn", "factor": 2, "original_max_position_embeddings": 8192,
                              "rope_theta": 1e6, "beta_fast": 16, "beta_slow": 2})
    assert got == {"type": "yarn", "factor": 2.0, "original_context_length": 8192,
                   "yarn_beta_fast": 16.0, "yarn_beta_slow": 2.0}


def test_yarn_original_defaults_to_max_position_embeddings():
    # transformers' standardize_rope_params does the same
    assert rs(rope_scaling={"rope_type": "yarn", "factor": 4.0})["original_context_length"] == 40960


def test_yarn_attention_factor_as_multiplier():
    # Kipp (and llama.cpp's --yarn-attn-factor) multiply 0.1 ln(factor) + 1 by it
    got = rs(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                           "attention_factor": 1.0})
    assert math.isclose(got["yarn_attn_factor"] * (0.1 * math.log(4.0) + 1.0), 1.0, rel_tol=1e-12)
    got = rs(rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                           "mscale": 1.0, "mscale_all_dim": 0.707})
    want = (0.1 * math.log(40.0) + 1.0) / (0.1 * 0.707 * math.log(40.0) + 1.0)
    assert math.isclose(got["yarn_attn_factor"] * (0.1 * math.log(40.0) + 1.0), want, rel_tol=1e-12)


def test_linear():
    assert rs(rope_scaling={"type": "linear", "factor": 2.0}) == {"type": "linear", "factor": 2.0}


@pytest.mark.parametrize("kind", ["dynamic", "longrope", "llama3", "su"])
def test_other_types_refused_by_name(kind):
    with pytest.raises(conv.ConvertError, match=f"rope scaling type '{kind}' is not supported"):
        rs(rope_scaling={"rope_type": kind, "factor": 2.0})


@pytest.mark.parametrize("bad", [{"rope_type": "yarn"}, {"rope_type": "yarn", "factor": 0.5},
                                 {"rope_type": "linear", "factor": "4"}, ["yarn"]])
def test_malformed_refused(bad):
    with pytest.raises(conv.ConvertError):
        rs(rope_scaling=bad)


def test_read_hparams_carries_it():
    cfg = {**BASE, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "head_dim": 32,
           "num_key_value_heads": 2, "intermediate_size": 192, "vocab_size": 1000, "rms_norm_eps": 1e-6,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}}
    hp = conv.read_hparams(cfg, "config.json")
    assert hp.rope_scaling == {"type": "yarn", "factor": 4.0, "original_context_length": 16}
