"""test_anthropic.py — the Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens;
docs/server.md "Anthropic Messages API") driven by the official `anthropic` SDK, plus curl
where the bytes matter: replies streamed and not (the SDK's accumulated message equals the
non-streamed one), system prompts, stop_sequences, max_tokens, a whole tool-use round trip
under a forced tool_choice, thinking blocks (a Thinking-2507 template on the tiny checkpoint,
whose replies open in reasoning), count_tokens against the real request's usage and against
the OpenAI route's rendering of the same conversation, errors in Anthropic's shape and the
SDK's exception classes, x-api-key auth, and the doc's curl example.

Most tests use the session's tiny-tied server (greedy: temperature 0, its text repeats one
token, which is all an equality check needs)."""

from __future__ import annotations

import json
import re

import anthropic
import jsonschema
import pytest

from conftest import API_KEY, MODEL_NAME, ROOT, TIMEOUT_SCALE, Srv, curl, start_server

USER = [{"role": "user", "content": "What is the weather like in Paris?"}]
WEATHER = {"name": "get_weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 8},
               "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
# greedy. This SDK's typed create() has no temperature/top_p/top_k (the API still defines
# them). The tiny model's greedy reply with thinking off is "\n\n" repeated (which the
# reasoning split drops): thinking "adaptive" (Qwen3's switch on) gives it words.
GREEDY = {"extra_body": {"temperature": 0}, "thinking": {"type": "adaptive"}}


def client(srv: Srv, api_key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.url, api_key=api_key or srv.api_key or "unused", max_retries=0,
                               timeout=120 * TIMEOUT_SCALE)


def create(srv, **kw):
    kw.setdefault("model", srv.model)
    kw.setdefault("messages", USER)
    kw.setdefault("max_tokens", 8)
    return client(srv).messages.create(**kw)


def events(body: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of an Anthropic SSE body; each event's name matches its data's type."""
    out = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"], block
        out.append((lines["event"], data))
    return out


def raw_stream(srv, body, headers=()):
    body = {**{k: v for k, v in body.items() if k != "extra_body"}, **body.get("extra_body", {})}
    r = curl(srv.url + "/v1/messages", "POST", json.dumps({"stream": True, **body}), headers=list(headers),
             stream=True)
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream"), r
    return events(r.body)


def check_order(evs):
    """message_start, ping, then blocks opened, delta'd and closed in index order, then
    message_delta and message_stop."""
    names = [n for n, _ in evs]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"], names
    open_i, next_i = None, 0
    for n, d in evs[2:-2]:
        if n == "content_block_start":
            assert open_i is None and d["index"] == next_i, names
            open_i, next_i = d["index"], next_i + 1
        elif n in ("content_block_delta", "content_block_stop"):
            assert d["index"] == open_i, names
            if n == "content_block_stop":
                open_i = None
        else:
            assert n == "ping", names
    assert open_i is None, names


def blocks(msg) -> list[dict]:
    return [b.model_dump(exclude_none=True) for b in msg.content]


# ---- replies ---------------------------------------------------------------------------------

def test_create_shape(server):
    m = create(server, **GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.model == MODEL_NAME
    assert re.fullmatch(r"msg_\w+", m.id), m.id
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert (m.stop_reason, m.stop_sequence) == ("max_tokens", None)
    assert m.usage.output_tokens == 8 and m.usage.input_tokens + m.usage.cache_read_input_tokens > 0
    assert m.usage.cache_creation_input_tokens == 0


def test_stream_matches_create(server):
    kw = dict(max_tokens=12, **GREEDY)
    m = create(server, **kw)
    with client(server).messages.stream(model=server.model, messages=USER, **kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == m.content[0].text
    raw = client(server).messages.create(model=server.model, messages=USER, stream=True, **kw)
    evs = [e.to_dict() for e in raw]
    assert [e["type"] for e in evs][0] == "message_start" and evs[-1]["type"] == "message_stop"
    for got in (final,):
        assert blocks(got) == blocks(m)
        assert (got.stop_reason, got.usage.output_tokens) == (m.stop_reason, m.usage.output_tokens)
        assert got.usage.input_tokens + got.usage.cache_read_input_tokens == \
            m.usage.input_tokens + m.usage.cache_read_input_tokens
    # curl: the event names, the order of the blocks, usage in message_start and message_delta
    evs = raw_stream(server, {"model": server.model, "messages": USER, **kw})
    check_order(evs)
    start, delta = evs[0][1]["message"], evs[-2][1]
    assert start["content"] == [] and start["stop_reason"] is None and start["id"].startswith("msg_")
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 12
    assert "".join(d["delta"]["text"] for n, d in evs if n == "content_block_delta") == m.content[0].text


def test_system_prompt(server):
    c = client(server)
    plain = c.messages.count_tokens(model=server.model, messages=USER).input_tokens
    as_str = c.messages.count_tokens(model=server.model, messages=USER, system="You are terse.").input_tokens
    as_blocks = c.messages.count_tokens(model=server.model, messages=USER,
                                        system=[{"type": "text", "text": "You are terse."}]).input_tokens
    assert as_str == as_blocks > plain
    # the same prompt as OpenAI's system message with thinking off (Anthropic's default)
    oai = server.chat([{"role": "system", "content": "You are terse."}, *USER], max_tokens=1,
                      chat_template_kwargs={"enable_thinking": False})
    assert oai["usage"]["prompt_tokens"] == as_str
    m = create(server, system="You are terse.", max_tokens=2)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == as_str


def test_stop_sequences(server):
    text = create(server, max_tokens=12, **GREEDY).content[0].text
    stop = text[2:5]  # within the first word: text comes before it
    assert stop.strip() and text.index(stop) > 0, text
    m = create(server, max_tokens=12, stop_sequences=["zzz-never", stop], **GREEDY)
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", stop)
    assert text.startswith(m.content[0].text) and stop not in m.content[0].text
    with client(server).messages.stream(model=server.model, messages=USER, max_tokens=12,
                                        stop_sequences=[stop], **GREEDY) as s:
        final = s.get_final_message()
    assert (final.stop_reason, final.stop_sequence, blocks(final)) == ("stop_sequence", stop, blocks(m))


def test_max_tokens_required_and_checked(server):
    for body, word in (({}, "'max_tokens' is required"), ({"max_tokens": 0}, "max_tokens"),
                       ({"max_tokens": "8"}, "max_tokens")):
        st, _, js = server.post("/v1/messages", {"model": server.model, "messages": USER, **body})
        assert st == 400 and js["type"] == "error" and js["error"]["type"] == "invalid_request_error", js
        assert word in js["error"]["message"], js


# ---- tools -----------------------------------------------------------------------------------

def test_tool_use_round_trip(server):
    c = client(server)
    kw = dict(model=server.model, max_tokens=120, tools=[WEATHER], **GREEDY,
              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    m = c.messages.create(messages=USER, **kw)
    assert m.stop_reason == "tool_use", m
    assert [b.type for b in m.content] == ["tool_use"], m
    call = m.content[0]
    assert call.name == "get_weather" and re.fullmatch(r"toolu_[0-9a-f]{16}", call.id)
    assert isinstance(call.input, dict)
    jsonschema.validate(call.input, WEATHER["input_schema"])
    # streamed: one tool_use block whose input_json_delta pieces make the same input
    with c.messages.stream(messages=USER, **kw) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == call.input
    evs = raw_stream(server, {"messages": USER, **kw})
    check_order(evs)
    start = [d for n, d in evs if n == "content_block_start"]
    assert [b["content_block"]["type"] for b in start] == ["tool_use"]
    assert start[0]["content_block"]["input"] == {}
    parts = "".join(d["delta"]["partial_json"] for n, d in evs if n == "content_block_delta")
    assert json.loads(parts) == call.input
    # the result goes back; the model answers in text
    history = USER + [{"role": "assistant", "content": m.content},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                    "content": "18 degrees, sunny"}]}]
    answer = c.messages.create(model=server.model, max_tokens=8, tools=[WEATHER], tool_choice={"type": "none"},
                               messages=history, **GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens") and all(b.type == "text" for b in answer.content)
    # the tool call and its result render as the OpenAI route renders the same conversation
    n = c.messages.count_tokens(model=server.model, tools=[WEATHER], messages=history).input_tokens
    oai = server.chat(USER + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": call.id, "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps(call.input)}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "18 degrees, sunny"}],
        tools=[{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                 "parameters": WEATHER["input_schema"]}}],
        max_tokens=1, chat_template_kwargs={"enable_thinking": False})
    assert oai["usage"]["prompt_tokens"] == n


def test_tool_choice_any_and_none(server):
    m = create(server, max_tokens=120, tools=[WEATHER], tool_choice={"type": "any"}, **GREEDY)
    assert m.stop_reason in ("tool_use", "max_tokens") and m.content[0].type == "tool_use", m
    if m.stop_reason == "tool_use":
        jsonschema.validate(m.content[0].input, WEATHER["input_schema"])
    m = create(server, max_tokens=16, tools=[WEATHER], tool_choice={"type": "none"}, **GREEDY)
    assert all(b.type == "text" for b in m.content) and m.stop_reason != "tool_use", m


def test_tool_result_forms(server):
    """tool_result content as a string, as text blocks, or an error: all rendered (an error's
    text marked "Error: ")."""
    c = client(server)

    def count(result):
        msgs = USER + [{"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", **result},
                                         {"type": "text", "text": "Thanks."}]}]
        return c.messages.count_tokens(model=server.model, tools=[WEATHER], messages=msgs).input_tokens

    s = count({"content": "sunny"})
    assert count({"content": [{"type": "text", "text": "sunny"}]}) == s
    assert count({"content": "sunny", "is_error": True}) > s
    assert count({}) < s
    with pytest.raises(anthropic.BadRequestError) as e:
        count({"content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                        "data": "AAAA"}}]})
    assert "image" in e.value.body["error"]["message"]


# ---- thinking --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """The tiny checkpoint with Qwen3-Thinking-2507's template: its replies open in <think>."""
    from test_chat_2507 import TEMPLATES, swap_template
    path = tmp_path_factory.mktemp("anthropic") / "tiny-thinking.gguf"
    swap_template(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf", path,
                  (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8"))
    return Srv(start_server("anthropic-thinking", "--model-name", "tiny", model=str(path)), model_name="tiny")


def test_thinking_blocks(thinker):
    c = client(thinker)
    kw = dict(model="tiny", messages=USER, max_tokens=16, thinking={"type": "enabled", "budget_tokens": 6},
              extra_body=GREEDY["extra_body"])
    m = c.messages.create(**kw)
    assert [b.type for b in m.content][:1] == ["thinking"], m
    think = m.content[0]
    assert think.thinking and think.signature == "", think
    assert m.usage.output_tokens == 16
    with c.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert blocks(final) == blocks(m)
    evs = raw_stream(thinker, kw)
    check_order(evs)
    assert evs[2][1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert "".join(d["delta"]["thinking"] for n, d in evs
                   if n == "content_block_delta" and d["delta"]["type"] == "thinking_delta") == think.thinking
    # the thinking block goes back in the next turn (reasoning_content), redacted_thinking is
    # left out of the prompt
    back = USER + [{"role": "assistant", "content": [
        think.model_dump(), {"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "Sunny."}]},
        {"role": "user", "content": "Thanks"}]
    assert c.messages.create(model="tiny", messages=back, max_tokens=2).stop_reason == "max_tokens"


def test_thinking_is_never_dropped(thinker):
    # Thinking-2507 always reasons: without 'thinking' its reasoning still comes as a block
    m = client(thinker).messages.create(model="tiny", messages=USER, max_tokens=4)
    assert [b.type for b in m.content] == ["thinking"] and m.content[0].thinking, m


def test_thinking_switch_renders(server):
    c = client(server)
    off = c.messages.count_tokens(model=server.model, messages=USER).input_tokens
    assert c.messages.count_tokens(model=server.model, messages=USER,
                                   thinking={"type": "disabled"}).input_tokens == off
    on = c.messages.count_tokens(model=server.model, messages=USER,
                                 thinking={"type": "enabled", "budget_tokens": 1024}).input_tokens
    assert on < off  # Qwen3's hybrid template closes an empty <think></think> when off
    assert on == server.chat(USER, max_tokens=1)["usage"]["prompt_tokens"]


# ---- count_tokens ----------------------------------------------------------------------------

def test_count_tokens_matches_usage(server):
    c = client(server)
    for kw in ({}, {"system": "Be brief."}, {"tools": [WEATHER]},
               {"thinking": {"type": "enabled", "budget_tokens": 4}}):
        n = c.messages.count_tokens(model=server.model, messages=USER, **kw).input_tokens
        m = c.messages.create(model=server.model, messages=USER, max_tokens=5, **kw)
        assert m.usage.input_tokens + m.usage.cache_read_input_tokens == n, (kw, m.usage)
    # again: the prompt is now in the prefix cache, and counted as read from it
    m = c.messages.create(model=server.model, messages=USER, max_tokens=5, tools=[WEATHER])
    assert m.usage.cache_read_input_tokens > 0
    r = curl(server.url + "/v1/messages/count_tokens", "POST",
             json.dumps({"model": server.model, "messages": USER}))
    assert r.status == 200 and r.json() == {"input_tokens": c.messages.count_tokens(
        model=server.model, messages=USER).input_tokens}, r


# ---- errors and headers ----------------------------------------------------------------------

@pytest.mark.parametrize("body,exc,etype,word", [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "url", "url": "http://x/y.png"}}]}]}, anthropic.BadRequestError, "invalid_request_error", "'image'"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "text", "media_type": "text/plain", "data": "x"}}]}]}, anthropic.BadRequestError,
     "invalid_request_error", "'document'"),
    ({"model": "no-such-model"}, anthropic.NotFoundError, "not_found_error", "no-such-model"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, anthropic.BadRequestError,
     "invalid_request_error", "web_search_20250305"),
    ({"container": "c1"}, anthropic.BadRequestError, "invalid_request_error", "container"),
    ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "m"}]}, anthropic.BadRequestError,
     "invalid_request_error", "mcp_servers"),
    ({"service_tier": "standard_only"}, anthropic.BadRequestError, "invalid_request_error", "service_tier"),
    ({"thinking": {"type": "enabled", "budget_tokens": 8}}, anthropic.BadRequestError,
     "invalid_request_error", "budget_tokens"),
    ({"tool_choice": {"type": "any"}}, anthropic.BadRequestError, "invalid_request_error", "tool_choice"),
    ({"stop_sequences": [str(i) for i in range(17)]}, anthropic.BadRequestError, "invalid_request_error",
     "stop_sequences"),
    ({"messages": USER + [{"role": "assistant", "content": "The weather"}]}, anthropic.BadRequestError,
     "invalid_request_error", "prefill"),
    ({"messages": [{"role": "system", "content": "x"}]}, anthropic.BadRequestError, "invalid_request_error",
     "role"),
], ids=["image", "document", "model", "server-tool", "container", "mcp", "tier", "budget", "choice-no-tools",
        "stops", "prefill", "system-role"])
