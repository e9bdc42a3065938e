"""test_responses.py — the OpenAI Responses API (POST /v1/responses, stateless; docs/server.md,
"OpenAI Responses API") driven by the official openai package's client.responses, plus raw
HTTP where the bytes matter (the SSE `event:` lines, the error shape):

- input as a string and as items (messages with string or text-part content, the {role,
  content} shorthand, developer as system), instructions: the same prompt and greedy text as
  the chat request they stand for (input_tokens and text compared);
- streaming: the typed events in order, sequence_number 0..n-1, `event:` equal to the data's
  type, deltas adding up to the final object, which equals the non-streamed response; the
  SDK's responses.stream() helper and its final response;
- a whole function-call round trip (forced tool -> function_call item -> function_call_output
  -> text), streamed calls' argument events, the rendered prompt the same as chat's;
- text.format json_schema (the output validates) and json_object;
- max_output_tokens -> status "incomplete" (response.incomplete when streamed);
- reasoning: a reasoning item (Thinking-2507's template on the tiny checkpoint), streamed as
  reasoning_text events, passed back as input; reasoning.effort mapped to enable_thinking;
- 400s in OpenAI's shape naming the Responses field: previous_response_id, built-in tools,
  image parts, background, ... and the chat checks' names mapped back (tools[0].name,
  text.format, max_output_tokens, input);
- the curl example of docs/server.md, run as written."""

from __future__ import annotations

import json
import re
import subprocess

import jsonschema
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from conftest import ROOT, VARIED, Srv, curl, start_server

GREEDY = {"temperature": 0}
USER = "Name three colours."
TOOL = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                       "required": ["city"], "additionalProperties": False}}
CHAT_TOOL = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)


def create(server, **kw):
    """client.responses.create with the model, greedy and varied text by default."""
    kw.setdefault("temperature", 0)
    extra = dict(VARIED)
    extra.update(kw.pop("extra_body", {}))
    return server.client().responses.create(model=server.model, extra_body=extra, **kw)


def chat(server, messages, **kw):
    return server.chat(messages, temperature=0, **VARIED, **kw)


def post(server, body, path="/v1/responses"):
    st, _, js = server.post(path, {"model": server.model, **body})
    return st, js


