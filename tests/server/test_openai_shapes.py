"""OpenAI chat requests in every shape the official `openai` client's typed request models can
produce (openai 1.109.1: completion_create_params.py and the chat_completion_*_param.py
message, part and tool types), and as agent clients send them: each one works (200) or is a
400 whose `param` names the field or part. Contract: docs/server.md, "Request fields" and
"Message shapes". What a shape renders to is checked through /apply-template, which uses the
chat endpoint's own parser (test_util.py checks that the two agree token for token).
"""

from __future__ import annotations

import json
import re
import subprocess

import openai
import pytest

from conftest import MODEL_NAME, ROOT, VARIED, Srv, curl, parse_sse, start_server

T = lambda text: {"type": "text", "text": text}  # noqa: E731
USER = {"role": "user", "content": "Hello"}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"], "additionalProperties": False}}},
]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def render(server, body: dict) -> str:
    st, _, js = server.post("/apply-template", body)
    assert st == 200, js
    return js["prompt"]


def prompt_tokens(client, messages, **kw) -> int:
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1, **kw)
    return r.usage.prompt_tokens


# ---- every shape the client's types can produce: works ------------------------------------------

OK = [
    ("system string", [{"role": "system", "content": "Be brief."}, USER], {}),
    ("system text parts", [{"role": "system", "content": [T("Be brief."), T("Be kind.")]}, USER], {}),
    ("system name", [{"role": "system", "content": "s", "name": "ops"}, USER], {}),
    ("developer string", [{"role": "developer", "content": "Be brief."}, USER], {}),
    ("developer text parts", [{"role": "developer", "content": [T("Be brief.")], "name": "dev"}, USER], {}),
    ("user text parts", [{"role": "user", "content": [T("Hello"), T("there")], "name": "alice"}], {}),
    ("user empty parts", [{"role": "user", "content": []}], {}),
    ("assistant string", [USER, {"role": "assistant", "content": "Hi", "name": "bot"}, USER], {}),
    ("assistant text and refusal parts", [USER, {"role": "assistant", "content": [T("Hi"), {"type": "refusal",
                                                                                           "refusal": "No."}]}, USER], {}),
    ("assistant refusal field", [USER, {"role": "assistant", "content": None, "refusal": "I can't."}, USER], {}),
    ("assistant nulls", [USER, {"role": "assistant", "content": "Hi", "refusal": None, "audio": None,
                                "function_call": None}, USER], {}),
    ("assistant tool_calls + tool string", [USER, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                                            {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
     {"tools": TOOLS}),
    ("tool text parts", [USER, {"role": "assistant", "tool_calls": [CALL]},
                         {"role": "tool", "tool_call_id": "call_1", "content": [T("18C"), T("sunny")]}],
     {"tools": TOOLS}),
    *[(f"reasoning_effort {v}", [USER], {"reasoning_effort": v}) for v in ("minimal", "low", "medium", "high")],
    ("reasoning_effort none", [USER], {"extra_body": {"reasoning_effort": "none"}}),
    ("reasoning_effort agrees with enable_thinking", [USER],
     {"reasoning_effort": "high", "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}),
    ("tool_choice allowed_tools required", [USER],
     {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
         "mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}}),
    ("tool_choice allowed_tools auto", [USER],
     {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
         "mode": "auto", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}}),
    ("tool_choice auto", [USER], {"tools": TOOLS, "tool_choice": "auto"}),
    ("tool_choice none", [USER], {"tools": TOOLS, "tool_choice": "none"}),
    ("tool_choice named", [USER], {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
    ("strict tool", [USER], {"tools": [dict(TOOLS[1], function=dict(TOOLS[1]["function"], strict=True))]}),
    ("assistant text parts beside tool_calls", [USER, {"role": "assistant", "content": [T("Let me look.")],
                                                       "tool_calls": [CALL]},
                                                {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
     {"tools": TOOLS}),
    ("tool message without tool_call_id", [USER, {"role": "assistant", "tool_calls": [CALL]},
                                           {"role": "tool", "content": "18C"}], {"tools": TOOLS}),
    ("response_format json_object", [USER], {"response_format": {"type": "json_object"}}),
    ("stop string", [USER], {"stop": "\n", "n": None, "logprobs": False, "parallel_tool_calls": True}),
    ("service_tier default", [USER], {"service_tier": "default", "stream_options": None}),
    ("parallel_tool_calls false + required", [USER],
     {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}),
    ("bookkeeping", [USER], {"user": "u-1", "metadata": {"k": "v"}, "prompt_cache_key": "pk",
                             "safety_identifier": "sid", "store": False, "service_tier": "auto",
                             "seed": 7, "modalities": ["text"]}),
    ("sampling", [USER], {"temperature": 0.5, "top_p": 0.9, "presence_penalty": 0.5, "frequency_penalty": 0.5,
                          "logit_bias": {"9707": 2}, "logprobs": True, "top_logprobs": 2, "n": 2, "stop": ["\n\n"],
                          "max_completion_tokens": 1}),
    ("stream_options include_obfuscation false", [USER],
     {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}}),
    ("response_format text", [USER], {"response_format": {"type": "text"}}),
    ("response_format json_schema", [USER], {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}, "strict": True}}}),
]


@pytest.mark.parametrize("messages,kw", [(m, k) for _, m, k in OK], ids=[i for i, _, _ in OK])
def test_shape_works(client, messages, kw):
    kw = dict(kw)
    if "max_completion_tokens" not in kw:
        kw.setdefault("max_tokens", 1)
    if kw.get("response_format", {}).get("type") == "json_schema" or kw.get("tool_choice") not in (None, "auto"):
        kw["max_tokens"] = 24  # a constrained reply needs room to finish
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, **kw)
    if kw.get("stream"):
        chunks = list(r)
        assert chunks and chunks[-1].usage is not None
        assert not any(hasattr(c, "obfuscation") and c.obfuscation for c in chunks)
    else:
        assert r.choices and r.usage.prompt_tokens > 0


# ---- every other shape: a 400 whose param names it -----------------------------------------------

IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}}
BAD = [
    ("image_url part", [{"role": "user", "content": [T("What is this?"), IMG]}], {}, "messages[0].content[1].type"),
    ("input_audio part", [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
        "data": "UklGRg==", "format": "wav"}}]}], {}, "messages[0].content[0].type"),
    ("file part", [USER, {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}], {},
     "messages[1].content[0].type"),
    ("refusal part on a user message", [{"role": "user", "content": [{"type": "refusal", "refusal": "x"}]}], {},
     "messages[0].content[0].type"),
    ("text part without text", [{"role": "user", "content": [{"type": "text"}]}], {}, "messages[0].content[0].text"),
    ("user content null", [{"role": "user", "content": None}], {}, "messages[0].content"),
    ("tool content missing", [USER, {"role": "assistant", "tool_calls": [CALL]}, {"role": "tool", "tool_call_id": "c"}],
     {"tools": TOOLS}, "messages[2].content"),
    ("assistant with neither content nor calls", [USER, {"role": "assistant", "content": None}, USER], {},
     "messages[1].content"),
    ("content a number", [{"role": "user", "content": 5}], {}, "messages[0].content"),
    ("part not an object", [{"role": "user", "content": ["Hello"]}], {}, "messages[0].content[0]"),
    ("message not an object", ["Hello"], {}, "messages[0]"),
    ("unknown role", [{"role": "narrator", "content": "x"}], {}, "messages[0].role"),
    ("name not a string", [{"role": "user", "content": "x", "name": 5}], {}, "messages[0].name"),
    ("function_call none", [USER], {"function_call": "none"}, "function_call"),
    ("service_tier priority", [USER], {"service_tier": "priority"}, "service_tier"),
    ("web_search_options with location", [USER], {"web_search_options": {"user_location": {
        "type": "approximate", "approximate": {"city": "Paris"}}}}, "web_search_options"),
    ("prediction string", [USER], {"prediction": {"type": "content", "content": "x"}}, "prediction"),
    ("function role", [USER, {"role": "function", "name": "f", "content": "42"}], {}, "messages[1].role"),
    ("assistant audio", [USER, {"role": "assistant", "audio": {"id": "audio_1"}}, USER], {}, "messages[1].audio"),
    ("assistant function_call", [USER, {"role": "assistant", "content": None,
                                        "function_call": {"name": "f", "arguments": "{}"}}], {},
     "messages[1].function_call"),
    ("custom tool call", [USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "custom", "custom": {"name": "x", "input": "y"}}]}], {}, "messages[1].tool_calls[0].type"),
    ("reasoning_effort unknown", [USER], {"extra_body": {"reasoning_effort": "xhigh"}}, "reasoning_effort"),
    ("reasoning_effort disagrees with enable_thinking", [USER],
     {"reasoning_effort": "minimal", "extra_body": {"chat_template_kwargs": {"enable_thinking": True}}},
     "reasoning_effort"),
    ("reasoning_effort beside a non-boolean enable_thinking", [USER],
     {"reasoning_effort": "low", "extra_body": {"chat_template_kwargs": {"enable_thinking": "yes"}}},
     "chat_template_kwargs"),
    ("audio", [USER], {"audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"]}, "audio"),
    ("modalities audio", [USER], {"modalities": ["audio"]}, "modalities"),
    ("prediction", [USER], {"prediction": {"type": "content", "content": [T("x")]}}, "prediction"),
    ("functions", [USER], {"functions": [{"name": "f"}]}, "functions"),
    ("function_call", [USER], {"function_call": {"name": "f"}}, "function_call"),
    ("web_search_options", [USER], {"web_search_options": {"search_context_size": "low"}}, "web_search_options"),
    ("verbosity", [USER], {"verbosity": "low"}, "verbosity"),
    ("service_tier flex", [USER], {"service_tier": "flex"}, "service_tier"),
    ("store true", [USER], {"store": True}, "store"),
    ("stream_options include_obfuscation true", [USER],
     {"stream": True, "stream_options": {"include_obfuscation": True}}, "stream_options.include_obfuscation"),
    ("custom tool", [USER], {"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "text"}}}]},
     "tools[0].type"),
    ("tool_choice custom", [USER], {"tools": TOOLS, "tool_choice": {"type": "custom", "custom": {"name": "x"}}},
     "tool_choice"),
    ("allowed_tools naming an undeclared tool", [USER],
     {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
         "mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}}},
     "tool_choice.allowed_tools.tools[0]"),
    ("allowed_tools custom entry", [USER],
     {"tools": TOOLS, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
         "mode": "required", "tools": [{"type": "custom", "custom": {"name": "get_time"}}]}}},
     "tool_choice.allowed_tools.tools[0]"),
    ("parallel_tool_calls false + auto", [USER], {"tools": TOOLS, "parallel_tool_calls": False}, "parallel_tool_calls"),
]


