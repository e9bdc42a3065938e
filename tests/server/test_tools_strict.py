"""Tool calls are checked (docs/server.md, "Tool calls"; issue 30 items 8 and 9): `tools` is
validated when the request arrives (each bad entry a 400 whose param names it), a parsed
call must name a declared tool, </tool_call> inside a JSON string does not end a call, and a
call whose arguments are not a complete JSON object is never returned — not when max_tokens
cut it, streamed or not. Texts a model would rarely write are made by the "grammar"
extension with tool_choice "auto" (the split then sees exactly that text); the cut calls are
kipp-tiny's own, forced by tool_choice "required"."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import ROOT, Srv, start_server

USER = [{"role": "user", "content": "What is 2 + 3?"}]
NOTHINK = {"chat_template_kwargs": {"enable_thinking": False}}
ADD = {"type": "function", "function": {"name": "add", "description": "Adds two integers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TRAINED = str(ROOT / "models" / "kipp-tiny" / "kipp-tiny-bf16.gguf")


@pytest.fixture(scope="module")
def trained() -> Srv:
    return Srv(start_server("trained-tools", model=TRAINED), model_name="kipp-tiny-bf16")


def gbnf_literal(text: str) -> str:
    """A grammar whose one sentence is text."""
    return "root ::= " + json.dumps(text)


def post(srv, **body):
    return srv.post("/v1/chat/completions", {"model": srv.model, "messages": USER, **body})


def streamed(srv, **body):
    """(content, [(name, arguments)], finish_reason) of a streamed chat reply, from OpenAI's
    deltas: a call's first delta has its id and name, the next ones pieces of arguments."""
    r = srv.stream("/v1/chat/completions", {"model": srv.model, "messages": USER, "stream": True, **body})
    assert r.status == 200 and r.done, r.body
    calls, finish = {}, None
    for c in r.chunks:
        for ch in c.get("choices") or []:
            for t in (ch.get("delta") or {}).get("tool_calls") or []:
                if t.get("id"):
                    assert t["index"] not in calls, "a call announced twice"
                    calls[t["index"]] = [t["function"]["name"], ""]
                else:
                    calls[t["index"]][1] += t["function"]["arguments"]
            finish = ch.get("finish_reason") or finish
    return r.text("content"), [tuple(calls[i]) for i in sorted(calls)], finish


def whole(js):
    ch = js["choices"][0]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in ch["message"].get("tool_calls") or []]
    return ch["message"]["content"] or "", calls, ch["finish_reason"]


# ---- the split: declared names, </tool_call> inside strings ---------------------------------

RM_RF = '<tool_call>\n{"name": "rm_rf", "arguments": {"path": "/"}}\n</tool_call>'
IN_STRING = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "a</tool_call>b"}}\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
def test_undeclared_function_is_no_call(server, stream):
    """A call to a function the request did not declare is text, not a tool call: the
    block stays in content verbatim and finish_reason is "stop", never "tool_calls"."""
    body = dict(tools=[WEATHER, ADD], tool_choice="auto", grammar=gbnf_literal(RM_RF), max_tokens=200,
                temperature=0, **NOTHINK)
    if stream:
        content, calls, finish = streamed(server, **body)
    else:
        st, _, js = post(server, **body)
        assert st == 200, js
        content, calls, finish = whole(js)
    assert (content, calls, finish) == (RM_RF, [], "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_close_tag_inside_a_string_argument(server, stream):
    """</tool_call> inside a JSON string of the arguments does not end the call: the
    arguments are the whole object (valid JSON) and no tag text reaches content."""
    body = dict(tools=[WEATHER], tool_choice="auto", grammar=gbnf_literal(IN_STRING), max_tokens=200,
                temperature=0, **NOTHINK)
    if stream:
        content, calls, finish = streamed(server, **body)
    else:
        st, _, js = post(server, **body)
        assert st == 200, js
        content, calls, finish = whole(js)
        assert js["choices"][0]["message"]["content"] is None
    assert content == "" and finish == "tool_calls", (content, calls, finish)
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "a</tool_call>b"})]


@pytest.mark.parametrize("stream", [False, True])
def test_call_cut_inside_its_arguments_is_dropped(server, stream):
    """max_tokens cuts the call before its arguments close: no tool call, no tag text,
    finish_reason "length" — the same streamed (nothing was announced) and not."""
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "' + "x" * 300 + '"}}\n</tool_call>'
    body = dict(tools=[WEATHER], tool_choice="auto", grammar=gbnf_literal(text), max_tokens=40,
                temperature=0, **NOTHINK)
    if stream:
        got = streamed(server, **body)
    else:
        st, _, js = post(server, **body)
        assert st == 200, js
        got = whole(js)
    assert got == ("", [], "length")


# ---- kipp-tiny's own calls, cut by max_tokens -----------------------------------------------

