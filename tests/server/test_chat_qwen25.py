"""test_chat_qwen25.py — the Qwen2.5 Instruct chat template end to end (docs/chat-template.md):
the tiny checkpoint with its tokenizer.chat_template swapped for
tests/tok/templates/qwen2.5-instruct.jinja (trailing newline and all, as a GGUF converted from
the Hub carries it) loads and chats through kipp, kipp-chat and kipp-server.

- kipp --chat renders the default system message when the conversation has none; --no-think
  is a no-op; kipp-chat says /think cannot change the template and keeps no reasoning.
- kipp-server: the reply is all content, one that opens with <think> too (a template without
  reasoning has nothing to split; the Qwen3 templates would move it to reasoning_content);
  enable_thinking changes nothing; a grammar applies from the first token; a tool call the
  model writes comes back as tool_calls and goes back into the next turn.
The renderings themselves are checked byte for byte against HF by the chat goldens."""
import json
import subprocess

import pytest

from conftest import BUILD, ROOT, VARIED, Srv, start_server
from test_chat_2507 import swap_template

TEMPLATE = ROOT / "tests" / "tok" / "templates" / "qwen2.5-instruct.jinja"
KIPP = str(ROOT / BUILD / "kipp")
USER = [{"role": "user", "content": "Answer in JSON."}]
THINK = 151667  # <think> in the Qwen3 vocabulary the tiny checkpoint uses
DEFAULT = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("chatq25") / "kipp-tiny-qwen2.5-instruct.gguf")
    text = TEMPLATE.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    swap_template(ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf", path, text)
    return path


def kipp(*args):
    return subprocess.run([KIPP, "--backend", "cpu", "--threads", "2", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_renders_the_default_system_message(model):
    head = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    r = kipp("-m", model, "--chat", "-p", "Hi", "--print-prompt")
    assert (r.returncode, r.stdout) == (0, DEFAULT + head), r.stderr
    r = kipp("-m", model, "--system", "S", "-p", "Hi", "--no-think", "--print-prompt")
    assert (r.returncode, r.stdout) == (0, "<|im_start|>system\nS<|im_end|>\n" + head), r.stderr
    r = kipp("-m", model, "--chat", "-p", "Hi", "-n", "4", "--temp", "0")
    assert r.returncode == 0 and r.stdout, r.stderr


def test_kipp_chat_never_thinks(model):
    chat = str(ROOT / BUILD / "kipp-chat")
    r = subprocess.run([chat, "-m", model, "--greedy", "-n", "6", "--backend", "cpu", "-t", "2", "--no-stats",
                        "--no-think"], input="Hi\n/think on\n/history\n", capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "thinking off" in r.stderr and "(qwen2.5-instruct) never thinks" in r.stderr, r.stderr
    assert "[user] Hi" in r.stdout and "[assistant reasoning]" not in r.stdout, r.stdout


@pytest.fixture(scope="module")
def server(model):
    return Srv(start_server("chat-qwen25", "--model-name", "tiny", model=model), model_name="tiny")


def test_reply_is_all_content_even_with_think(server):
    prompt = DEFAULT + "<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n"
    forced = {"logit_bias": {str(THINK): 100}}
    for bias in ({}, forced):
        raw = server.complete(prompt, max_tokens=8, temperature=0, **VARIED, **bias)["choices"][0]["text"]
        assert raw.strip("\n"), raw
        if bias:
            assert raw.startswith("<think>"), raw
        for kw in ({}, {"chat_template_kwargs": {"enable_thinking": False}}):  # ignored, as HF does
            msg = server.chat(USER, max_tokens=8, temperature=0, **VARIED, **bias, **kw)["choices"][0]["message"]
            assert (msg["content"], msg.get("reasoning_content") or "") == (raw.strip("\n"), ""), msg


def test_grammar_starts_at_the_first_token(server):
    for kw in ({}, {"chat_template_kwargs": {"enable_thinking": True}}):
        r = server.chat(USER, max_tokens=10, temperature=0, grammar='root ::= "ok"', **kw)
        assert r["choices"][0]["message"]["content"] == "ok", r


def test_tool_call_round_trip(server):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    r = server.chat(USER, tools=[WEATHER], tool_choice="auto", max_tokens=40, temperature=0,
                    grammar="root ::= " + json.dumps(call))
    msg = r["choices"][0]["message"]
    assert r["choices"][0]["finish_reason"] == "tool_calls", r
    assert not msg["content"] and len(msg["tool_calls"]) == 1, msg
    fn = msg["tool_calls"][0]["function"]
    assert (fn["name"], json.loads(fn["arguments"])) == ("get_weather", {"city": "Paris"}), fn
    # the call and its result go back in (arguments as OpenAI sends them: a JSON string)
    turn = USER + [{"role": "assistant", "content": None, "tool_calls": msg["tool_calls"]},
                   {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": "21C"}]
    r = server.chat(turn, tools=[WEATHER], max_tokens=4, temperature=0)
    assert r["choices"][0]["message"]["content"] is not None, r