@pytest.mark.parametrize("messages,kw,param", [(m, k, p) for _, m, k, p in BAD], ids=[i for i, *_ in BAD])
def test_shape_refused(client, messages, kw, param):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=1, **kw)
    assert ei.value.param == param, ei.value.body
    assert ei.value.type == "invalid_request_error"


def test_refusal_names_the_part_type(server):
    st, _, js = server.post("/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 1, "messages": [
        {"role": "user", "content": [T("look"), IMG]}]})
    assert st == 400 and "'image_url' part" in js["error"]["message"], js


# ---- what the shapes render to --------------------------------------------------------------------

def test_text_parts_join_with_newline(server, client):
    """Text parts are joined with "\\n" on every role (vLLM's and llama-server's rule): the
    request renders, and counts, exactly as its joined-string twin."""
    parts = [{"role": "system", "content": [T("Be brief."), T("Be kind.")]},
             {"role": "user", "content": [T("Hello"), T("there")]},
             {"role": "assistant", "content": [T("Hi"), {"type": "refusal", "refusal": "No."}]},
             {"role": "user", "content": [T("ok")]}]
    joined = [{"role": "system", "content": "Be brief.\nBe kind."}, {"role": "user", "content": "Hello\nthere"},
              {"role": "assistant", "content": "Hi\nNo."}, {"role": "user", "content": "ok"}]
    assert render(server, {"messages": parts}) == render(server, {"messages": joined})
    assert "<|im_start|>user\nHello\nthere<|im_end|>" in render(server, {"messages": parts})
    assert prompt_tokens(client, parts) == prompt_tokens(client, joined)


