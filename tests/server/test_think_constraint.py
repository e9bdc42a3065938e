"""test_think_constraint.py — a constraint is enforced with thinking on (the default) when the
model does not open its reply with <think> (docs/structured-output.md, "Thinking"): the reply's
language is (<think> free text </think>)? then the grammar, decided at the first token, and the
reasoning of a constrained reply is bounded (max_reasoning_tokens, by default half of
max_tokens) so that the grammar always gets its turn.

The models are random-weight Qwen3s: models/random/qwen3-tiny-bf16.gguf and, for the property
test, GGUFs of other shapes and seeds that tools/make_random_model.py writes into a temporary
directory. None of them opens with <think> on its own, so before the fix every constrained
reply with thinking on was free text (the grammar waited for a </think> that never came).
Biases (logit_bias on <think>) make a model think where a test needs reasoning.

Every finished reply (stop, tool_calls) must validate against its schema; a reply cut by
max_tokens must still be a prefix the grammar allowed (it starts the JSON), never free text."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from conftest import ROOT, TIMEOUT_SCALE, Srv, start_server

RANDOM = str(ROOT / "models" / "random" / "qwen3-tiny-bf16.gguf")
USER = [{"role": "user", "content": "Answer in JSON."}]
THINK, THINK_END = 151667, 151668

# schemas a random model finishes within a few dozen tokens (bounded strings, enums, numbers)
SCHEMAS = {
    "object": {"type": "object", "properties": {
        "answer": {"enum": ["yes", "no"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["answer", "n"], "additionalProperties": False},
    "boolean": {"type": "boolean"},
    "array": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "string": {"type": "string", "maxLength": 6},
    "nested": {"type": "object", "properties": {
        "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "integer", "minimum": 0,
                                                                      "maximum": 99}, "maxItems": 2}},
        "required": ["ok", "tags"], "additionalProperties": False},
}
FIRST = {"object": "{", "boolean": "tf", "array": "[", "string": '"', "nested": "{"}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}
MAX_TOKENS = 64


def fmt(schema):
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def check_reply(choice, schema, first):
    """A finished reply validates; one cut by length is the start of the JSON, not free text."""
    fin, msg = choice["finish_reason"], choice["message"]
    content = msg["content"] or ""
    assert fin in ("stop", "length"), choice
    if fin == "stop":
        jsonschema.validate(json.loads(content), schema)
    else:
        assert content and content.lstrip(" \t\n")[0] in first, f"free text under a constraint: {choice}"
    return fin


def check_calls(choice):
    msg = choice["message"]
    if choice["finish_reason"] == "length":  # cut inside a call: what came is the call's start
        assert "<tool_call>".startswith((msg["content"] or "")[:11]), f"free text under tool_choice: {choice}"
        return "length"
    assert choice["finish_reason"] == "tool_calls", choice
    assert msg["tool_calls"] and not msg["content"], msg
    for call in msg["tool_calls"]:
        assert call["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), TOOL["function"]["parameters"])
    return "tool_calls"


def tokens(r):
    return [t["token"] for t in r["choices"][0]["logprobs"]["content"]]


@pytest.fixture(scope="module")
def rnd() -> Srv:
    return Srv(start_server("think-random", "--model-name", "rnd", model=RANDOM), model_name="rnd")


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_applies_from_the_first_token(rnd, name):
    """Thinking on (the default), the model does not open with <think>: the grammar holds from
    the first token, greedy and sampled; every reply finishes and validates."""
    schema = SCHEMAS[name]
    for seed in (None, 1, 2):
        kw = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
        r = rnd.chat(USER, max_tokens=MAX_TOKENS, response_format=fmt(schema), logprobs=True, **kw)
        assert tokens(r)[0] != "<think>", r
        assert check_reply(r["choices"][0], schema, FIRST[name]) == "stop", r
        assert not r["choices"][0]["message"].get("reasoning_content"), r


def test_json_object_and_stream(rnd):
    r = rnd.chat(USER, max_tokens=MAX_TOKENS, temperature=0, response_format={"type": "json_object"})
    c = r["choices"][0]
    if c["finish_reason"] == "stop":
        assert isinstance(json.loads(c["message"]["content"]), dict), c
    else:
        assert c["message"]["content"].startswith("{"), c
    body = {"model": rnd.model, "messages": USER, "max_tokens": MAX_TOKENS, "temperature": 0,
            "stream": True, "response_format": fmt(SCHEMAS["object"])}
    res = rnd.stream("/v1/chat/completions", body)
    text, fin = "", None
    for ch in res.chunks:
        if ch.get("choices"):
            text += ch["choices"][0]["delta"].get("content") or ""
            fin = ch["choices"][0].get("finish_reason") or fin
    assert fin == "stop", res.body
    jsonschema.validate(json.loads(text), SCHEMAS["object"])


def test_tool_choice_required_with_thinking(rnd):
    """Thinking on, the model not opening <think>: the reply is tool calls from the first
    token. A random model may go on to a second call under "required" and be cut by
    max_tokens (which kernels' last bits decide: AMX's sampled path did, avx512vnni's not):
    then the complete calls before it still come back, each valid."""
    for seed in (None, 1):
        kw = {"temperature": 0} if seed is None else {"temperature": 1.0, "seed": seed}
        for tc in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            r = rnd.chat([{"role": "user", "content": "Weather in Paris?"}], tools=[TOOL], tool_choice=tc,
                         max_tokens=96, **kw)
            ch = r["choices"][0]
            if check_calls(ch) == "length":
                calls = ch["message"].get("tool_calls") or []
                assert calls and not ch["message"]["content"], f"cut before any whole call: {ch}"
                for call in calls:
                    assert call["function"]["name"] == "get_weather"
                    jsonschema.validate(json.loads(call["function"]["arguments"]), TOOL["function"]["parameters"])


def test_reasoning_is_bounded(rnd):
    """A reply biased to open <think> and to repeat it reasons for exactly max_reasoning_tokens
    tokens, then </think> is forced and the grammar writes the content."""
    for bound in (1, 5):
        r = rnd.chat(USER, max_tokens=40, temperature=0, logprobs=True, logit_bias={str(THINK): 100},
                     max_reasoning_tokens=bound, response_format=fmt(SCHEMAS["boolean"]))
        toks = tokens(r)
        assert toks[0] == "<think>" and toks[bound + 1] == "</think>", toks
        assert "</think>" not in toks[:bound + 1]
        msg = r["choices"][0]["message"]
        assert msg["reasoning_content"] == "<think>" * bound, msg
        assert check_reply(r["choices"][0], SCHEMAS["boolean"], "tf") == "stop"
    # the default bound of a constrained request: half of max_tokens
    r = rnd.chat(USER, max_tokens=40, temperature=0, logprobs=True, logit_bias={str(THINK): 100},
                 response_format=fmt(SCHEMAS["boolean"]))
    toks = tokens(r)
    assert toks.index("</think>") == 21, toks
    assert check_reply(r["choices"][0], SCHEMAS["boolean"], "tf") == "stop"


def test_no_reasoning_with_bound_zero(rnd):
    # max_reasoning_tokens 0: <think> is not allowed to open, whatever its bias
    r = rnd.chat(USER, max_tokens=40, temperature=0, logprobs=True, logit_bias={str(THINK): 100},
                 max_reasoning_tokens=0, response_format=fmt(SCHEMAS["boolean"]))
    assert "<think>" not in tokens(r), tokens(r)
    assert check_reply(r["choices"][0], SCHEMAS["boolean"], "tf") == "stop"
    assert not r["choices"][0]["message"].get("reasoning_content")


def test_reasoning_cannot_end_the_reply(rnd):
    """Under a constraint, the end of generation is banned inside the reasoning (it would end
    the reply with no content): biased towards <|im_end|> right after <think>, the reply still
    closes the reasoning and writes valid content."""
    r = rnd.chat(USER, max_tokens=40, temperature=0, logprobs=True, max_reasoning_tokens=3,
                 logit_bias={str(THINK): 100, "151645": 90, "151643": 90},
                 response_format=fmt(SCHEMAS["boolean"]))
    toks = tokens(r)
    assert toks[0] == "<think>" and toks[4] == "</think>", toks
    assert check_reply(r["choices"][0], SCHEMAS["boolean"], "tf") == "stop"


def test_bound_without_a_grammar(rnd):
    """max_reasoning_tokens also bounds an unconstrained reply's reasoning."""
    r = rnd.chat(USER, max_tokens=12, temperature=0, logprobs=True, logit_bias={str(THINK): 100},
                 max_reasoning_tokens=2)
    toks = tokens(r)
    assert toks[:4] == ["<think>", "<think>", "<think>", "</think>"], toks


def test_length_cut_is_not_free_text(rnd):
    """max_tokens ends the reply before the JSON does: finish_reason "length", and what came is
    the grammar's (the start of the document), not free text."""
    for mt in (1, 3, 6):
        r = rnd.chat(USER, max_tokens=mt, temperature=0, response_format=fmt(SCHEMAS["nested"]))
        assert check_reply(r["choices"][0], SCHEMAS["nested"], "{") == "length", r


@pytest.fixture(scope="module")
def thinking_2507(tmp_path_factory) -> Srv:
    from test_chat_2507 import TEMPLATES, swap_template
    out = str(tmp_path_factory.mktemp("think2507") / "tiny-thinking-2507.gguf")
    swap_template(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf", out,
                  (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8"))
    return Srv(start_server("think-2507", "--model-name", "t", model=out), model_name="t")


def test_thinking_2507_reasoning_is_closed_for_the_grammar(thinking_2507):
    """Thinking-2507's prompt ends inside <think>: the reply starts in the reasoning. The
    random model never writes </think> itself; the bound closes it (half of max_tokens by
    default, or max_reasoning_tokens; 0 closes it at once) and the grammar answers."""
    for extra, n_reason in (({}, 10), ({"max_reasoning_tokens": 3}, 3), ({"max_reasoning_tokens": 0}, 0)):
        r = thinking_2507.chat(USER, max_tokens=20, temperature=0, logprobs=True,
                               response_format=fmt(SCHEMAS["boolean"]), **extra)
        toks = tokens(r)
        assert toks.index("</think>") == n_reason, toks
        assert check_reply(r["choices"][0], SCHEMAS["boolean"], "tf") == "stop", r


@pytest.mark.parametrize("value,words", [(-1, "must be in [0,"), ("5", "must be an integer"),
                                         (1.5, "must be an integer")])
def test_bad_max_reasoning_tokens(rnd, value, words):
    body = {"model": rnd.model, "messages": USER, "max_reasoning_tokens": value}
    st, _, js = rnd.post("/v1/chat/completions", body)
    assert st == 400 and js["error"]["param"] == "max_reasoning_tokens", js
    assert words in js["error"]["message"], js


# ---- the property test: random-weight models of several shapes and seeds ------------------

# (make_random_model shape, layers, seed): hidden 256 / 96, 1-3 layers, tied and untied
FAST_MODELS = [("tiny", 1, 11), ("tiny-untied", 3, 12), ("tiny-untied", 1, 13)]
FULL_MODELS = [("tiny", 4, 21), ("tiny", 8, 22), ("tiny-untied", 2, 23), ("tiny-untied", 3, 24),
               ("tiny", 3, 25), ("tiny-untied", 1, 26)]


def make_model(d, shape, layers, seed):
    out = d / f"{shape}-l{layers}-s{seed}.gguf"
    subprocess.run([sys.executable, "-m", "tools.make_random_model", "--shape", shape, "--layers",
                    str(layers), "--seed", str(seed), "--output", str(out), "--no-progress",
                    "--threads", "2"], cwd=ROOT, check=True, capture_output=True,
                   timeout=300 * TIMEOUT_SCALE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return str(out)


def run_matrix(tmp_path_factory, models, seeds, max_tokens):
    d = tmp_path_factory.mktemp("think-models")
    stats = {"stop": 0, "length": 0, "tool_calls": 0}
    for shape, layers, mseed in models:
        path = make_model(d, shape, layers, mseed)
        srv = Srv(start_server(f"think-{shape}-{layers}-{mseed}", "--model-name", "m", model=path),
                  model_name="m")
        try:
            jobs = [(name, s) for name in sorted(SCHEMAS) for s in seeds]

            def one(job):
                name, s = job
                return name, srv.chat(USER, max_tokens=max_tokens, temperature=1.0, seed=s,
                                      response_format=fmt(SCHEMAS[name]))

            with ThreadPoolExecutor(4) as ex:
                for name, r in ex.map(one, jobs):
                    stats[check_reply(r["choices"][0], SCHEMAS[name], FIRST[name])] += 1
                for r in ex.map(lambda s: srv.chat([{"role": "user", "content": "Weather?"}], tools=[TOOL],
                                                   tool_choice="required", parallel_tool_calls=False,
                                                   max_tokens=2 * max_tokens, temperature=1.0,
                                                   seed=s), seeds):
                    stats[check_calls(r["choices"][0])] += 1
        finally:
            srv.proc.stop()
            os.unlink(path)
    # the schemas are small: nearly every reply must finish (and so have been validated)
    done = stats["stop"] + stats["tool_calls"]
    assert done >= 0.8 * sum(stats.values()), stats


def test_every_finished_constrained_reply_validates(tmp_path_factory):
    run_matrix(tmp_path_factory, FAST_MODELS, seeds=(1, 2), max_tokens=40)


@pytest.mark.full
def test_every_finished_constrained_reply_validates_full(tmp_path_factory):
    run_matrix(tmp_path_factory, FULL_MODELS, seeds=range(1, 7), max_tokens=MAX_TOKENS)
