"""POST /v1/chat/completions: response shape, usage, streaming (openai client and curl),
stream_options.include_usage, the chat template (prompt_tokens equal HF
apply_chat_template's), enable_thinking, and the reasoning_content/content split."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL_NAME, VARIED, curl, parse_sse

HELLO = [{"role": "user", "content": "Hello! Tell me about the sea."}]


def extra(msg, name):
    """An extension field (reasoning_content) of an openai pydantic object, or None."""
    v = getattr(msg, name, None)
    if v is None and getattr(msg, "model_extra", None):
        v = msg.model_extra.get(name)
    return v


def check_usage(u, max_tokens=None):
    assert u.prompt_tokens > 0
    assert u.completion_tokens >= 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    if max_tokens is not None:
        assert u.completion_tokens <= max_tokens
    assert u.prompt_tokens_details is not None, "usage.prompt_tokens_details missing"
    assert 0 <= u.prompt_tokens_details.cached_tokens <= u.prompt_tokens


def test_chat_non_stream_shape(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    assert r.id and isinstance(r.id, str)
    assert isinstance(r.created, int) and r.created > 1_600_000_000
    assert r.model == MODEL_NAME
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length")
    assert isinstance(c.message.content, str)
    check_usage(r.usage, 16)
    if c.finish_reason == "length":
        assert r.usage.completion_tokens == 16


def test_chat_stream_equals_non_stream(client):
    kw = dict(model=MODEL_NAME, messages=HELLO, max_tokens=24, temperature=0, extra_body=VARIED)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    assert chunks, "no chunks"
    ids = {c.id for c in chunks}
    assert len(ids) == 1, f"chunks carry different ids: {ids}"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.model == MODEL_NAME for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join(extra(c.choices[0].delta, "reasoning_content") or "" for c in chunks if c.choices)
    assert content == (full.choices[0].message.content or "")
    assert reasoning == (extra(full.choices[0].message, "reasoning_content") or "")
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason], "exactly one chunk carries finish_reason"
    # without include_usage no chunk has an empty choices list (OpenAI)
    assert all(c.choices for c in chunks)


def test_chat_stream_include_usage(client):
    kw = dict(model=MODEL_NAME, messages=HELLO, max_tokens=12, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    last = chunks[-1]
    assert last.choices == [], "the usage chunk has empty choices"
    assert last.usage is not None
    check_usage(last.usage, 12)
    assert last.usage.prompt_tokens == full.usage.prompt_tokens
    assert last.usage.completion_tokens == full.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_curl_non_stream(server):
    body = {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 8, "temperature": 0}
    r = curl(server.url + "/v1/chat/completions", "POST", json.dumps(body))
    assert r.status == 200, r
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    js = r.json()
    assert js["object"] == "chat.completion"
    assert js["choices"][0]["message"]["role"] == "assistant"
    u = js["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert u["completion_tokens"] <= 8
    assert "cached_tokens" in u["prompt_tokens_details"]


def test_chat_curl_stream(server):
    body = {"model": MODEL_NAME, "messages": HELLO, "max_tokens": 10, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **VARIED}
    r = curl(server.url + "/v1/chat/completions", "POST", json.dumps(body), stream=True)
    assert r.status == 200, r
    assert r.headers.get("content-type", "").startswith("text/event-stream"), r.headers
    events = parse_sse(r.body)
    assert events and events[-1] == "[DONE]", events[-3:]
    assert events.count("[DONE]") == 1
    chunks = events[:-1]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] <= 10
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])
    ref = server.chat(HELLO, max_tokens=10, temperature=0, **VARIED)
    assert text == (ref["choices"][0]["message"]["content"] or "")


def test_max_completion_tokens_alias(server):
    js = server.chat(HELLO, max_completion_tokens=3, temperature=0, ignore_eos=True)
    assert js["usage"]["completion_tokens"] == 3
    assert js["choices"][0]["finish_reason"] == "length"


def test_unknown_fields_ignored(server):
    js = server.chat(HELLO, max_tokens=2, temperature=0, some_future_field={"x": 1}, user="u-1")
    assert js["usage"]["completion_tokens"] <= 2
    server.chat(HELLO, max_tokens=1, some_future_field=2)
    log = server.proc.stderr_tail(200000)
    assert log.count("ignoring the request field 'some_future_field'") == 1, log[-2000:]


def test_api_fields_accepted_without_effect(server):
    """Fields of the OpenAI API that ask for nothing Kipp lacks are a 200 (bookkeeping and
    hints, and the default values of the refused ones); none of them is logged as unknown."""
    js = server.chat(HELLO, max_tokens=2, temperature=0, metadata={"k": "v"}, store=False,
                     service_tier="auto", modalities=["text"], parallel_tool_calls=True,
                     prompt_cache_key="abc", safety_identifier="s-1", audio=None, prediction=None,
                     response_format={"type": "text"}, tool_choice="auto")
    assert js["usage"]["completion_tokens"] <= 2
    log = server.proc.stderr_tail(200000)
    for f in ("metadata", "store", "service_tier", "modalities", "parallel_tool_calls",
              "prompt_cache_key", "safety_identifier", "audio", "prediction"):
        assert f"request field '{f}'" not in log


def test_n_equals_one_accepted(server):
    js = server.chat(HELLO, max_tokens=2, n=1)
    assert len(js["choices"]) == 1


# ---- chat template ----------------------------------------------------------------------------

MULTI = [{"role": "system", "content": "You are terse."},
         {"role": "user", "content": "What is 2+2?"},
         {"role": "assistant", "content": "4."},
         {"role": "user", "content": "And 3+3? Explain briefly, with ünïcödé ✓ and 中文."}]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.mark.parametrize("thinking", [True, False])
def test_prompt_tokens_match_hf_template(server, tok, thinking):
    js = server.chat(MULTI, max_tokens=1, chat_template_kwargs={"enable_thinking": thinking})
    want = tok.chat_ids(MULTI, enable_thinking=thinking)
    assert js["usage"]["prompt_tokens"] == len(want)


def test_prompt_tokens_with_tools_match_hf_template(server, tok):
    js = server.chat(HELLO, max_tokens=1, tools=TOOLS)
    assert js["usage"]["prompt_tokens"] == len(tok.chat_ids(HELLO, tools=TOOLS))
    plain = server.chat(HELLO, max_tokens=1)
    assert js["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"], "tools did not reach the template"


def test_enable_thinking_changes_prompt(server):
    on = server.chat(HELLO, max_tokens=4, temperature=0, chat_template_kwargs={"enable_thinking": True})
    off = server.chat(HELLO, max_tokens=4, temperature=0, chat_template_kwargs={"enable_thinking": False})
    default = server.chat(HELLO, max_tokens=4, temperature=0)
    # enable_thinking=false makes the Qwen3 template append an empty <think></think> block
    assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    assert default["usage"]["prompt_tokens"] == on["usage"]["prompt_tokens"], "thinking is on by default"


@pytest.mark.parametrize("thinking", [True, False])
def test_reasoning_split(client, thinking):
    r = client.chat.completions.create(model=MODEL_NAME, messages=HELLO, max_tokens=48, temperature=0,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": thinking},
                                                   "ignore_eos": True, **VARIED})
    msg = r.choices[0].message
    content = msg.content or ""
    reasoning = extra(msg, "reasoning_content") or ""
    assert "<think>" not in content and "</think>" not in content, f"think tags leaked into content: {content!r}"
    assert "<think>" not in reasoning and "</think>" not in reasoning
    if not thinking:
        assert reasoning == "", "enable_thinking=false: the answer has no reasoning part"
    # streaming splits the same way
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=HELLO, max_tokens=48, temperature=0, stream=True,
        extra_body={"chat_template_kwargs": {"enable_thinking": thinking}, "ignore_eos": True, **VARIED}))
    s_content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    s_reasoning = "".join(extra(c.choices[0].delta, "reasoning_content") or "" for c in chunks if c.choices)
    assert (s_content, s_reasoning) == (content, reasoning)


def test_reasoning_content_field_present(server):
    """The raw JSON message has the reasoning_content key (null or a string), as the spec
    returns the <think> part there."""
    js = server.chat(HELLO, max_tokens=4, temperature=0)
    msg = js["choices"][0]["message"]
    assert "reasoning_content" in msg, f"message has no reasoning_content field: {msg}"
    assert msg["reasoning_content"] is None or isinstance(msg["reasoning_content"], str)