def test_assistant_refusal_field_is_its_text(server):
    p = render(server, {"messages": [USER, {"role": "assistant", "content": "Well.", "refusal": "I can't."}, USER]})
    assert "<|im_start|>assistant\nWell.\nI can't.<|im_end|>" in p, p
    p = render(server, {"messages": [USER, {"role": "assistant", "content": None, "refusal": "I can't."}, USER]})
    assert "<|im_start|>assistant\nI can't.<|im_end|>" in p, p


def test_developer_is_system(server, client):
    dev = [{"role": "developer", "content": "Be brief."}, USER]
    sys_ = [{"role": "system", "content": "Be brief."}, USER]
    assert render(server, {"messages": dev}) == render(server, {"messages": sys_})
    assert render(server, {"messages": dev}).startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    # with tools, a leading developer message is the system prompt the tools block extends
    assert render(server, {"messages": dev, "tools": TOOLS}) == render(server, {"messages": sys_, "tools": TOOLS})
    assert render(server, {"messages": dev, "tools": TOOLS}).startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert prompt_tokens(client, dev) == prompt_tokens(client, sys_)


def test_developer_in_the_middle_is_a_system_turn_in_place(server):
    """Only a first system message is Qwen3's system prompt; a later developer (or system)
    message stays where it was sent, as a system turn (the template's own rule for a later
    system message): never dropped, never moved ahead of the turns it followed."""
    msgs = [{"role": "system", "content": "First."}, USER, {"role": "assistant", "content": "Hi"},
            {"role": "developer", "content": "From now on, answer in French."}, {"role": "user", "content": "Bye"}]
    p = render(server, {"messages": msgs})
    assert p.startswith("<|im_start|>system\nFirst.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n")
    assert ("<|im_start|>assistant\nHi<|im_end|>\n<|im_start|>system\nFrom now on, answer in French.<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n") in p, p
    assert "developer" not in p


