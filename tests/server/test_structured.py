"""Constrained decoding over HTTP with the official openai client (docs/grammar.md,
docs/structured-output.md): every response_format json_schema output of the schema corpus
(tests/unit/data/schema_corpus) parses and validates with Python's jsonschema, greedy and
sampled over many seeds, streamed or not; json_object gives an object; the "grammar"
extension; tool_choice "required" and a named function make the model call a tool whose
arguments validate against its parameters (streamed as OpenAI's delta sequence); refusals
name the field; /metrics counts the masks.

The corpus runs on kipp-tiny, the trained checkpoint: a random model writes noise inside a
string until max_tokens, so few of its documents would end; a trained one closes strings
often enough that most do. An output cut by max_tokens cannot be a whole document: it is
counted, and at least MIN_FINISHED of the outputs must finish; every finished one must
parse and validate. The rest run on the random checkpoint (whatever it writes is the
grammar's doing)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, Srv, start_server

CORPUS = sorted((ROOT / "tests/unit/data/schema_corpus").glob("*.json"))
USER = [{"role": "user", "content": "Answer in JSON."}]
NOTHINK = {"chat_template_kwargs": {"enable_thinking": False}}
SEEDS = 2
MAX_TOKENS = 300
MIN_FINISHED = 0.6
TRAINED = str(ROOT / "models" / "kipp-tiny" / "kipp-tiny-bf16.gguf")


@pytest.fixture(scope="module")
def trained() -> Srv:
    return Srv(start_server("trained", model=TRAINED), model_name="kipp-tiny-bf16")


def corpus():
    out = []
    for p in CORPUS:
        case = json.loads(p.read_text())
        if case.get("schema") is None:  # json_object mode's entry
            continue
        out.append((case["name"], case["schema"]))
    return out


def schema_format(name: str, schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name[:64], "schema": schema, "strict": True}}


def run_all(fn, jobs):
    with ThreadPoolExecutor(max_workers=8) as ex:
        return list(ex.map(fn, jobs))


def test_corpus_outputs_validate(trained):
    """Each schema, greedy and SEEDS sampled runs: finished outputs validate; most finish."""
    server = trained
    c = server.client()
    cases = corpus()
    assert len(cases) >= 25, f"the schema corpus has {len(cases)} schemas"
    jobs = [(name, schema, seed) for name, schema in cases for seed in [None, *range(SEEDS)]]

    def one(job):
        name, schema, seed = job
        kw = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
        r = c.chat.completions.create(model=server.model, messages=USER, max_tokens=MAX_TOKENS,
                                      response_format=schema_format(name, schema), extra_body=NOTHINK, **kw)
        return name, schema, seed, r.choices[0].message.content, r.choices[0].finish_reason

    finished = 0
    for name, schema, seed, text, fin in run_all(one, jobs):
        if fin == "length":
            continue
        assert fin == "stop", (name, seed, fin)
        finished += 1
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            pytest.fail(f"{name} seed {seed}: output is not JSON ({e}): {text!r}")
        try:
            jsonschema.validate(doc, schema)
        except jsonschema.ValidationError as e:
            pytest.fail(f"{name} seed {seed}: output does not validate ({e.message}): {text!r}")
    print(f"{finished} of {len(jobs)} constrained outputs finished")
    assert finished >= MIN_FINISHED * len(jobs), f"only {finished} of {len(jobs)} constrained outputs finished"


def test_streamed_equals_whole_and_validates(trained):
    server = trained
    c = server.client()
    name, schema = next((n, s) for n, s in corpus() if n == "nested_object")
    kw = dict(model=server.model, messages=USER, max_tokens=MAX_TOKENS, temperature=0,
              response_format=schema_format(name, schema), extra_body=NOTHINK)
    whole = c.chat.completions.create(**kw).choices[0].message.content
    text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(stream=True, **kw)
                   if ch.choices)
    assert text == whole
    jsonschema.validate(json.loads(text), schema)


def test_json_object_mode(server):
    c = server.client()
    for seed in range(6):
        r = c.chat.completions.create(model=server.model, messages=USER, max_tokens=MAX_TOKENS,
                                      temperature=1.0, seed=seed, response_format={"type": "json_object"},
                                      extra_body=NOTHINK)
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_grammar_field_chat_and_completions(server):
    g = 'root ::= ("yes" | "no") "." [ ]? ("Sure" | "Never")'
    c = server.client()
    for seed in range(5):
        r = c.chat.completions.create(model=server.model, messages=USER, max_tokens=20, temperature=1.0,
                                      seed=seed, extra_body={"grammar": g, **NOTHINK})
        assert r.choices[0].message.content in {a + b + d for a in ("yes", "no") for b in (".", ". ")
                                                for d in ("Sure", "Never")}
        assert r.choices[0].finish_reason == "stop"
    r = c.completions.create(model=server.model, prompt="The answer is", max_tokens=20, temperature=0,
                             extra_body={"grammar": 'root ::= [0-9]{3} "!"'})
    assert len(r.choices[0].text) == 4 and r.choices[0].text[:3].isdigit() and r.choices[0].text[3] == "!"


def test_thinking_is_free_until_think_ends(server):
    """With thinking on, the grammar starts after </think>. Biases make the random model
    think "<think></think>" (the repetition penalty cuts <think>'s +100 to a fifth once it
    was used, so </think>'s +80 wins next); then the grammar writes the content."""
    think, think_end = 151667, 151668
    r = server.chat(USER, max_tokens=30, temperature=0, repetition_penalty=5.0, logprobs=True,
                    logit_bias={str(think): 100, str(think_end): 80}, grammar='root ::= "ok"')
    toks = [t["token"] for t in r["choices"][0]["logprobs"]["content"]]
    assert toks[:2] == ["<think>", "</think>"], toks
    msg = r["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"] or "") == ("ok", "")
    assert r["choices"][0]["finish_reason"] == "stop"
    # without thinking the same grammar applies from the first token
    r = server.chat(USER, max_tokens=30, temperature=0, grammar='root ::= "ok"', **NOTHINK)
    assert r["choices"][0]["message"]["content"] == "ok"


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}/[A-Z][a-z]{1,8}$"}},
    "required": ["zone"], "additionalProperties": False}}}
