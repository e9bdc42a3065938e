"""test_ollama.py — Ollama's native API (docs/server.md, "Ollama API") with the official `ollama`
Python client, httpx where the client has no call (a Kipp extension, /api/version) and curl
where the bytes matter (Ollama's `curl -d` with no Content-Type, NDJSON framing):

- /api/chat and /api/generate streamed and not: the same text, counts and durations; the text
  equals what /v1/chat/completions (/v1/completions for a raw generate) gives for the same
  greedy request, so the request mapping (messages, system, options, think) is checked against
  the OpenAI path; format "json" and a schema parse; a forced tool call comes back with its
  arguments as an object, and a tool round trip renders like OpenAI's; Thinking-2507's
  reasoning comes back as `thinking`.
- options: num_predict (done_reason "length", eval_count), seed reproducibility, hardware
  options accepted, unimplemented sampling options and a num_ctx over the context a 400 naming
  them; fields Ollama defines that Kipp refuses (images, suffix, template, context, logprobs).
- load calls, "name" and "name:latest", list / show / ps / version, embed and embeddings on a
  tiny-embed server, the model-management routes' 501s, and every example in the doc section.
"""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import ollama
import pytest

from conftest import CTX, MODEL_NAME, ROOT, VARIED, Srv, start_server
from test_chat_2507 import TEMPLATES, swap_template

GREEDY = {"temperature": 0, "repeat_penalty": VARIED["repetition_penalty"]}
USER = [{"role": "user", "content": "Why is the sky blue?"}]
# (the ollama client's Tool type keeps only type, items, description and enum of a property)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "a city"}},
                   "required": ["city"]}}}