def test_errors(server, body, exc, etype, word):
    kw = {"model": server.model, "messages": USER, "max_tokens": 8}
    extra = {k: v for k, v in body.items() if k not in kw}
    kw.update({k: v for k, v in body.items() if k in kw})
    with pytest.raises(exc) as e:
        client(server).messages.create(**kw, extra_body=extra)
    err = e.value.body
    assert err["type"] == "error" and err["error"]["type"] == etype, err
    assert word in err["error"]["message"], err


def test_sampling_fields(server):
    m = create(server, extra_body={"top_k": 5, "top_p": 0.9, "temperature": 0.5}, metadata={"user_id": "u1"})
    assert m.stop_reason == "max_tokens"
    for field, value in (("temperature", 1.5), ("top_p", 0), ("top_k", -1)):
        with pytest.raises(anthropic.BadRequestError) as e:
            create(server, extra_body={field: value})
        assert field in e.value.body["error"]["message"]


def test_output_config_format(server):
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    m = create(server, max_tokens=40, output_config={"format": {"type": "json_schema", "schema": schema}})
    assert m.stop_reason == "end_turn" and [b.type for b in m.content] == ["text"], m
    jsonschema.validate(json.loads(m.content[0].text), schema)
    with pytest.raises(anthropic.BadRequestError) as e:
        create(server, output_config={"effort": "low"})
    assert "output_config.effort" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:  # the OpenAI check, named in Anthropic's terms
        create(server, stop_sequences=["x"], output_config={"format": {"type": "json_schema", "schema": schema}})
    assert e.value.body["error"]["message"].startswith("stop_sequences: "), e.value.body


