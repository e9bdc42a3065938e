"""POST /v1/completions: string and token-id prompts, streaming, usage, the context limit,
--max-prompt-tokens (default ctx-size - 1), and GET /v1/models."""

from __future__ import annotations

import json

from conftest import CTX, MODEL_NAME, VARIED, curl, parse_sse
from bench import server_common as sc

PROMPT = "The history of the lighthouse begins"


def test_completion_string_prompt(client, server, tok):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0)
    assert r.object == "text_completion"
    assert r.model == MODEL_NAME
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert isinstance(r.choices[0].text, str)
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.prompt_tokens == len(tok.encode(PROMPT)), "a string prompt is tokenized without BOS/template"
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.completion_tokens <= 16


def test_token_id_prompt_equals_string_prompt(client, tok):
    ids = tok.encode(PROMPT)
    a = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=20, temperature=0, extra_body=VARIED)
    b = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=20, temperature=0, extra_body=VARIED)
    assert b.usage.prompt_tokens == len(ids)
    assert a.choices[0].text == b.choices[0].text


def test_token_id_prompt_synthetic(client):
    ids = sc.synthetic_ids(40)
    r = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 40
    assert r.usage.completion_tokens == 8
    assert r.choices[0].finish_reason == "length"


def test_completion_stream_equals_non_stream(client):
    for prompt in (PROMPT, sc.synthetic_ids(25, offset=3)):
        full = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24, temperature=0,
                                         extra_body=VARIED)
        chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=24,
                                                temperature=0, stream=True, extra_body=VARIED,
                                                stream_options={"include_usage": True}))
        assert len({c.id for c in chunks}) == 1
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        assert text == full.choices[0].text
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
        assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens
        fin = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert fin == [full.choices[0].finish_reason]


def test_completion_curl(server):
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, **VARIED}
    r = curl(server.url + "/v1/completions", "POST", json.dumps(body))
    assert r.status == 200, r
    js = r.json()
    assert js["object"] == "text_completion"
    text = js["choices"][0]["text"]
    body["stream"] = True
    r = curl(server.url + "/v1/completions", "POST", json.dumps(body), stream=True)
    assert r.status == 200, r
    ev = parse_sse(r.body)
    assert ev[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in ev[:-1] if c["choices"]) == text
    assert all(c["object"] == "text_completion" for c in ev[:-1])


def test_context_full_finishes_with_length(server):
    """prompt + completion cannot exceed ctx-size: the completion stops at the end of the
    context with finish_reason length."""
    n = CTX - 8
    js = server.complete(sc.synthetic_ids(n, offset=11), max_tokens=100, temperature=0, ignore_eos=True)
    assert js["choices"][0]["finish_reason"] == "length"
    assert js["usage"]["prompt_tokens"] == n
    assert 1 <= js["usage"]["completion_tokens"] <= CTX - n


def test_max_prompt_tokens_boundary(server):
    """Default --max-prompt-tokens is ctx-size - 1: CTX-1 ids are accepted, CTX are not."""
    js = server.complete(sc.synthetic_ids(CTX - 1, offset=5), max_tokens=1, temperature=0)
    assert js["usage"]["prompt_tokens"] == CTX - 1
    st, _, err = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": sc.synthetic_ids(CTX),
                                                 "max_tokens": 1})
    assert st == 400, (st, err)
    assert err["error"]["type"] == "invalid_request_error"


def test_chat_prompt_too_long(server):
    words = " ".join(f"word{i} lorem ipsum" for i in range(400))   # well over 512 tokens
    st, _, err = server.post("/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": words}]})
    assert st == 400, (st, err)
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"]


def test_default_max_tokens_bounded_by_context(server):
    """Without max_tokens the completion may run to the end of the context (--max-tokens
    defaults to ctx-size) but never past it."""
    js = server.complete(sc.synthetic_ids(300, offset=17), temperature=0, ignore_eos=True)
    assert js["choices"][0]["finish_reason"] == "length"
    assert js["usage"]["completion_tokens"] <= CTX - 300
    assert js["usage"]["completion_tokens"] >= CTX - 300 - 1


def test_models_list(client, server):
    ms = client.models.list()
    ids = [m.id for m in ms.data]
    assert ids == [MODEL_NAME]
    m = ms.data[0]
    assert m.object == "model" and m.owned_by == "kipp" and isinstance(m.created, int)
    r = curl(server.url + "/v1/models")
    assert r.status == 200
    js = r.json()
    assert js["object"] == "list" and js["data"][0]["id"] == MODEL_NAME
