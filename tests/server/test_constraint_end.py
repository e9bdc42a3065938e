"""Where a constrained reply ends (issue 30: "a constraint is enforced or the request fails
visibly"): ignore_eos does not run past a whole sentence (the end tokens would repeat into the
text), and a stop string cannot cut a reply that claims to be JSON or calls."""

from __future__ import annotations

import json

from conftest import MODEL_NAME

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["a"], "additionalProperties": False}
RF = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["x"], "additionalProperties": False}}}]


def post(server, path, body):
    return server.request("POST", path, json.dumps(body).encode())


def test_ignore_eos_stops_at_the_end_of_the_sentence(server):
    for seed in range(3):
        st, _, raw = post(server, "/v1/completions", {
            "model": MODEL_NAME, "prompt": "x", "max_tokens": 48, "ignore_eos": True, "seed": seed,
            "temperature": 1.0, "response_format": RF})
        assert st == 200, raw
        ch = json.loads(raw)["choices"][0]
        # the sentence is short; without the rule the end token repeats to max_tokens
        assert ch["finish_reason"] == "stop", ch
        assert json.loads(ch["text"])["a"] in range(10), ch


def test_ignore_eos_still_runs_through_end_tokens_unconstrained(server):
    st, _, raw = post(server, "/v1/completions", {
        "model": MODEL_NAME, "prompt": "x", "max_tokens": 12, "ignore_eos": True,
        "logit_bias": {"151645": 100}})
    assert st == 200, raw
    body = json.loads(raw)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 12


def test_stop_with_a_json_response_format_is_a_400(server):
    for path, extra in (("/v1/completions", {"prompt": "x"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        st, _, raw = post(server, path, {"model": MODEL_NAME, "max_tokens": 8, "stop": ["}"],
                                         "response_format": RF, **extra})
        assert st == 400, raw
        err = json.loads(raw)["error"]
        assert err["param"] == "stop" and "response_format" in err["message"], err
        st, _, raw = post(server, path, {"model": MODEL_NAME, "max_tokens": 8, "stop": "}",
                                         "response_format": {"type": "json_object"}, **extra})
        assert st == 400 and json.loads(raw)["error"]["param"] == "stop", raw


def test_stop_with_a_forced_tool_choice_is_a_400(server):
    st, _, raw = post(server, "/v1/chat/completions", {
        "model": MODEL_NAME, "max_tokens": 8, "stop": ["\n"], "tools": TOOLS, "tool_choice": "required",
        "messages": [{"role": "user", "content": "hi"}]})
    assert st == 400, raw
    err = json.loads(raw)["error"]
    assert err["param"] == "stop" and "tool_choice" in err["message"], err


def test_stop_with_a_raw_grammar_still_applies(server):
    st, _, raw = post(server, "/v1/completions", {
        "model": MODEL_NAME, "prompt": "x", "max_tokens": 16, "stop": ["b"],
        "grammar": 'root ::= "aaab" "c"*'})
    assert st == 200, raw
    ch = json.loads(raw)["choices"][0]
    assert ch["text"] == "aaa" and ch["finish_reason"] == "stop", ch


def _stream_content(raw: bytes) -> str:
    out = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: {"):
            for ch in json.loads(line[6:])["choices"]:
                out += (ch.get("delta") or {}).get("content") or ""
    return out


def test_forced_tool_call_cut_short_leaves_no_tag_text(server):
    """tool_choice required cut by max_tokens inside its opening tag: no '<tool_' in content
    (docs/server.md: a reply cut by max_tokens never shows half a tag), streamed or not."""
    for max_tokens in (1, 2, 3, 5):
        body = {"model": MODEL_NAME, "max_tokens": max_tokens, "tools": TOOLS, "tool_choice": "required",
                "chat_template_kwargs": {"enable_thinking": False},
                "messages": [{"role": "user", "content": "hi"}]}
        st, _, raw = post(server, "/v1/chat/completions", body)
        assert st == 200, raw
        ch = json.loads(raw)["choices"][0]
        assert ch["finish_reason"] == "length" and not ch["message"].get("tool_calls"), ch
        assert not ch["message"]["content"], ch
        st, _, raw = post(server, "/v1/chat/completions", {**body, "stream": True})
        assert st == 200 and raw.rstrip().endswith(b"data: [DONE]"), raw
        assert _stream_content(raw) == "", raw
