"""POST /v1/rerank (docs/server.md, "Reranking") against the tiny reranker (models/tiny-rerank:
random weights in Qwen3-Reranker's layout, made by `make tiny-models`), over raw HTTP in the
Cohere / Jina / llama-server request shape.

The gate: on --backend cpu-ref and --backend cpu, every document's relevance_score equals the
HF transformers golden (tests/test-vectors/tiny-rerank, tools/make_rerank_vectors.py: the
published Qwen3-Reranker scoring code) within a bound, and the order of the results is the
golden order exactly. The bounds: cpu-ref computes in float32 like the oracle, so the
manifest's max_abs_bound (20 x the oracle's own float32-vs-float64 difference, floored at
1e-5) applies; the cpu backend's bf16 / 8-bit activations move a logit by up to ~1e-3 and a
score (the logistic of the yes-no logit gap, slope <= 1/4) by up to ~1e-4 (measured 7e-5), so
5e-4 applies there, as for embeddings (test_embeddings.py). The goldens' smallest gap between
two scores of a set is 2e-3, four times that bound: the exact ordering is a real check on both
backends. usage.prompt_tokens equal to the goldens' token counts shows the prompts are
tokenized exactly as HF tokenizes them. Also: top_n, return_documents, documents as objects,
the four routes, every bad request a 400 naming its field, limits, a generative model without
--reranking (400) and with it (200), an embedding model (400), many documents through a queue
of one (the busy path), the prefix cache serving the documents' common prefix, and the
docs/server.md example.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import ROOT, Srv, start_server

RERANK_MODEL = str(ROOT / "models" / "tiny-rerank" / "kipp-tiny-rerank-bf16.gguf")
RERANK_NAME = "kipp-tiny-rerank-bf16"
EMBED_MODEL = str(ROOT / "models" / "tiny-embed" / "kipp-tiny-embed-bf16.gguf")
GOLDEN = json.loads((ROOT / "tests" / "test-vectors" / "tiny-rerank" / "manifest.json").read_text())
BOUND = {"cpu-ref": GOLDEN["max_abs_bound"], "cpu": 5e-4}
DOC = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def rr() -> Srv:
    return Srv(start_server("rerank", model=RERANK_MODEL), model_name=RERANK_NAME)


@pytest.fixture(scope="module")
def rr_ref() -> Srv:
    return Srv(start_server("rerank-ref", "--backend", "cpu-ref", model=RERANK_MODEL), model_name=RERANK_NAME)


def rerank(srv: Srv, path: str = "/v1/rerank", **fields):
    body = {"model": srv.model, **fields}
    return srv.post(path, body)


def ok(srv: Srv, **fields) -> dict:
    st, _, js = rerank(srv, **fields)
    assert st == 200, f"{st}: {js}\n{srv.proc.stderr_tail()}"
    return js


def golden_body(s: dict) -> dict:
    body = {"query": s["query"], "documents": s["documents"]}
    if s["instruction"] is not None:
        body["instruction"] = s["instruction"]
    return body


@pytest.mark.parametrize("backend", ["cpu-ref", "cpu"])
@pytest.mark.parametrize("k", range(len(GOLDEN["sets"])))
def test_scores_equal_goldens(request, backend, k):
    srv = request.getfixturevalue("rr_ref" if backend == "cpu-ref" else "rr")
    s = GOLDEN["sets"][k]
    js = ok(srv, **golden_body(s))
    want = [r["score_f64"] for r in s["results"]]
    got = {r["index"]: r["relevance_score"] for r in js["results"]}
    assert sorted(got) == list(range(len(want)))
    err = max(abs(got[i] - w) for i, w in enumerate(want))
    assert err <= BOUND[backend], (backend, err, got, want)
    order = sorted(range(len(want)), key=lambda i: -want[i])
    assert [r["index"] for r in js["results"]] == order
    n = sum(len(r["tokens"]) for r in s["results"])
    assert js["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_response_shape(rr):
    s = GOLDEN["sets"][0]
    js = ok(rr, **golden_body(s))
    assert set(js) == {"id", "object", "model", "results", "usage"}
    assert js["object"] == "list" and js["model"] == RERANK_NAME and js["id"].startswith("rerank-")
    for r in js["results"]:
        assert set(r) == {"index", "relevance_score"} and 0 < r["relevance_score"] < 1
    scores = [r["relevance_score"] for r in js["results"]]
    assert scores == sorted(scores, reverse=True)


def test_top_n_return_documents_and_objects(rr):
    s = GOLDEN["sets"][0]
    full = ok(rr, **golden_body(s))
    top = ok(rr, **golden_body(s), top_n=2, return_documents=True)
    assert [r["index"] for r in top["results"]] == [r["index"] for r in full["results"][:2]]
    for r in top["results"]:
        assert r["document"] == {"text": s["documents"][r["index"]]}
    objs = ok(rr, query=s["query"], documents=[{"text": d} for d in s["documents"]], top_n=100)
    assert [r["index"] for r in objs["results"]] == [r["index"] for r in full["results"]]
    for a, b in zip(objs["results"], full["results"]):
        assert abs(a["relevance_score"] - b["relevance_score"]) <= BOUND["cpu"]
    assert ok(rr, **golden_body(s), top_n=None, return_documents=False)["results"][0].keys() == {
        "index", "relevance_score"}


@pytest.mark.parametrize("path", ["/rerank", "/v1/reranking", "/reranking"])
def test_routes(rr, path):
    st, _, js = rerank(rr, path, query="hello", documents=["hello world", "no"])
    assert st == 200 and len(js["results"]) == 2, js


def test_default_instruction_is_the_published_one(rr):
    s = GOLDEN["sets"][0]
    assert GOLDEN["default_instruction"] == ("Given a web search query, retrieve relevant passages "
                                             "that answer the query")
    explicit = ok(rr, **golden_body(s), instruction=GOLDEN["default_instruction"])
    default = ok(rr, **golden_body(s), instruction=None)
    assert [r["index"] for r in explicit["results"]] == [r["index"] for r in default["results"]]
    assert explicit["usage"] == default["usage"]


BAD = [
    ({"documents": ["a"]}, "query"),
    ({"query": 3, "documents": ["a"]}, "query"),
    ({"query": "q"}, "documents"),
    ({"query": "q", "documents": "a"}, "documents"),
    ({"query": "q", "documents": []}, "documents"),
    ({"query": "q", "documents": ["a", 7]}, "documents[1]"),
    ({"query": "q", "documents": [{"text": 3}]}, "documents[0].text"),
    ({"query": "q", "documents": [{"title": "t"}]}, "documents[0].text"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, "top_n"),
    ({"query": "q", "documents": ["a"], "top_n": 1.5}, "top_n"),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, "return_documents"),
    ({"query": "q", "documents": ["a"], "instruction": 5}, "instruction"),
    ({"query": "q", "documents": ["a"], "max_tokens_per_doc": 100}, "max_tokens_per_doc"),
    ({"query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, "max_chunks_per_doc"),
    ({"query": "q", "documents": ["a"], "rank_fields": ["text"]}, "rank_fields"),
    ({"query": "q", "documents": ["a"], "truncate_prompt_tokens": 10}, "truncate_prompt_tokens"),
    ({"query": "q", "texts": ["a"]}, "texts"),
    ({"query": "q", "documents": ["a"], "raw_scores": True}, "raw_scores"),
    ({"query": "q", "documents": ["a"] * 1001}, "documents"),
]


@pytest.mark.parametrize("body,param", BAD, ids=[f"{i}-{p}" for i, (_, p) in enumerate(BAD)])
def test_bad_request_names_field(rr, body, param):
    st, _, js = rerank(rr, **body)
    assert st == 400, js
    err = js["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"], err


def test_missing_model_and_unknown_model(rr):
    st, _, js = rr.post("/v1/rerank", {"query": "q", "documents": ["a"]})
    assert st == 400 and js["error"]["param"] == "model", js
    st, _, js = rr.post("/v1/rerank", {"model": "no-such-model", "query": "q", "documents": ["a"]})
    assert st == 404 and js["error"]["code"] == "model_not_found" and js["error"]["param"] == "model", js


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b'"text"', b'{"query": "q", "query": "r"}'])
def test_not_an_object(rr, raw):
    st, _, body = rr.request("POST", "/v1/rerank", raw, {"Content-Type": "application/json"})
    assert st == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", body


def test_null_and_unknown_fields_accepted(rr):
    js = ok(rr, query="q", documents=["a", {"text": "b", "title": "ignored"}], max_tokens_per_doc=None,
            texts=None, user="someone", top_n=None)
    assert len(js["results"]) == 2
    assert "ignoring the request field 'user'" in rr.proc.stderr_tail(20000)


def test_document_too_long_is_400(rr):
    long_doc = "word " * 600  # more tokens than the 512-token context
    st, _, js = rerank(rr, query="q", documents=["short", long_doc])
    assert st == 400, js
    assert js["error"]["param"] == "documents[1]" and js["error"]["code"] == "context_length_exceeded", js


def test_prefix_cache_serves_the_common_prefix(rr):
    """The first document runs alone; the others read the system prompt, instruction and
    query from its cached KV (whole 16-token blocks of it)."""
    query = "a query long enough to fill blocks: " + "the quick brown fox jumps over the lazy dog " * 4
    before = rr.metrics().get("kipp_prefix_cache_hit_tokens_total")
    ok(rr, query=query, documents=[f"document number {i}" for i in range(5)])
    hit = rr.metrics().get("kipp_prefix_cache_hit_tokens_total") - before
    assert hit >= 4 * 96, hit  # each of the other four shares at least six blocks


@pytest.fixture(scope="module")
def q1() -> Srv:
    return Srv(start_server("rerank-q1", "--parallel", "1", "--queue", "1", model=RERANK_MODEL),
               model_name=RERANK_NAME)


def test_many_documents_through_a_queue_of_one(q1):
    """--parallel 1 --queue 1: the documents past the first two are refused by the queue
    until one of them is done; the handler waits for its own requests and goes on."""
    srv = q1
    s = GOLDEN["sets"][1]
    docs = s["documents"] * 5
    js = ok(srv, **{**golden_body(s), "documents": docs})
    got = {r["index"]: r["relevance_score"] for r in js["results"]}
    assert sorted(got) == list(range(len(docs)))
    for i, d in enumerate(docs):
        want = s["results"][i % len(s["documents"])]["score_f64"]
        assert abs(got[i] - want) <= BOUND["cpu"], (i, got[i], want)


def test_queue_full_of_others_is_503_overloaded(q1):
    """Two generations that nobody reads hold the one slot and the one queue place (each
    paused by its window in turn): the first document finds no room, a 503 overloaded."""
    import socket
    import time
    socks = []
    body = json.dumps({"model": RERANK_NAME, "prompt": "one two three", "max_tokens": 400, "stream": True,
                       "ignore_eos": True, "logprobs": 20}).encode()
    for _ in range(2):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((q1.host, q1.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        socks.append(s)
    deadline = time.monotonic() + 30
    while q1.metrics().get("kipp_queue_depth") < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    st, hdrs, js = rerank(q1, query="q", documents=["a", "b"])
    for s in socks:
        s.close()
    assert st == 503 and js["error"]["code"] == "overloaded", js
    q1.wait_idle()
    assert ok(q1, query="q", documents=["a", "b"])["results"]


def test_generative_model_needs_reranking_flag(server):
    st, _, js = server.post("/v1/rerank", {"model": server.model, "query": "q", "documents": ["a"]})
    assert st == 400, js
    assert js["error"]["code"] == "model_not_reranker" and js["error"]["param"] == "model", js
    assert "--reranking" in js["error"]["message"]


def test_reranking_flag_on_a_generative_model():
    from conftest import MODEL, MODEL_NAME
    srv = Srv(start_server("rerank-flag", "--reranking", model=MODEL), model_name=MODEL_NAME)
    assert "a reranker, scored by tokens 9693 and 2152" in srv.proc.stderr_tail()
    js = ok(srv, query="q", documents=["a", "b"])
    assert len(js["results"]) == 2
    srv.proc.stop()


def test_embedding_model_cannot_rerank():
    srv = Srv(start_server("rerank-embed", model=EMBED_MODEL), model_name="kipp-tiny-embed-bf16")
    st, _, js = srv.post("/v1/rerank", {"model": srv.model, "query": "q", "documents": ["a"]})
    assert st == 400 and js["error"]["code"] == "model_not_reranker", js
    srv.proc.stop()


def doc_example() -> tuple[dict, dict]:
    """The curl example of docs/server.md's Reranking section: its request body and the
    response shown after it."""
    sec = DOC[DOC.index("## Reranking"):]
    sec = sec[:sec.index("\n## ", 5)]
    sh = re.search(r"```sh\n(.*?)```", sec, re.S).group(1)
    body = json.loads(re.search(r"-d '(.*)'", sh, re.S).group(1))
    resp = json.loads(re.search(r"```json\n(.*?)```", sec, re.S).group(1))
    assert "http://127.0.0.1:8080/v1/rerank" in sh
    return body, resp


def test_docs_example(rr):
    body, shown = doc_example()
    st, _, js = rr.post("/v1/rerank", body)
    assert st == 200, js
    assert js["usage"] == shown["usage"] and js["model"] == shown["model"] and js["object"] == shown["object"]
    assert len(js["results"]) == len(shown["results"]) == body["top_n"]
    for got, want in zip(js["results"], shown["results"]):  # the score as the cpu backend gives it
        assert got["index"] == want["index"] and got["document"] == want["document"]
        assert abs(got["relevance_score"] - want["relevance_score"]) <= BOUND["cpu"]


def test_client_gone_cancels_the_rest(rr):
    """A client that leaves mid-request: the documents not yet scored are never run (their
    requests are cancelled or never submitted) and the server goes idle."""
    import socket
    n = 300
    docs = [f"{i} " + "lorem ipsum dolor sit amet " * 30 for i in range(n)]
    body = json.dumps({"model": RERANK_NAME, "query": "q", "documents": docs}).encode()
    before = rr.metrics().get("kipp_generated_tokens_total")
    s = socket.create_connection((rr.host, rr.port))
    s.sendall(b"POST /v1/rerank HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    import time
    deadline = time.monotonic() + 30
    while rr.metrics().get("kipp_generated_tokens_total") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    s.close()
    rr.wait_idle()
    done = rr.metrics().get("kipp_generated_tokens_total") - before
    assert 0 < done < n, done
    assert ok(rr, query="q", documents=["still serving"])["results"]


def test_counted_under_rerank_and_goldens_match_the_checkpoint(rr):
    """/metrics counts the requests under endpoint "rerank"; the goldens were computed from
    the very checkpoint the GGUF was converted from."""
    import hashlib
    before = rr.metrics().get("kipp_requests_total", endpoint="rerank", status="200")
    ok(rr, query="q", documents=["a"])
    rerank(rr, query="q", documents=[])
    m = rr.metrics()
    assert m.get("kipp_requests_total", endpoint="rerank", status="200") == before + 1
    assert m.get("kipp_requests_total", endpoint="rerank", status="400") >= 1
    st = ROOT / "models" / "tiny-rerank" / "model.safetensors"
    assert hashlib.sha256(st.read_bytes()).hexdigest() == GOLDEN["sha256"]["model.safetensors"]


def test_special_token_text_follows_the_server_setting():
    """Parsed by default (the goldens: HF's tokenizer reads <|im_end|> in a document as the
    token); --content-special-tokens text reads it as plain text (more tokens)."""
    s = GOLDEN["sets"][2]
    i = next(k for k, d in enumerate(s["documents"]) if "<|im_end|>" in d)
    body = {"query": s["query"], "instruction": s["instruction"], "documents": [s["documents"][i]]}
    srv = Srv(start_server("rerank-text", "--content-special-tokens", "text", model=RERANK_MODEL),
              model_name=RERANK_NAME)
    plain = ok(srv, **body)["usage"]["prompt_tokens"]
    srv.proc.stop()
    assert plain > len(s["results"][i]["tokens"]), plain