NOARGS = {"type": "function", "function": {"name": "ping"}}
TOOLS = [WEATHER, TIME, NOARGS]
SCHEMAS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object"}) for t in TOOLS}


def check_calls(msg, fin, only=None, at_most_one=False):
    assert fin == "tool_calls", fin
    assert msg.tool_calls, "no tool_calls"
    assert not msg.content, f"content leaked: {msg.content!r}"
    if at_most_one:
        assert len(msg.tool_calls) == 1
    ids = set()
    for call in msg.tool_calls:
        assert call.type == "function" and call.id.startswith("call_") and call.id not in ids
        ids.add(call.id)
        name = call.function.name
        assert name in SCHEMAS and (only is None or name == only), name
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[name])


@pytest.mark.parametrize("choice", ["required", "named"])
def test_forced_tool_calls(server, choice):
    c = server.client()
    tc = "required" if choice == "required" else {"type": "function", "function": {"name": "get_time"}}
    only = None if choice == "required" else "get_time"
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]

    def one(seed):
        kw = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
        return c.chat.completions.create(model=server.model, messages=msgs, tools=TOOLS, tool_choice=tc,
                                         max_tokens=MAX_TOKENS, extra_body=NOTHINK, **kw)

    n_done = 0
    for r in run_all(one, [None, *range(6)]):
        if r.choices[0].finish_reason == "length":
            continue
        n_done += 1
        check_calls(r.choices[0].message, r.choices[0].finish_reason, only=only,
                    at_most_one=choice == "named")
    assert n_done >= 5


def test_forced_single_call_streams_openai_deltas(server):
    c = server.client()
    kw = dict(model=server.model, messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS,
              tool_choice="required", parallel_tool_calls=False, max_tokens=MAX_TOKENS, temperature=0,
              extra_body=NOTHINK)
    whole = c.chat.completions.create(**kw)
    check_calls(whole.choices[0].message, whole.choices[0].finish_reason, at_most_one=True)
    name, args, ids, fin, n_arg_chunks = None, "", [], None, 0
    for ch in c.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        assert not d.content, f"content leaked while streaming: {d.content!r}"
        for t in d.tool_calls or []:
            assert t.index == 0
            if t.id:
                assert name is None, "a second call header"
                ids.append(t.id)
                name = t.function.name
                assert t.function.arguments == ""
            else:
                assert name is not None, "arguments before the name"
                args += t.function.arguments
                n_arg_chunks += 1
        fin = ch.choices[0].finish_reason or fin
    call = whole.choices[0].message.tool_calls[0]
    assert (name, args, fin) == (call.function.name, call.function.arguments, "tool_calls")
    assert n_arg_chunks >= 1


@pytest.mark.parametrize("body,param,words", [
    ({"grammar": "root ::= missing"}, "grammar", "rule 'missing' is used but not defined"),
    ({"grammar": "root ::= root \"x\""}, "grammar", "left-recursive"),
    ({"grammar": 12}, "grammar", "must be a string"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "number", "multipleOf": 3}}}}, "response_format", "multipleOf"),
    ({"response_format": {"type": "yaml"}}, "response_format", "yaml"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "json_schema"),
    ({"response_format": {"type": "json_object"}, "grammar": "root ::= \"a\""}, "grammar", "both"),
    ({"tool_choice": "required"}, "tool_choice", "needs 'tools'"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": TOOLS}, "tool_choice",
     "'nope'"),
    ({"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "tools[0].function.name", "function.name"),
    ({"tool_choice": "required", "tools": TOOLS, "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot both"),
    ({"tool_choice": "auto", "tools": TOOLS, "parallel_tool_calls": False}, "parallel_tool_calls", "auto"),
])
def test_refusals_name_the_field(server, body, param, words):
    st, _, js = server.post("/v1/chat/completions", {"model": server.model, "messages": USER, **body})
    assert st == 400, js
    assert js["error"]["param"] == param, js
    assert words in js["error"]["message"], js


def test_metrics_count_masks(server):
    before = server.metrics()
    server.chat(USER, max_tokens=10, temperature=0, grammar='root ::= "a"{1,5}', **NOTHINK)
    after = server.wait_idle()
    assert after.get("kipp_grammar_requests_total") >= before.get("kipp_grammar_requests_total") + 1
    assert after.get("kipp_grammar_masks_total") >= before.get("kipp_grammar_masks_total") + 2
    assert after.get("kipp_grammar_mask_seconds_total") > 0