def refused(server, body, param, words=()):
    """A 400 in OpenAI's error shape naming param."""
    st, js = post(server, body)
    assert st == 400, (st, js)
    err = js["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["type"] == "invalid_request_error", js
    assert err["param"] == param, js
    for w in words:
        assert w in err["message"], js
    return err


def sse(raw: bytes):
    """[(event line, data)] of a raw SSE body; every event has both lines."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


def raw_stream(server, **kw):
    """A streamed request's events as raw JSON, each validated strictly against the SDK's
    event types (the SDK itself builds them unchecked) and named by its `event:` line."""
    body = {"model": server.model, "stream": True, **GREEDY, **VARIED, **kw.pop("extra_body", {}), **kw}
    st, hd, raw = server.request("POST", "/v1/responses", json.dumps(body).encode())
    assert st == 200 and hd["content-type"].startswith("text/event-stream"), raw[:300]
    evs = sse(raw)
    assert all(name == data["type"] for name, data in evs)
    for _, data in evs:
        STREAM_EVENT.validate_python(data)
    return [d for _, d in evs]


def strip_ids(v):
    """Output items without their ids (random per response) and the stream helper's parsed
    fields (None for plain text)."""
    if isinstance(v, list):
        return [strip_ids(x) for x in v]
    if isinstance(v, dict):
        return {k: strip_ids(x) for k, x in v.items() if k not in ("id", "call_id", "parsed", "parsed_arguments")}
    return v


# ---- requests as chat requests -------------------------------------------------------------

def test_string_input_is_a_user_message(server):
    r = create(server, input=USER, max_output_tokens=8)
    c = chat(server, [{"role": "user", "content": USER}], max_tokens=8)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == server.model
    assert r.output_text == c["choices"][0]["message"]["content"]
    assert r.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r.usage.output_tokens == c["usage"]["completion_tokens"]
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens >= 0
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    msg = r.output[-1]
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text" and msg.content[0].annotations == []
    # the request's echo: the SDK's Response model requires them
    assert (r.tool_choice, r.tools, r.parallel_tool_calls, r.max_output_tokens) == ("auto", [], True, 8)
    assert r.temperature == 0 and r.top_p == 1 and r.text.format.type == "text"
    # /responses is the same route
    st, js = post(server, {"input": USER, "max_output_tokens": 8, **GREEDY, **VARIED}, "/responses")
    assert st == 200 and js["output"][-1]["content"][0]["text"] == r.output_text, js
    Response.model_validate(js, strict=True)


def test_items_and_instructions(server):
    items = [
        {"type": "message", "role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hello"},
                                     {"type": "input_text", "text": "there"}]},
        {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1",
         "content": [{"type": "output_text", "text": "Hi!", "annotations": []}]},
        {"role": "user", "content": USER},
    ]
    r = create(server, instructions="You are terse.", input=items, max_output_tokens=6)
    c = chat(server, [{"role": "system", "content": "You are terse."}, {"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Hello\nthere"}, {"role": "assistant", "content": "Hi!"},
                      {"role": "user", "content": USER}], max_tokens=6)
    assert r.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r.output_text == c["choices"][0]["message"]["content"]
    assert r.instructions == "You are terse."


# ---- streaming -------------------------------------------------------------------------------

def check_events(events):
    """The typed sequence: created, in_progress, items each added ... done, a final event;
    sequence numbers 0..n-1. Returns the final response."""
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    final = events[-1].response
    text = {}
    for e in events:
        if e.type in ("response.output_text.delta", "response.reasoning_text.delta"):
            text[e.item_id] = text.get(e.item_id, "") + e.delta
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [e.item.id for e in events if e.type == "response.output_item.added"] == [i.id for i in done]
    assert [i.model_dump() for i in done] == [i.model_dump() for i in final.output]
    for item in final.output:
        if item.type in ("message", "reasoning"):
            assert item.content[0].text == text.get(item.id, ""), item
    return final


def test_stream_matches_non_stream(server):
    kw = dict(input=USER, max_output_tokens=10)
    full = create(server, **kw)
    events = list(create(server, stream=True, **kw))
    final = check_events(events)
    assert strip_ids(final.model_dump()["output"]) == strip_ids(full.model_dump()["output"])
    assert final.usage.output_tokens == full.usage.output_tokens and final.status == full.status == "incomplete"
    assert events[-1].type == "response.incomplete"
    # raw bytes: each event's `event:` line names its data's type
    evs = raw_stream(server, **kw)
    collapse = lambda ts: [t for i, t in enumerate(ts) if i == 0 or t != ts[i - 1]]  # noqa: E731 (deltas: as pumped)
    assert collapse([d["type"] for d in evs]) == collapse([e.type for e in events])


def test_stream_helper_final_response(server):
    """responses.stream() accumulates the events; its final response (response.completed) is
    the non-streamed one. A JSON schema makes the reply end on its own."""
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    kw = dict(model=server.model, input="A person as JSON.", text=fmt, temperature=0, max_output_tokens=60,
              extra_body=VARIED)
    full = server.client().responses.create(**kw)
    with server.client().responses.stream(**kw) as s:
        deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    assert final.status == "completed" and deltas == final.output_text == full.output_text
    assert strip_ids(final.model_dump()["output"]) == strip_ids(full.model_dump()["output"])
    jsonschema.validate(json.loads(final.output_text), SCHEMA)


# ---- tools -----------------------------------------------------------------------------------

def test_function_call_round_trip(server):
    r = create(server, input="Weather in Paris?", tools=[TOOL],
               tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=300)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert call.status == "completed"
    args = json.loads(call.arguments)
    jsonschema.validate(args, TOOL["parameters"])
    # the client runs it and sends the whole conversation back (stateless)
    items = [{"role": "user", "content": "Weather in Paris?"}, *[o.model_dump(exclude_none=True) for o in r.output],
             {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}]
    r2 = create(server, input=items, tools=[TOOL], tool_choice="none", max_output_tokens=8)
    assert r2.output[-1].type == "message" and r2.output_text, r2.output
    c = chat(server, [{"role": "user", "content": "Weather in Paris?"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": call.call_id, "type": "function",
                           "function": {"name": "get_weather", "arguments": call.arguments}}]},
                      {"role": "tool", "tool_call_id": call.call_id, "content": "Sunny, 21 C"}],
             tools=[CHAT_TOOL], tool_choice="none", max_tokens=8)
    assert r2.usage.input_tokens == c["usage"]["prompt_tokens"]
    assert r2.output_text == c["choices"][0]["message"]["content"]


def test_function_call_streamed(server):
    kw = dict(input="Weather in Oslo?", tools=[TOOL], tool_choice="required", max_output_tokens=300)
    full = create(server, **kw)
    events = list(create(server, stream=True, **kw))
    final = check_events(events)
    assert strip_ids(final.model_dump()["output"]) == strip_ids(full.model_dump()["output"])
    item = next(o for o in final.output if o.type == "function_call")
    added = next(e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call")
    assert added.item.arguments == "" and added.item.status == "in_progress"
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert deltas == done.arguments == item.arguments and done.item_id == item.id
    json.loads(item.arguments)
    raw_stream(server, **kw)  # the events validate strictly


def test_parallel_tool_calls_false_makes_one_call(server):
    """tool_choice auto with parallel_tool_calls false (Codex's pair): the reply ends at the
    first call's </tool_call>. A grammar (the chat extension) writes two calls."""
    two = "".join('<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>\n' % c
                  for c in ("Oslo", "Rome")).rstrip()
    kw = dict(input="Weather?", tools=[TOOL], max_output_tokens=200, reasoning={"effort": "none"},
              extra_body={"grammar": "root ::= " + json.dumps(two)})
    for parallel, cities in ((True, ["Oslo", "Rome"]), (False, ["Oslo"])):
        for stream in (False, True):
            r = create(server, parallel_tool_calls=parallel, stream=stream, **kw)
            r = check_events(list(r)) if stream else r
            calls = [o for o in r.output if o.type == "function_call"]
            assert [json.loads(c.arguments)["city"] for c in calls] == cities, r.output
            assert r.status == "completed" and r.parallel_tool_calls is parallel


# ---- structured output, limits, reasoning -------------------------------------------------------

def test_text_format(server):
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    for prompt in ("A person.", "Someone else."):
        r = create(server, input=prompt, text=fmt, max_output_tokens=300)
        assert r.status == "completed", r
        jsonschema.validate(json.loads(r.output_text), SCHEMA)
        assert r.text.format.type == "json_schema" and r.text.format.name == "person"
    # the SDK's parse() helper: a pydantic model as the schema, the output parsed back into it
    from pydantic import BaseModel, Field

    class Person(BaseModel):
        name: str = Field(max_length=12)
        age: int = Field(ge=0, le=150)

    p = server.client().responses.parse(model=server.model, input="A person.", text_format=Person, temperature=0,
                                        max_output_tokens=300, extra_body=VARIED)
    assert p.status == "completed" and isinstance(p.output_parsed, Person), p
    # json_object: any object (the random model may write one longer than max_output_tokens)
    r = create(server, input="JSON please.", text={"format": {"type": "json_object"}}, max_output_tokens=60)
    assert r.output_text.startswith("{"), r
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict), r


def test_max_output_tokens_incomplete(server):
    r = create(server, input=USER, max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[-1].status == "incomplete" and r.usage.output_tokens == 3


@pytest.fixture(scope="module")
def thinking(tmp_path_factory):
    """The tiny checkpoint with Thinking-2507's template: its reply starts inside <think>."""
    from test_chat_2507 import TEMPLATES, swap_template
    path = str(tmp_path_factory.mktemp("resp2507") / "kipp-tiny-thinking.gguf")
    swap_template(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf", path,
                  (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8"))
    return Srv(start_server("responses-thinking", "--model-name", "tiny", model=path), model_name="tiny")


def test_reasoning_items(thinking):
    """max_reasoning_tokens (the chat extension) ends the reasoning after 6 tokens; the reply
    is a reasoning item, then a message: the chat reply's reasoning_content and content."""
    kw = dict(input=USER, max_output_tokens=12, extra_body={"max_reasoning_tokens": 6})
    r = create(thinking, **kw)
    c = chat(thinking, [{"role": "user", "content": USER}], max_tokens=12, max_reasoning_tokens=6)["choices"][0]
    assert [o.type for o in r.output] == ["reasoning", "message"], r.output
    rs = r.output[0]
    assert rs.id.startswith("rs_") and rs.summary == [] and rs.content[0].type == "reasoning_text"
    assert rs.content[0].text == c["message"]["reasoning_content"] and rs.content[0].text
    assert r.output_text == (c["message"]["content"] or "")
    assert 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
    events = list(create(thinking, stream=True, **kw))
    final = check_events(events)
    assert strip_ids(final.model_dump()["output"]) == strip_ids(r.model_dump()["output"])
    assert "response.reasoning_text.delta" in [e.type for e in events]
    raw_stream(thinking, **kw)
    # passed back: the reasoning is the assistant turn's reasoning_content
    items = [{"role": "user", "content": USER}, *[o.model_dump(exclude_none=True) for o in r.output],
             {"role": "user", "content": "More."}]
    r2 = create(thinking, input=items, max_output_tokens=2)
    c2 = chat(thinking, [{"role": "user", "content": USER},
                         {"role": "assistant", "content": r.output_text, "reasoning_content": rs.content[0].text},
                         {"role": "user", "content": "More."}], max_tokens=2)
    assert r2.usage.input_tokens == c2["usage"]["prompt_tokens"]


def test_reasoning_effort_switches_thinking(server):
    """Qwen3's hybrid template: effort none/minimal is enable_thinking false (its prompt
    closes an empty <think>), low/medium/high is true."""
    msgs = [{"role": "user", "content": USER}]
    n = {on: chat(server, msgs, max_tokens=1, chat_template_kwargs={"enable_thinking": on})["usage"]["prompt_tokens"]
         for on in (True, False)}
    assert n[True] != n[False]
    for effort, on in (("none", False), ("minimal", False), ("low", True), ("medium", True), ("high", True)):
        r = create(server, input=USER, max_output_tokens=1, reasoning={"effort": effort, "summary": "auto"})
        assert r.usage.input_tokens == n[on], effort
        assert r.reasoning.effort == effort


# ---- what is accepted, what is refused ---------------------------------------------------------

def test_accepted_fields(server):
    st, js = post(server, {"input": USER, "max_output_tokens": 2, "store": False, "truncation": "auto",
                           "include": ["reasoning.encrypted_content"], "metadata": {"k": "v"}, "user": "u",
                           "parallel_tool_calls": True, "service_tier": "auto", "top_logprobs": 0,
                           "prompt_cache_key": "k", "safety_identifier": "s", "background": False,
                           "text": {"verbosity": "medium"}, "stream_options": {"include_obfuscation": False},
                           "not_a_field": 1})
    assert st == 200 and js["metadata"] == {"k": "v"} and js["store"] is False, js
    assert "not_a_field" in server.proc.stderr_tail(20000)


@pytest.mark.parametrize("body,param,words", [
    ({"input": USER, "previous_response_id": "resp_1"}, "previous_response_id", ["stateless", "input"]),
    ({"input": USER, "conversation": "conv_1"}, "conversation", ["stateless"]),
    ({"input": USER, "prompt": {"id": "pmpt_1"}}, "prompt", []),
    ({"input": USER, "background": True}, "background", ["stores nothing"]),
    ({"input": USER, "max_tool_calls": 2}, "max_tool_calls", []),
    ({"input": USER, "top_logprobs": 3}, "top_logprobs", ["logprobs"]),
    ({"input": USER, "include": ["message.output_text.logprobs"]}, "include[0]", ["logprobs"]),
    ({"input": USER, "truncation": "sometimes"}, "truncation", []),
    ({"input": USER, "tools": [{"type": "web_search"}]}, "tools[0].type", ["web_search", "function"]),
    ({"input": USER, "tools": [TOOL, {"type": "code_interpreter", "container": {"type": "auto"}}]},
     "tools[1].type", ["code_interpreter"]),
    ({"input": USER, "tool_choice": {"type": "file_search"}}, "tool_choice", ["file_search"]),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "Look:"},
                                             {"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "input[0].content[1].type", ["input_image"]),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", ["stores nothing"]),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type", ["web_search_call"]),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", []),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
     "input[0].arguments", []),
    ({"input": []}, "input", []),
    ({}, "input", ["stateless"]),
    ({"input": USER, "reasoning": {"effort": "extreme"}}, "reasoning.effort", []),
    ({"input": USER, "text": {"verbosity": "high"}}, "text.verbosity", []),
    ({"input": USER, "max_output_tokens": 0}, "max_output_tokens", []),
    ({"input": USER, "temperature": 3}, "temperature", []),
    # the chat checks' names, mapped back to the Responses fields
    ({"input": USER, "tools": [{**TOOL, "name": "bad name!"}]}, "tools[0].name", []),
    ({"input": USER, "text": {"format": {"type": "json_schema", "name": "x",
                                         "schema": {"type": "number", "multipleOf": 3}}}}, "text.format", []),
    ({"input": USER, "text": {"format": {"type": "yaml"}}}, "text.format", []),
    ({"input": USER, "tool_choice": "required"}, "tool_choice", []),
])
def test_refused(server, body, param, words):
    refused(server, body, param, words)


def test_front_door(server, auth_server):
    """The API key (bearer or x-api-key) guards the route; its requests are counted under
    endpoint="responses"."""
    before = server.metrics().get("kipp_requests_total", endpoint="responses", status="200")
    create(server, input=USER, max_output_tokens=1)
    assert server.metrics().get("kipp_requests_total", endpoint="responses", status="200") == before + 1
    r = auth_server.client().responses.create(model=auth_server.model, input=USER, max_output_tokens=1)
    assert r.status == "incomplete"
    with pytest.raises(openai.AuthenticationError) as e:
        auth_server.client(api_key="wrong").responses.create(model=auth_server.model, input=USER)
    assert e.value.body["code"] == "invalid_api_key"


def test_refusal_through_the_sdk(server):
    with pytest.raises(openai.BadRequestError) as e:
        server.client().responses.create(model=server.model, input=USER, previous_response_id="resp_123")
    assert e.value.status_code == 400 and e.value.body["param"] == "previous_response_id"


# ---- docs/server.md ---------------------------------------------------------------------------

def test_docs_examples(server, capsys):
    """The section's curl and Python examples, run as written (the address and model
    replaced by the test server's)."""
    doc = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    sec = doc[doc.index("## OpenAI Responses API"):]
    sec = sec[:sec.index("\n## ", 3)]
    fix = lambda b: b.replace("http://127.0.0.1:8080", server.url).replace("kipp-tiny-tied-bf16", server.model)  # noqa: E731
    sh, py = re.findall(r"```sh\n(.*?)```", sec, re.S), re.findall(r"```python\n(.*?)```", sec, re.S)
    assert sh and py, "the section has no examples"
    for b in sh:
        r = subprocess.run(["bash", "-c", fix(b)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        js = json.loads(r.stdout)
        assert js["object"] == "response" and js["instructions"] == "Be brief." and js["output"], js
    for b in py:
        exec(fix(b), {})
        assert capsys.readouterr().out.split()[0] in ("completed", "incomplete")