def test_unknown_field_ignored_and_version_header_optional(server):
    body = json.dumps({"model": server.model, "messages": USER, "max_tokens": 2, "anthropic_not_a_field": 1})
    for headers in ([], ["anthropic-version: 2023-06-01"], ["anthropic-beta: some-beta-2025-01-01"]):
        r = curl(server.url + "/v1/messages", "POST", body, headers=headers)
        assert r.status == 200 and r.json()["type"] == "message", r
    assert "'anthropic_not_a_field'" in server.proc.stderr_tail(1 << 30)


def test_route_errors_in_anthropic_shape(server):
    r = curl(server.url + "/v1/messages", "POST", "{not json")
    assert r.status == 400 and r.json()["error"]["type"] == "invalid_request_error", r
    r = curl(server.url + "/v1/messages", "GET")
    assert r.status == 405 and r.json()["type"] == "error", r
    big = json.dumps({"model": server.model, "max_tokens": 1, "messages": [{"role": "user", "content": "x" * 70000}]})
    with pytest.raises(anthropic.APIStatusError) as e:  # the session server has --max-body 65536
        client(server).messages.create(model=server.model, max_tokens=1, messages=json.loads(big)["messages"])
    assert e.value.status_code == 413 and e.value.body["error"]["type"] == "request_too_large", e.value.body


