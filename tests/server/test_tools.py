"""Tool calling on POST /v1/chat/completions (docs/server.md, "Tool calls"): tool_choice
"none" bans the <tool_call> token, "auto" with tools still answers in OpenAI's shape (the
text goes through the <tool_call> split: text that is no valid call stays content, streamed
or not), and a conversation that carries assistant tool_calls and tool results renders and
runs. The tiny random checkpoint never writes a tool call of its own; the split itself and
the tool_calls JSON are checked by the C unit suite (tests/unit/test_toolcall.c), and a
model made to call a tool by constrained decoding is the structured-output tests' job."""

from __future__ import annotations

import json

import pytest

from conftest import MODEL_NAME, VARIED

TOOL_CALL_ID = 151657  # <tool_call> in the Qwen3 vocabulary (test_tool_call_token_id checks)
TAG = "<tool_call>"

WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

# +100 on <tool_call>: greedy decoding writes nothing else, unless the token is banned
FORCED = {"logit_bias": {str(TOOL_CALL_ID): 100}, "temperature": 0, "max_tokens": 6,
          "logprobs": True, "top_logprobs": 5}


def tokens(js) -> list[str]:
    """The chosen tokens and every top alternative of a chat response's logprobs."""
    out = []
    for t in js["choices"][0]["logprobs"]["content"]:
        out.append(t["token"])
        out += [a["token"] for a in t["top_logprobs"]]
    return out


def test_tool_call_token_id(tok):
    assert tok.encode(TAG) == [TOOL_CALL_ID]


def test_forced_tag_cut_short_is_dropped(server):
    """The control for the ban below: the bias works, and with tools and tool_choice "auto"
    a <tool_call> that max_tokens cut off before it became a call is dropped: no tag text
    in the content, and no call."""
    js = server.chat(WEATHER, tools=TOOLS, tool_choice="auto", **FORCED)
    ch = js["choices"][0]
    assert [t["token"] for t in ch["logprobs"]["content"]] == [TAG] * 6
    assert not ch["message"]["content"]
    assert "tool_calls" not in ch["message"] or not ch["message"]["tool_calls"]
    assert ch["finish_reason"] == "length"


@pytest.mark.parametrize("with_tools", [True, False])
def test_tool_choice_none_bans_the_token(server, with_tools):
    """tool_choice "none" overrides the client's own +100: the token is never chosen, nor
    even among the top alternatives (its logit is far below every other)."""
    fields = {"tools": TOOLS} if with_tools else {}
    js = server.chat(WEATHER, tool_choice="none", **fields, **FORCED, **VARIED)
    ch = js["choices"][0]
    assert js["usage"]["completion_tokens"] == 6, "the model stopped: the test shows nothing"
    assert TAG not in tokens(js)
    assert TAG not in (ch["message"]["content"] or "")
    assert not ch["message"].get("tool_calls")
    assert ch["finish_reason"] == "length"


def test_tool_choice_none_overrides_repeated_bias_keys(server):
    """ "151657" and "0151657" name the same token, and the sampler adds repeated ids'
    biases: the ban must not be undone by a second entry."""
    fields = dict(FORCED, logit_bias={str(TOOL_CALL_ID): 100, "0" + str(TOOL_CALL_ID): 100})
    js = server.chat(WEATHER, tools=TOOLS, tool_choice="none", **fields)
    assert TAG not in tokens(js)


def test_tool_choice_none_stream(client):
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice="none", stream=True,
        temperature=0, max_tokens=6, logit_bias={str(TOOL_CALL_ID): 100}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert TAG not in text
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)


def test_forced_tag_stream_equals_non_stream(client):
    """The split holds a possible call back while streaming; when the reply ends cut short,
    nothing of it comes out, the same as without streaming."""
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, tool_choice="auto", temperature=0,
              max_tokens=6, logit_bias={str(TOOL_CALL_ID): 100})
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (full.choices[0].message.content or "") == ""
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]


@pytest.mark.parametrize("tool_choice", ["auto", None])
def test_tools_auto_response_shape(client, tool_choice):
    kw = dict(model=MODEL_NAME, messages=WEATHER, tools=TOOLS, max_tokens=16, temperature=0,
              extra_body=VARIED)
    if tool_choice:
        kw["tool_choice"] = tool_choice
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert r.object == "chat.completion"
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length")  # "tool_calls" only when a call parsed
    assert not c.message.tool_calls
    assert isinstance(c.message.content, str)
    assert r.usage.completion_tokens <= 16
    chunks = list(client.chat.completions.create(stream=True, **kw))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == c.message.content
    assert not any(ch.choices[0].delta.tool_calls for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [c.finish_reason]


# ---- the conversation round trip ------------------------------------------------------------

# What the server returns for a call, sent back as the next request's history (arguments a
# JSON string, as OpenAI and this server give them), and the tool's answer.
ROUND_TRIP = WEATHER + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789abcdef", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_0123456789abcdef", "content": json.dumps({"temp_c": 21})},
]


def test_tool_round_trip(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=ROUND_TRIP, tools=TOOLS,
                                       max_tokens=8, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0


def test_tool_round_trip_prompt_matches_hf_template(server, tok):
    """The history renders as HF apply_chat_template does: the call back in <tool_call> form
    with its arguments verbatim, the result in <tool_response>."""
    js = server.chat(ROUND_TRIP, tools=TOOLS, max_tokens=1)
    # HF's template cannot read content null (OpenAI's form, which the server takes); "" is
    # the same text
    hf = [dict(m, content="") if m.get("content", "") is None else m for m in ROUND_TRIP]
    assert js["usage"]["prompt_tokens"] == len(tok.chat_ids(hf, tools=TOOLS))
    # the same turn with content beside the call, and two calls
    two = WEATHER + [
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_b", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Z\u00fcrich\"}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "21"},
        {"role": "tool", "tool_call_id": "call_b", "content": "17"},
    ]
    js = server.chat(two, tools=TOOLS, max_tokens=1)
    assert js["usage"]["prompt_tokens"] == len(tok.chat_ids(two, tools=TOOLS))