SHORT_CITY = {"type": "function", "function": {**WEATHER["function"], "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}}
EMBED_MODEL = str(ROOT / "models" / "tiny-embed" / "kipp-tiny-embed-bf16.gguf")
EMBED_NAME = "kipp-tiny-embed-bf16"


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url, timeout=120)


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory) -> Srv:
    """The tiny checkpoint with Qwen3's Thinking-2507 template: every reply starts as reasoning."""
    path = str(tmp_path_factory.mktemp("ollama") / "kipp-tiny-thinking.gguf")
    src = ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf"
    swap_template(src, path, (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8"))
    return Srv(start_server("ollama-thinking", "--model-alias", "qwen3:4b", model=path, threads="1"),
               model_name="kipp-tiny-thinking")


@pytest.fixture(scope="module")
def embed_server() -> Srv:
    return Srv(start_server("ollama-embed", model=EMBED_MODEL, threads="1"), model_name=EMBED_NAME)


def openai_chat(server: Srv, messages, n: int, **fields) -> dict:
    return server.chat(messages, temperature=0, repetition_penalty=GREEDY["repeat_penalty"], max_tokens=n, **fields)


def status_of(call) -> ollama.ResponseError:
    with pytest.raises(ollama.ResponseError) as e:
        call()
    return e.value


# ---- /api/chat -------------------------------------------------------------------------------------

def test_chat_equals_openai_chat(server, oc):
    r = oc.chat(model=MODEL_NAME, messages=USER, options={**GREEDY, "num_predict": 12})
    want = openai_chat(server, USER, 12)
    assert r.done and r.done_reason == "length" and r.message.role == "assistant"
    assert (r.message.content, r.message.thinking) == (want["choices"][0]["message"]["content"] or "",
                                                       want["choices"][0]["message"]["reasoning_content"])
    assert (r.prompt_eval_count, r.eval_count) == (want["usage"]["prompt_tokens"], 12)
    assert r.model == MODEL_NAME and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", r.created_at)
    assert r.total_duration >= r.eval_duration > 0 and r.load_duration == 0 and r.prompt_eval_duration >= 0


def test_chat_stream_equals_not_streamed(oc):
    opts = {**GREEDY, "num_predict": 10}
    whole = oc.chat(model=MODEL_NAME, messages=USER, options=opts)
    parts = list(oc.chat(model=MODEL_NAME, messages=USER, options=opts, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "length"
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert "".join(p.message.thinking or "" for p in parts) == (whole.message.thinking or "")
    assert (parts[-1].eval_count, parts[-1].prompt_eval_count) == (10, whole.prompt_eval_count)


def test_stream_is_the_default_ndjson(server):
    """Without "stream", Ollama streams: NDJSON lines, application/x-ndjson."""
    body = {"model": MODEL_NAME, "messages": USER, "options": {"num_predict": 3}}
    with httpx.stream("POST", server.url + "/api/chat", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["message"] == {"role": "assistant", "content": ""} and lines[-1]["eval_count"] == 3


def test_think_switches_the_template(server, oc):
    """think false renders Qwen3's empty think block (as enable_thinking false does); true and
    the levels render the thinking prompt; other values are a 400."""
    n = {}
    for think in (True, False, "high"):
        r = oc.chat(model=MODEL_NAME, messages=USER, think=think, options={"num_predict": 1})
        n[str(think)] = r.prompt_eval_count
    want_off = openai_chat(server, USER, 1, chat_template_kwargs={"enable_thinking": False})
    assert n["False"] == want_off["usage"]["prompt_tokens"] != n["True"] == n["high"]
    e = status_of(lambda: oc.chat(model=MODEL_NAME, messages=USER, think="max"))
    assert e.status_code == 400 and "think" in e.error


def test_thinking_comes_back_as_thinking(thinking_server):
    """Thinking-2507 replies start inside <think>: the reasoning is `thinking`, streamed or not,
    as /v1/chat/completions's reasoning_content. The alias "qwen3:4b" names the model too."""
    oc = ollama.Client(host=thinking_server.url, timeout=120)
    r = oc.chat(model="qwen3:4b", messages=USER, options={**GREEDY, "num_predict": 8})
    want = openai_chat(thinking_server, USER, 8)["choices"][0]["message"]
    assert r.message.thinking and r.message.thinking == want["reasoning_content"]
    parts = list(oc.chat(model="qwen3:4b", messages=USER, options={**GREEDY, "num_predict": 8}, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    g = oc.generate(model="qwen3:4b", prompt=USER[0]["content"], options={**GREEDY, "num_predict": 8})
    assert g.thinking == r.message.thinking and g.response == (r.message.content or "")


def test_format_json_and_schema(oc):
    r = oc.chat(model=MODEL_NAME, messages=[{"role": "user", "content": "JSON please"}], format="json",
                think=False, options={"num_predict": 200, "seed": 3})
    assert r.done_reason == "stop" and isinstance(json.loads(r.message.content), dict)
    schema = {"type": "object", "properties": {"age": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["age", "ok"], "additionalProperties": False}
    g = oc.generate(model=MODEL_NAME, prompt="Age?", format=schema, think=False,
                    options={"num_predict": 200, "seed": 3})
    v = json.loads(g.response)
    assert g.done_reason == "stop" and set(v) == {"age", "ok"} and isinstance(v["age"], int)


def test_forced_tool_call_has_object_arguments(server):
    """tool_choice (Kipp's extension: Ollama has no way to force a call) makes the call by
    constrained decoding; its arguments come back as an object, streamed or not."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [SHORT_CITY], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "think": False, "options": {"num_predict": 120, "seed": 5}}
    r = httpx.post(server.url + "/api/chat", json={**body, "stream": False}, timeout=60)
    msg = ollama.ChatResponse(**r.json()).message
    assert r.status_code == 200 and len(msg.tool_calls) == 1
    call = msg.tool_calls[0].function
    assert call.name == "get_weather" and isinstance(call.arguments, dict) and isinstance(call.arguments["city"], str)
    with httpx.stream("POST", server.url + "/api/chat", json=body, timeout=60) as s:
        lines = [ollama.ChatResponse(**json.loads(x)) for x in s.iter_lines() if x]
    streamed = [c.function for x in lines for c in (x.message.tool_calls or [])]
    assert [(c.name, dict(c.arguments)) for c in streamed] == [(call.name, dict(call.arguments))]


def test_tool_round_trip_renders_like_openai(server, oc):
    """An assistant turn with tool_calls (arguments an object) and a tool turn with tool_name
    render as the same OpenAI conversation does (prompt_eval_count = prompt_tokens)."""
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "thinking": "I should call it.",
             "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "18 C, sunny", "tool_name": "get_weather"}]
    r = oc.chat(model=MODEL_NAME, messages=msgs, tools=[WEATHER], options={"num_predict": 1})
    oai = [msgs[0], {"role": "assistant", "content": "", "reasoning_content": "I should call it.",
                     "tool_calls": [{"id": "c1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
           {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"}]
    sent = ollama.Tool.model_validate(WEATHER).model_dump(exclude_none=True)  # as the client sends it
    want = server.chat(oai, tools=[sent], max_tokens=1)
    assert r.prompt_eval_count == want["usage"]["prompt_tokens"]


# ---- /api/generate ---------------------------------------------------------------------------------

def test_generate_templated_and_raw(server, oc):
    """A prompt (and system) is a one-turn chat; raw: true is the prompt as it is."""
    r = oc.generate(model=MODEL_NAME, prompt="Hello", system="Be brief.", options={**GREEDY, "num_predict": 8})
    want = openai_chat(server, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], 8)
    assert r.response == (want["choices"][0]["message"]["content"] or "") and r.done_reason == "length"
    assert r.prompt_eval_count == want["usage"]["prompt_tokens"] and r.eval_count == 8
    raw = oc.generate(model=MODEL_NAME, prompt="Once upon a time", raw=True, options={**GREEDY, "num_predict": 8})
    comp = server.complete("Once upon a time", temperature=0, repetition_penalty=2.0, max_tokens=8)
    assert raw.response == comp["choices"][0]["text"] and raw.thinking is None
    parts = list(oc.generate(model=MODEL_NAME, prompt="Once upon a time", raw=True, stream=True,
                             options={**GREEDY, "num_predict": 8}))
    assert "".join(p.response for p in parts) == raw.response and parts[-1].done_reason == "length"


@pytest.mark.parametrize("field,value", [("suffix", "return x"), ("template", "{{ .Prompt }}"),
                                         ("context", [1, 2, 3]), ("images", ["aGVsbG8="])])
def test_generate_refused_fields(oc, field, value):
    e = status_of(lambda: oc.generate(model=MODEL_NAME, prompt="Hi", **{field: value}))
    assert e.status_code == 400 and field in e.error


def test_generate_refusals_with_raw(oc):
    for kw in ({"system": "S"}, {"think": True}):
        e = status_of(lambda: oc.generate(model=MODEL_NAME, prompt="Hi", raw=True, **kw))
        assert e.status_code == 400 and next(iter(kw)) in e.error


def test_load_calls(oc):
    g = oc.generate(model=MODEL_NAME)
    assert (g.done, g.done_reason, g.response) == (True, "load", "")
    c = oc.chat(model=MODEL_NAME + ":latest", messages=[])
    assert (c.done, c.done_reason, c.message.content) == (True, "load", "")
    e = status_of(lambda: oc.generate(model="llama3.2"))
    assert e.status_code == 404 and "llama3.2" in e.error


# ---- options ----------------------------------------------------------------------------------------

def test_num_predict_and_seed(oc):
    r = oc.generate(model=MODEL_NAME, prompt="Count", options={"num_predict": 7, "temperature": 1, "seed": 42})
    again = oc.generate(model=MODEL_NAME, prompt="Count", options={"num_predict": 7, "temperature": 1, "seed": 42})
    assert (r.done_reason, r.eval_count) == ("length", 7) and r.response == again.response
    hw = {"num_gpu": 1, "num_thread": 8, "use_mmap": True, "numa": False, "num_batch": 64, "num_keep": 4,
          "main_gpu": 0, "low_vram": False, "num_ctx": CTX, "typical_p": 1.0, "mirostat": 0, "tfs_z": 1,
          "repeat_last_n": -1, "penalize_newline": True, "stop": ["\n\n"]}
    assert oc.generate(model=MODEL_NAME, prompt="Count", options={**hw, "num_predict": 2}).done


@pytest.mark.parametrize("option,value", [("typical_p", 0.7), ("mirostat", 1), ("tfs_z", 0.5),
                                          ("repeat_last_n", 64), ("penalize_newline", False),
                                          ("num_ctx", CTX * 4), ("num_predict", -3)])
def test_unimplemented_options_are_400(oc, option, value):
    e = status_of(lambda: oc.chat(model=MODEL_NAME, messages=USER, options={option: value}))
    assert e.status_code == 400 and f"options.{option}" in e.error


def test_refused_fields(oc, server):
    e = status_of(lambda: oc.chat(model=MODEL_NAME, messages=[{**USER[0], "images": ["aGVsbG8="]}]))
    assert e.status_code == 400 and "images" in e.error
    e = status_of(lambda: oc.chat(model=MODEL_NAME, messages=USER, logprobs=True))
    assert e.status_code == 400 and "logprobs" in e.error
    e = status_of(lambda: oc.chat(model=MODEL_NAME, messages=[{"role": "robot", "content": "x"}]))
    assert e.status_code == 400 and "role" in e.error
    # a field outside Ollama's API is ignored (and logged once)
    r = httpx.post(server.url + "/api/chat", json={"model": MODEL_NAME, "messages": USER, "stream": False,
                                                  "mystery_field": 1, "options": {"num_predict": 1}}, timeout=60)
    assert r.status_code == 200 and "mystery_field" in server.proc.stderr_tail()


# ---- list, show, ps, version, management -------------------------------------------------------

def test_list_show_ps_version(server, oc):
    (m,) = oc.list().models
    assert m.model == MODEL_NAME + ":latest" and m.size > 0 and m.digest and m.modified_at
    assert (m.details.format, m.details.family, m.details.quantization_level) == ("gguf", "qwen3", "BF16")
    assert m.details.parameter_size.endswith("M")
    s = oc.show(MODEL_NAME)
    assert s.modelinfo["general.architecture"] == "qwen3" and s.modelinfo["qwen3.context_length"] == CTX
    assert s.modelinfo["general.parameter_count"] > 0 and "<|im_start|>" in s.template
    assert set(s.capabilities) == {"completion", "tools", "thinking"} and s.details.family == "qwen3"
    (p,) = oc.ps().models
    assert (p.model, p.size_vram, p.context_length, p.digest) == (m.model, 0, CTX, m.digest)
    assert httpx.get(server.url + "/api/version").json() == {"version": "0.12.0"}
    e = status_of(lambda: oc.show("llama3.2"))
    assert e.status_code == 404 and "llama3.2" in e.error


@pytest.mark.parametrize("call,says", [
    (lambda c: c.pull("qwen3"), "--model"), (lambda c: c.push("qwen3"), "--model"),
    (lambda c: c.create("qwen3", from_="qwen3"), "convert_to_gguf.py"),
    (lambda c: c.copy(MODEL_NAME, "other"), "--model-alias"), (lambda c: c.delete(MODEL_NAME), "--model")])
def test_management_routes_say_what_to_do(oc, call, says):
    e = status_of(lambda: call(oc))
    assert e.status_code == 501 and says in e.error


# ---- embeddings -------------------------------------------------------------------------------------

def test_embed(embed_server):
    oc = ollama.Client(host=embed_server.url, timeout=120)
    texts = ["hello world", "the sky is blue"]
    r = oc.embed(model=EMBED_NAME, input=texts)
    want = embed_server.client().embeddings.create(model=EMBED_NAME, input=texts)
    assert r.model == EMBED_NAME and r.prompt_eval_count == want.usage.prompt_tokens
    for got, w in zip(r.embeddings, want.data):
        assert max(abs(a - b) for a, b in zip(got, w.embedding)) < 1e-6
    assert len(oc.embed(model=EMBED_NAME + ":latest", input="hi", dimensions=8).embeddings[0]) == 8
    old = oc.embeddings(model=EMBED_NAME, prompt=texts[0])
    assert max(abs(a - b) for a, b in zip(old.embedding, r.embeddings[0])) < 1e-6
    assert oc.embed(model=EMBED_NAME, input=[]).embeddings == []
    long = "word " * (CTX * 2)
    assert len(oc.embed(model=EMBED_NAME, input=long).embeddings) == 1  # truncated (the default)
    e = status_of(lambda: oc.embed(model=EMBED_NAME, input=long, truncate=False))
    assert e.status_code == 400 and "tokens" in e.error
    e = status_of(lambda: oc.chat(model=EMBED_NAME, messages=USER))
    assert e.status_code == 400 and "embedding model" in e.error
    assert oc.show(EMBED_NAME).capabilities == ["embedding"]


def test_embed_on_a_generative_model(oc):
    e = status_of(lambda: oc.embed(model=MODEL_NAME, input="hi"))
    assert e.status_code == 400 and "generative model" in e.error


# ---- curl, as Ollama's docs send it ---------------------------------------------------------------

def curl_d(url: str, body: str) -> subprocess.CompletedProcess:
    """curl URL -d BODY: curl labels the body application/x-www-form-urlencoded."""
    return subprocess.run(["curl", "-sS", "-i", url, "-d", body], capture_output=True, timeout=60)


def test_curl_d_without_content_type(server):
    p = curl_d(server.url + "/api/generate",
               json.dumps({"model": MODEL_NAME, "prompt": "Hi", "options": {"num_predict": 4}}))
    head, _, body = p.stdout.decode().partition("\r\n\r\n")
    assert p.returncode == 0 and " 200 " in head.split("\r\n")[0], p.stdout
    assert "content-type: application/x-ndjson" in head.lower()
    lines = [json.loads(x) for x in body.splitlines() if x]
    assert lines[-1]["done"] and lines[-1]["eval_count"] == 4 and all("response" in x for x in lines)


def doc_examples() -> list[str]:
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    section = text[text.index("## Ollama API"):]
    section = section[:section.index("\n## ", 5)]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def test_doc_examples_run(server):
    examples = doc_examples()
    assert len(examples) >= 3
    for ex in examples:
        cmd = ex.replace("http://127.0.0.1:8080", server.url).replace("qwen3-0.6b", MODEL_NAME)
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout, (ex, p.stderr)
        out, dec = p.stdout.strip(), json.JSONDecoder()
        while out:  # NDJSON lines, or one object per curl
            obj, end = dec.raw_decode(out)
            assert "error" not in obj, (ex, obj)
            out = out[end:].lstrip()