@pytest.fixture(scope="module")
def auth(auth_server):
    return auth_server


def test_x_api_key(auth):
    with pytest.raises(anthropic.AuthenticationError) as e:
        client(auth, api_key="wrong").messages.create(model=auth.model, messages=USER, max_tokens=2)
    assert e.value.body["error"]["type"] == "authentication_error"
    m = client(auth, api_key=API_KEY).messages.create(model=auth.model, messages=USER, max_tokens=2)
    assert m.usage.output_tokens == 2
    n = client(auth, api_key=API_KEY).messages.count_tokens(model=auth.model, messages=USER)
    assert n.input_tokens > 0


# ---- the documentation -----------------------------------------------------------------------

def doc_section() -> str:
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text[text.index("## Anthropic Messages API"):]
    return section[:section.index("\n## ", 5)]


def doc_examples() -> list[str]:
    """The curl commands in docs/server.md's Anthropic section."""
    return re.findall(r"```sh\n(curl .*?)\n```", doc_section(), re.S)


def test_doc_python_example_runs(server, capsys):
    (code,) = re.findall(r"```python\n(.*?)\n```", doc_section(), re.S)
    assert "http://127.0.0.1:8080" in code and MODEL_NAME in code
    exec(code.replace("http://127.0.0.1:8080", server.url), {})
    assert re.match(r"(end_turn|max_tokens) \d+ \[", capsys.readouterr().out)


def test_doc_examples_run(server):
    examples = doc_examples()
    assert len(examples) >= 2
    for cmd in examples:
        url = re.search(r"http://localhost:8080(\S+)", cmd).group(1)
        body = re.search(r"-d '(.*)'", cmd, re.S).group(1)
        headers = re.findall(r"-H '([^']+)'", cmd)
        obj = json.loads(body)
        obj["model"] = server.model  # the doc's model is whatever the server serves
        r = curl(server.url + url, "POST", json.dumps(obj),
                 headers=[h for h in headers if not h.lower().startswith("content-type")],
                 stream=bool(obj.get("stream")))
        assert r.status == 200, (cmd, r)
        if obj.get("stream"):
            check_order(events(r.body))
        else:
            assert r.json().get("type") == "message" or "input_tokens" in r.json(), r
