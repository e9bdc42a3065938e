"""POST /v1/embeddings with the official openai client against the tiny embedding model
(models/tiny-embed: a bare Qwen3Model with last-token pooling, made by `make tiny-models`):
vectors equal the HF goldens of tools/make_embed_vectors.py, a batch equals its inputs one by
one, token ids equal their text, dimensions truncate and re-normalize, base64 is the float32
bytes, usage counts tokens, and every bad request is a 400 naming its field. Also: generation
endpoints on the embedding model and /v1/embeddings on a generative model are clear 400s.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import openai
import pytest

from conftest import ROOT, Srv, start_server

EMBED_MODEL = str(ROOT / "models" / "tiny-embed" / "kipp-tiny-embed-bf16.gguf")
EMBED_NAME = "kipp-tiny-embed-bf16"
GOLDEN = json.loads((ROOT / "tests" / "test-vectors" / "tiny-embed" / "manifest.json").read_text())
N_EMBD = GOLDEN["n_embd"]
N_VOCAB = 151936
CTX = 512  # the checkpoint's max_position_embeddings: the longest input
# the server runs the cpu backend, whose bf16 / 8-bit activations miss the float32 oracle by
# up to ~6e-5 per element (tests/model/gates_embed.c, EMB_FAST_ABS)
COS_MIN, MAX_ABS = GOLDEN["cosine_min"], 5e-4


@pytest.fixture(scope="module")
def embed_server() -> Srv:
    return Srv(start_server("embed", model=EMBED_MODEL), model_name=EMBED_NAME)


@pytest.fixture(scope="module")
def ec(embed_server):
    return embed_server.client()


def vec(d) -> np.ndarray:
    return np.asarray(d.embedding, dtype=np.float64)


def check_golden(got: np.ndarray, want) -> None:
    want = np.asarray(want, dtype=np.float64)
    cos = float(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos >= COS_MIN and np.max(np.abs(got - want)) <= MAX_ABS, (cos, np.max(np.abs(got - want)))


def test_vectors_equal_goldens(ec):
    texts = [e["text"] for e in GOLDEN["inputs"]]
    r = ec.embeddings.create(model=EMBED_NAME, input=texts)
    assert r.object == "list" and r.model == EMBED_NAME and len(r.data) == len(texts)
    for i, (d, e) in enumerate(zip(r.data, GOLDEN["inputs"])):
        assert d.index == i and d.object == "embedding" and len(d.embedding) == N_EMBD
        assert abs(np.linalg.norm(vec(d)) - 1.0) < 1e-5
        check_golden(vec(d), e["embedding"])


def test_usage_counts_tokens(ec):
    r = ec.embeddings.create(model=EMBED_NAME, input=[e["text"] for e in GOLDEN["inputs"]])
    n = sum(len(e["tokens"]) for e in GOLDEN["inputs"])
    assert r.usage.prompt_tokens == n and r.usage.total_tokens == n
    r1 = ec.embeddings.create(model=EMBED_NAME, input=GOLDEN["inputs"][0]["text"])
    assert r1.usage.prompt_tokens == len(GOLDEN["inputs"][0]["tokens"])


def test_batch_equals_singles(ec):
    texts = [e["text"] for e in GOLDEN["inputs"]]
    batch = ec.embeddings.create(model=EMBED_NAME, input=texts, encoding_format="float")
    for t, d in zip(texts, batch.data):
        single = ec.embeddings.create(model=EMBED_NAME, input=t, encoding_format="float")
        assert single.data[0].embedding == d.embedding


def test_token_ids_equal_text(ec):
    e0, e2 = GOLDEN["inputs"][0], GOLDEN["inputs"][2]
    by_text = ec.embeddings.create(model=EMBED_NAME, input=[e0["text"], e2["text"]], encoding_format="float")
    one = ec.embeddings.create(model=EMBED_NAME, input=e0["tokens"], encoding_format="float")
    many = ec.embeddings.create(model=EMBED_NAME, input=[e0["tokens"], e2["tokens"]], encoding_format="float")
    assert one.data[0].embedding == by_text.data[0].embedding
    assert [d.embedding for d in many.data] == [d.embedding for d in by_text.data]
    assert many.usage.prompt_tokens == len(e0["tokens"]) + len(e2["tokens"])


@pytest.mark.parametrize("dims", [1, 8, 63, N_EMBD])
def test_dimensions_truncate_then_normalize(ec, dims):
    text = GOLDEN["inputs"][3]["text"]
    full = vec(ec.embeddings.create(model=EMBED_NAME, input=text, encoding_format="float").data[0])
    got = vec(ec.embeddings.create(model=EMBED_NAME, input=text, dimensions=dims,
                                   encoding_format="float").data[0])
    want = full[:dims] / np.linalg.norm(full[:dims])
    assert len(got) == dims and abs(np.linalg.norm(got) - 1.0) < 1e-6
    assert np.max(np.abs(got - want)) < 1e-6


def test_base64_round_trip(embed_server, ec):
    texts = [GOLDEN["inputs"][1]["text"], GOLDEN["inputs"][4]["text"]]
    st, _, f = embed_server.post("/v1/embeddings", {"model": EMBED_NAME, "input": texts})
    st2, _, b = embed_server.post("/v1/embeddings", {"model": EMBED_NAME, "input": texts,
                                                    "encoding_format": "base64", "dimensions": 16})
    assert st == 200 and st2 == 200
    for df, db in zip(f["data"], b["data"]):
        raw = base64.b64decode(db["embedding"], validate=True)
        got = np.frombuffer(raw, dtype="<f4")
        full = np.asarray(df["embedding"], dtype=np.float32)
        want = full[:16] / np.linalg.norm(full[:16].astype(np.float64))
        assert len(raw) == 16 * 4 and np.max(np.abs(got - want)) < 1e-6
    # the openai client asks for base64 when no format is given and decodes it itself
    r = ec.embeddings.create(model=EMBED_NAME, input=texts)
    assert [np.float32(x) for x in r.data[0].embedding] == [np.float32(x) for x in f["data"][0]["embedding"]]


def test_user_is_accepted(ec):
    r = ec.embeddings.create(model=EMBED_NAME, input="hello", user="user-1234")
    assert len(r.data) == 1


@pytest.mark.parametrize("body, param, needle", [
    ({"input": ""}, "input", "input is empty"),
    ({"input": []}, "input", "empty array"),
    ({"input": [""]}, "input", "input[0] is empty"),
    ({"input": ["a"] * 2049}, "input", "at most 2048"),
    ({"input": "x " * 600}, "input", "at most 512 tokens"),
    ({"input": [1] * 513}, "input", "at most 512 tokens"),
    ({"input": [-1]}, "input", "input[0] is not a token id"),
    ({"input": [N_VOCAB]}, "input", "input[0] is not a token id"),
    ({"input": [[1, 2], [3, 1.5]]}, "input", "input[1][1] is not a token id"),
    ({"input": ["a", [1]]}, "input", "only strings or only arrays"),
    ({"input": 5}, "input", "must be a string"),
    ({}, "input", "'input' is required"),
    ({"input": "a", "dimensions": 0}, "dimensions", "from 1 to 64"),
    ({"input": "a", "dimensions": N_EMBD + 1}, "dimensions", "from 1 to 64"),
    ({"input": "a", "dimensions": "8"}, "dimensions", "from 1 to 64"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format", "\"float\" or \"base64\""),
    ({"input": "a", "user": 5}, "user", "must be a string"),
])
def test_bad_requests_name_the_field(embed_server, body, param, needle):
    st, _, js = embed_server.post("/v1/embeddings", {"model": EMBED_NAME, **body})
    assert st == 400, js
    assert js["error"]["param"] == param and needle in js["error"]["message"], js


def test_bad_request_through_the_client(ec):
    with pytest.raises(openai.BadRequestError) as ei:
        ec.embeddings.create(model=EMBED_NAME, input=[], encoding_format="float")
    assert "empty array" in str(ei.value)


def test_model_must_be_served(embed_server):
    st, _, js = embed_server.post("/v1/embeddings", {"model": "other", "input": "a"})
    assert st == 404 and js["error"]["code"] == "model_not_found"
    st, _, js = embed_server.post("/v1/embeddings", {"input": "a"})
    assert st == 400 and js["error"]["param"] == "model"


def test_generation_on_embedding_model_is_refused(embed_server, ec):
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                       ("/v1/completions", {"prompt": "hi"})]:
        st, _, js = embed_server.post(path, {"model": EMBED_NAME, **body})
        assert st == 400 and "embedding model" in js["error"]["message"], js
    with pytest.raises(openai.BadRequestError, match="cannot generate text"):
        ec.chat.completions.create(model=EMBED_NAME, messages=[{"role": "user", "content": "hi"}])


def test_embeddings_on_generative_model_is_refused(server):
    st, _, js = server.post("/v1/embeddings", {"model": server.model, "input": "hello"})
    assert st == 400 and js["error"]["code"] == "model_not_embedding", js
    assert "pooling 'none'" in js["error"]["message"]


def test_metrics_count_embeddings(embed_server, ec):
    ec.embeddings.create(model=EMBED_NAME, input="count me")
    m = embed_server.metrics()
    assert m.get("kipp_requests_total", endpoint="embeddings", status="200") >= 1


def test_concurrent_requests_equal_sequential(embed_server, ec):
    """The embedder's one context is shared behind a mutex: requests from many connections
    at once give exactly the vectors they give alone."""
    from concurrent.futures import ThreadPoolExecutor
    texts = [e["text"] for e in GOLDEN["inputs"]] * 4
    alone = {t: ec.embeddings.create(model=EMBED_NAME, input=t, encoding_format="float").data[0].embedding
             for t in set(texts)}

    def one(t):
        return t, embed_server.client().embeddings.create(model=EMBED_NAME, input=[t, t[::-1] or "x"],
                                                          encoding_format="float").data[0].embedding
    with ThreadPoolExecutor(8) as pool:
        for t, got in pool.map(one, texts):
            assert got == alone[t]