def test_reasoning_effort_maps_to_thinking(server, client):
    """none and minimal turn Qwen3's thinking off (the prompt ends in an empty think block,
    as enable_thinking false renders it); low, medium and high leave it on."""
    off = render(server, {"messages": [USER], "chat_template_kwargs": {"enable_thinking": False}})
    on = render(server, {"messages": [USER]})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and off != on
    for effort in ("none", "minimal"):
        assert render(server, {"messages": [USER], "reasoning_effort": effort}) == off
    for effort in ("low", "medium", "high"):
        assert render(server, {"messages": [USER], "reasoning_effort": effort}) == on
    # agreeing with chat_template_kwargs is fine; the chat endpoint renders the same prompt
    assert render(server, {"messages": [USER], "reasoning_effort": "none",
                           "chat_template_kwargs": {"enable_thinking": False}}) == off
    assert prompt_tokens(client, [USER], extra_body={"reasoning_effort": "none"}) == \
        prompt_tokens(client, [USER], extra_body={"chat_template_kwargs": {"enable_thinking": False}})


def test_allowed_tools_narrow_the_request(server, client):
    """tool_choice allowed_tools: the prompt lists only the allowed tools and "required"
    forces a call to one of them (grammar-enforced, like "required")."""
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_time"}}]}}
    p = render(server, {"messages": [USER], "tools": TOOLS, "tool_choice": choice})
    assert '"name": "get_time"' in p and "get_weather" not in p, p
    assert p == render(server, {"messages": [USER], "tools": TOOLS[1:]})
    r = client.chat.completions.create(model=MODEL_NAME, messages=[USER], tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, max_tokens=200, temperature=0,
                                       reasoning_effort="minimal")
    calls = r.choices[0].message.tool_calls
    assert calls and len(calls) == 1 and calls[0].function.name == "get_time", r
    assert r.choices[0].finish_reason == "tool_calls"


def test_unknown_fields_inside_messages_are_ignored_and_logged(server, thinking_2507):
    """A key outside the API inside a message or a part (cache_control, which Anthropic-style
    clients add) is ignored, and the server says so once on stderr."""
    msgs = [{"role": "system", "content": [dict(T("Be brief."), cache_control={"type": "ephemeral"})]},
            {"role": "user", "content": "Hello", "x_trace": 1}]
    plain = [{"role": "system", "content": "Be brief."}, USER]
    assert render(server, {"messages": msgs}) == render(server, {"messages": plain})
    # (on this module's own server: a server logs each name once, and only its first 32 names)
    thinking_2507.chat([{"role": "user", "content": [dict(T("Hello"), cache_control={"type": "ephemeral"})]}],
                       max_tokens=1)
    assert "ignoring the request field 'messages[].content[].cache_control'" in thinking_2507.proc.stderr_tail(10 ** 9)


# ---- agent clients' bodies, replayed with curl --------------------------------------------------
# Shaped after what these clients send to an OpenAI-compatible provider (reconstructed from their
# request builders, not captured traffic): content as text parts on every message, developer
# messages, reasoning_effort, stream_options.include_usage.