SEEDS = range(12)


def test_forced_calls_cut_by_max_tokens_never_return_broken_arguments(trained):
    """Issue 30 item 9: with tool_choice "required" and max_tokens 60, kipp-tiny's calls are
    mostly cut inside their arguments. Every tool call that comes back, streamed or not, has
    arguments that json.loads to an object valid for the tool; streamed and whole agree."""
    def one(seed):
        body = dict(tools=[ADD], tool_choice="required", max_tokens=60, temperature=1.0, seed=seed, **NOTHINK)
        st, _, js = post(trained, **body)
        assert st == 200, js
        return whole(js), streamed(trained, **body)

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(one, SEEDS))
    n_cut = 0
    for seed, (w, s) in zip(SEEDS, results):
        assert w == s, f"seed {seed}: streamed {s} != whole {w}"
        content, calls, finish = w
        assert content == "", f"seed {seed}: content {content!r}"
        n_cut += finish == "length"
        assert finish in ("tool_calls", "length"), f"seed {seed}: {finish}"
        if finish == "tool_calls":
            assert calls, f"seed {seed}: finish_reason tool_calls without calls"
        for name, args in calls:
            a = json.loads(args)  # never a fragment like '{"a" : 2200065921015766, "b":'
            assert name == "add" and set(a) == {"a", "b"}, (seed, name, args)
            assert all(isinstance(v, int) and -2**63 <= v < 2**63 for v in a.values()), (seed, args)
    assert n_cut >= 1, "no reply was cut by max_tokens: the test shows nothing"


# ---- tools validated at request time ---------------------------------------------------------

BAD_TOOLS = [
    ([{"type": "code_interpreter"}], "tools[0].type", "not supported"),
    ([WEATHER, {"type": "function"}], "tools[1].function", "must be an object"),
    (["get_weather"], "tools[0]", "must be an object"),
    ([{"function": WEATHER["function"]}], "tools[0].type", "function"),
    ([{"type": "function", "function": {"name": "bad name!"}}], "tools[0].function.name", "1 to 64"),
    ([{"type": "function", "function": {"name": "x" * 65}}], "tools[0].function.name", "1 to 64"),
    ([WEATHER, ADD, WEATHER], "tools[2].function.name", "unique"),
    ([{"type": "function", "function": {"name": "f", "parameters": False}}], "tools[0].function.parameters",
     "JSON Schema object"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
     "tools[0].function.parameters", '"type": "object"'),
    ([{"type": "function", "function": {"name": "f", "parameters": "{}"}}], "tools[0].function.parameters",
     "JSON Schema object"),
    ([{"type": "function", "function": {"name": "f", "description": 5}}], "tools[0].function.description",
     "string"),
    ([{"type": "function", "function": {"name": "f", "strict": "yes"}}], "tools[0].function.strict",
     "true or false"),
]


@pytest.mark.parametrize("tool_choice", ["auto", "required", "none"])
@pytest.mark.parametrize("tools,param,words", BAD_TOOLS, ids=[p for _, p, _ in BAD_TOOLS])
def test_bad_tools_are_refused(server, tools, param, words, tool_choice):
    st, _, js = post(server, tools=tools, tool_choice=tool_choice, max_tokens=2)
    assert st == 400, js
    assert js["error"]["type"] == "invalid_request_error"
    assert js["error"]["param"] == param, js
    assert words in js["error"]["message"], js


def test_forced_parameters_that_cannot_be_enforced_are_refused(server):
    """As in response_format: a keyword the lowering cannot honour is a 400, here naming the
    tool; with tool_choice "auto" the schema is only shown to the model, so it is accepted."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "number", "multipleOf": 3}}}}}
    st, _, js = post(server, tools=[WEATHER, tool], tool_choice="required", max_tokens=2)
    assert st == 400 and js["error"]["param"] == "tools[1].function.parameters", js
    assert "multipleOf" in js["error"]["message"], js
    st, _, js = post(server, tools=[WEATHER, tool], tool_choice="auto", max_tokens=2)
    assert st == 200, js


@pytest.mark.parametrize("stream", [False, True])
def test_forced_parameters_without_type_give_an_object(server, stream):
    """parameters without "type" (here only "properties") are taken as an object schema: a
    forced call's arguments are always a JSON object."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "properties": {"k": {"type": "boolean"}}, "required": ["k"]}}}
    body = dict(tools=[tool], tool_choice="required", parallel_tool_calls=False, max_tokens=200,
                temperature=0, **NOTHINK)
    if stream:
        content, calls, finish = streamed(server, **body)
    else:
        st, _, js = post(server, **body)
        assert st == 200, js
        content, calls, finish = whole(js)
    assert finish == "tool_calls" and len(calls) == 1, (content, calls, finish)
    assert calls[0][0] == "f" and isinstance(json.loads(calls[0][1])["k"], bool)