AGENT_BODIES = {
    "vercel-ai-sdk": {
        "messages": [{"role": "developer", "content": "You are a helpful assistant."},
                     {"role": "user", "content": [T("What is the weather in Paris?")]},
                     {"role": "assistant", "content": "", "tool_calls": [CALL]},
                     {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 18}'},
                     {"role": "user", "content": [T("And tomorrow?")]}],
        "tools": [dict(t, function=dict(t["function"], strict=False)) for t in TOOLS], "tool_choice": "auto",
        "reasoning_effort": "low", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
    "opencode": {
        "messages": [{"role": "system", "content": "You are opencode, an interactive CLI tool."},
                     {"role": "system", "content": "<env>\n  Working directory: /src\n</env>"},
                     {"role": "user", "content": [T("list the files"), T("<system-reminder>plan mode</system-reminder>")]}],
        "tools": TOOLS, "tool_choice": "auto", "temperature": 0, "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True}},
    "roo-code": {
        "messages": [{"role": "system", "content": "You are Roo, a highly skilled software engineer."},
                     {"role": "user", "content": [T("<task>\nfix the bug\n</task>"),
                                                  dict(T("<environment_details>\n# Current Time\n</environment_details>"),
                                                       cache_control={"type": "ephemeral"})]}],
        "temperature": 0, "max_completion_tokens": 4, "reasoning_effort": "medium", "stream": True,
        "stream_options": {"include_usage": True}},
}


@pytest.mark.parametrize("name", sorted(AGENT_BODIES))
def test_agent_client_body_with_curl(server, name):
    body = dict(AGENT_BODIES[name], model=MODEL_NAME)
    r = curl(server.url + "/v1/chat/completions", "POST", json.dumps(body), stream=True)
    assert r.status == 200, r
    events = parse_sse(r.body)
    assert events[-1] == "[DONE]" and events[-2]["usage"]["prompt_tokens"] > 0, events[-3:]


def test_paths_without_v1(server):
    """/chat/completions (and /completions, /models, /embeddings) route like their /v1
    twins: clients configured with the server's root as their base URL."""
    c = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    r = c.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": [T("Hello")]}],
                                  max_tokens=1)
    assert r.usage.prompt_tokens > 0
    assert c.models.list().data[0].id == MODEL_NAME
    r = curl(server.url + "/completions", "POST", json.dumps({"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1}))
    assert r.status == 200 and r.json()["usage"]["completion_tokens"] == 1, r


def test_doc_example_runs(server):
    """The curl example of docs/server.md's "Message shapes", as written (only the address
    changed): text parts on every message, a developer message, reasoning_effort."""
    text = (ROOT / "docs" / "server.md").read_text()
    part = text.split("\n#### Message shapes\n", 1)[1].split("\n#", 1)[0]
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", part, re.S) if "curl" in b]
    assert blocks
    for b in blocks:
        cmd = b.replace("http://127.0.0.1:8080", server.url).replace("curl ", "curl -sS -f ", 1)
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (b, p.stderr)
        assert json.loads(p.stdout)["usage"]["prompt_tokens"] > 0


@pytest.fixture(scope="module")
def thinking_2507(tmp_path_factory) -> Srv:
    """The tiny checkpoint with the Thinking-2507 template, which always thinks."""
    from test_chat_2507 import TEMPLATES, swap_template
    path = str(tmp_path_factory.mktemp("shapes") / "kipp-tiny-thinking-2507.gguf")
    swap_template(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf", path,
                  (TEMPLATES / "qwen3-thinking-2507.jinja").read_text(encoding="utf-8"))
    return Srv(start_server("shapes-thinking-2507", model=path), model_name="kipp-tiny-thinking-2507")


def test_reasoning_effort_none_on_a_template_that_always_thinks(thinking_2507):
    """Thinking-2507 has no switch (enable_thinking changes nothing): "none" and "minimal"
    bound its reasoning to 0 tokens, so the reply closes the <think> its prompt opened at
    once and is all content; "low" lets it reason. A max_reasoning_tokens that disagrees
    is a 400."""
    c = thinking_2507.client()
    kw = dict(model=thinking_2507.model, messages=[USER], max_tokens=6, temperature=0, extra_body=VARIED)
    thinks = c.chat.completions.create(reasoning_effort="low", **kw).choices[0].message
    assert thinks.reasoning_content and not thinks.content, thinks
    for effort in ("none", "minimal"):
        r = c.chat.completions.create(extra_body=dict(VARIED, reasoning_effort=effort),
                                      **{k: v for k, v in kw.items() if k != "extra_body"})
        msg = r.choices[0].message
        assert not msg.reasoning_content and msg.content, msg
    with pytest.raises(openai.BadRequestError) as ei:
        c.chat.completions.create(reasoning_effort="minimal", **dict(kw, extra_body={"max_reasoning_tokens": 4}))
    assert ei.value.param == "reasoning_effort"
