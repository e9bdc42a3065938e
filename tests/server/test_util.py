"""llama-server's utility endpoints on kipp-server: POST /tokenize (ids, or ids with pieces),
POST /detokenize, POST /apply-template (the prompt a chat request renders to: checked against
the chat endpoint's own usage.prompt_tokens and HF's apply_chat_template) and GET /props,
over raw HTTP and curl. Contract: docs/server.md, "Utility endpoints"; its curl examples
are run from the doc itself (test_doc_examples_run).
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from conftest import API_KEY, CTX, MODEL_NAME, ROOT, Srv, curl, start_server

EMBED_MODEL = str(ROOT / "models" / "tiny-embed" / "kipp-tiny-embed-bf16.gguf")
TEXT = "Hello world: 媽 and 🤗, <|im_end|> and <think>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def post(server, path, body):
    st, _, js = server.post(path, body)
    return st, js


def ok(server, path, body):
    st, js = post(server, path, body)
    assert st == 200, js
    return js


def refused(server, path, body, param, status=400):
    st, js = post(server, path, body)
    assert st == status and js["error"]["param"] == param, (st, js)
    assert js["error"]["type"] == "invalid_request_error"
    return js["error"]["message"]


@pytest.fixture(scope="module")
def embed_server() -> Srv:
    return Srv(start_server("util-embed", model=EMBED_MODEL), model_name="kipp-tiny-embed-bf16")


# ---- /tokenize --------------------------------------------------------------------------------

def test_tokenize_matches_the_tokenizer(server, tok):
    assert ok(server, "/tokenize", {"content": TEXT})["tokens"] == tok.encode(TEXT)
    assert ok(server, "/tokenize", {"content": ""})["tokens"] == []


def test_tokenize_special_text(server):
    """parse_special (default true) reads <|im_end|> as the token, as the chat endpoint does
    by default; false reads it as plain text."""
    assert ok(server, "/tokenize", {"content": "<|im_end|>"})["tokens"] == [151645]
    plain = ok(server, "/tokenize", {"content": "<|im_end|>", "parse_special": False})["tokens"]
    assert len(plain) > 1 and 151645 not in plain


def test_tokenize_with_pieces(server):
    """Each piece is its token's text, or the token's bytes as numbers when they are not
    valid UTF-8 on their own; the pieces' bytes together are the content's bytes."""
    toks = ok(server, "/tokenize", {"content": TEXT, "with_pieces": True})["tokens"]
    assert [t["id"] for t in toks] == ok(server, "/tokenize", {"content": TEXT})["tokens"]
    joined = b"".join(bytes(t["piece"]) if isinstance(t["piece"], list) else t["piece"].encode() for t in toks)
    assert joined == TEXT.encode()
    assert any(isinstance(t["piece"], list) for t in toks), "the emoji's tokens are byte fragments"
    assert {"id": 151645, "piece": "<|im_end|>"} in toks


def test_tokenize_add_special(server, embed_server):
    """add_special appends what the model's tokenizer appends to every input: nothing for a
    Qwen generative model (no BOS), <|endoftext|> for Qwen3-Embedding (HF's
    encode(add_special_tokens=True))."""
    bare = ok(server, "/tokenize", {"content": "hello world"})["tokens"]
    assert ok(server, "/tokenize", {"content": "hello world", "add_special": True})["tokens"] == bare
    emb = ok(embed_server, "/tokenize", {"content": "hello world", "add_special": True})["tokens"]
    assert emb == ok(embed_server, "/tokenize", {"content": "hello world"})["tokens"] + [151643]
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return
    hf = AutoTokenizer.from_pretrained(str(ROOT / "models" / "tiny-embed"))
    assert emb == hf.encode("hello world", add_special_tokens=True)


def test_tokenize_vllm_body(server, tok):
    """vLLM's /tokenize body for a completion's prompt, {"model", "prompt"}, as vllm-router's
    cache_aware and kv_aware policies send it to a replica, answered in vLLM's shape (the
    router reads count); the llama.cpp body keeps its own shape."""
    js = ok(server, "/tokenize", {"model": MODEL_NAME, "prompt": TEXT})
    assert js == {"count": len(tok.encode(TEXT)), "max_model_len": CTX, "tokens": tok.encode(TEXT)}, js
    assert set(ok(server, "/tokenize", {"content": TEXT})) == {"tokens"}
    assert ok(server, "/tokenize", {"prompt": ""}) == {"count": 0, "max_model_len": CTX, "tokens": []}
    refused(server, "/tokenize", {"prompt": "a", "content": "a"}, "prompt")
    refused(server, "/tokenize", {"prompt": ["a"]}, "prompt")
    refused(server, "/tokenize", {"prompt": [1, 2]}, "prompt")


def test_tokenize_refusals(server):
    refused(server, "/tokenize", {}, "content")
    refused(server, "/tokenize", {"content": ["a"]}, "content")
    refused(server, "/tokenize", {"content": "a", "add_special": "yes"}, "add_special")
    refused(server, "/tokenize", {"content": "a", "with_pieces": 1}, "with_pieces")
    refused(server, "/tokenize", {"content": "a", "parse_special": "no"}, "parse_special")
    r = curl(server.url + "/tokenize", "POST", b'{"content": ')
    assert r.status == 400 and "not valid JSON" in r.json()["error"]["message"], r
    r = curl(server.url + "/tokenize", "POST", b"[1]")
    assert r.status == 400 and "JSON object" in r.json()["error"]["message"], r


# ---- /detokenize ------------------------------------------------------------------------------

def test_detokenize_round_trip(server):
    ids = ok(server, "/tokenize", {"content": TEXT})["tokens"]
    assert ok(server, "/detokenize", {"tokens": ids}) == {"content": TEXT}
    assert ok(server, "/detokenize", {"tokens": []}) == {"content": ""}
    # a lone byte fragment is not text: U+FFFD, as HF's decode writes it
    frag = next(t["id"] for t in ok(server, "/tokenize", {"content": TEXT, "with_pieces": True})["tokens"]
                if isinstance(t["piece"], list) and len(t["piece"]) == 1 and t["piece"][0] >= 0x80)
    assert ok(server, "/detokenize", {"tokens": [frag]})["content"] == "\ufffd"


def test_detokenize_refusals(server):
    msg = refused(server, "/detokenize", {"tokens": [9707, 151936]}, "tokens[1]")
    assert "tokens[1]" in msg and "151936" in msg
    refused(server, "/detokenize", {"tokens": [9707, -1]}, "tokens[1]")
    refused(server, "/detokenize", {"tokens": [1, 2, "3"]}, "tokens[2]")
    refused(server, "/detokenize", {"tokens": [1.5]}, "tokens[0]")
    refused(server, "/detokenize", {"tokens": "1 2"}, "tokens")
    refused(server, "/detokenize", {}, "tokens")


# ---- /apply-template --------------------------------------------------------------------------

CHATS = [
    {"messages": [{"role": "user", "content": "Hello"}]},
    {"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                  {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}],
     "reasoning_effort": "none"},
    {"messages": [{"role": "system", "content": "You call tools."}, {"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                      "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "18C"}],
     "tools": TOOLS, "chat_template_kwargs": {"enable_thinking": False}},
]


@pytest.mark.parametrize("body", CHATS, ids=["plain", "parts-developer-effort", "tools"])
def test_apply_template_is_what_chat_tokenizes(server, client, body):
    """/tokenize of /apply-template's prompt is exactly the prompt the chat endpoint counts
    for the same request (usage.prompt_tokens), whatever shapes the request uses."""
    prompt = ok(server, "/apply-template", body)["prompt"]
    ids = ok(server, "/tokenize", {"content": prompt})["tokens"]
    r = client.chat.completions.create(model=MODEL_NAME, max_tokens=1, messages=body["messages"],
                                       **{k: v for k, v in body.items() if k in ("tools", "reasoning_effort")},
                                       extra_body={k: v for k, v in body.items() if k == "chat_template_kwargs"})
    assert len(ids) == r.usage.prompt_tokens


def test_apply_template_matches_hf(server, tok):
    """The prompt is HF apply_chat_template's (what `tok` renders for plain messages)."""
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = ok(server, "/apply-template", {"messages": msgs})["prompt"]
    assert ok(server, "/tokenize", {"content": prompt})["tokens"] == tok.chat_ids(msgs)
    prompt = ok(server, "/apply-template", {"messages": msgs, "tools": TOOLS,
                                            "chat_template_kwargs": {"enable_thinking": False}})["prompt"]
    assert ok(server, "/tokenize", {"content": prompt})["tokens"] == tok.chat_ids(msgs, TOOLS, enable_thinking=False)


def test_apply_template_refusals(server):
    """The chat endpoint's refusals, with its params (model is optional here)."""
    refused(server, "/apply-template", {}, "messages")
    refused(server, "/apply-template", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages[0].content[0].type")
    refused(server, "/apply-template", {"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "max"},
            "reasoning_effort")
    refused(server, "/apply-template", {"messages": [{"role": "user", "content": "x"}], "model": 5}, "model")
    refused(server, "/apply-template", {"messages": [{"role": "assistant"}]}, "messages[0].content")
    # what only the template knows is refused under "messages", as the chat endpoint does
    refused(server, "/apply-template", {"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]},
            "messages")


# ---- /props -----------------------------------------------------------------------------------

def test_props(server):
    st, _, js = server.request("GET", "/props")
    assert st == 200
    p = json.loads(js)
    dgs = p["default_generation_settings"]
    assert dgs["n_ctx"] == CTX
    assert dgs["params"]["temperature"] == 1.0 and dgs["params"]["top_p"] == 1.0 and dgs["params"]["top_k"] == 0
    assert dgs["params"]["max_tokens"] == -1 and dgs["params"]["enable_thinking"] is True
    assert p["total_slots"] == 8  # --parallel's default
    assert p["model_path"] == MODEL_NAME and p["model_alias"] == MODEL_NAME  # the served name, not a path
    assert p["modalities"] == {"vision": False, "audio": False}
    assert p["chat_template_name"] == "qwen3-hybrid" and p["embedding"] is False
    with open(ROOT / "models" / "tiny-tied" / "tokenizer_config.json") as f:
        assert p["chat_template"] == json.load(f)["chat_template"].rstrip("\n")
    assert p["build_info"].startswith("kipp-server")
    kv = p["kv_cache"]  # the pool in the KV types' bytes per token (f16 on cpu: 2 x 2 x 64 x 2 bytes)
    assert (kv["type_k"], kv["type_v"], kv["bytes_per_token"]) == ("f16", "f16", 512), kv
    assert kv["tokens"] == kv["blocks"] * kv["block_size"] and kv["bytes"] == kv["tokens"] * 512, kv


def test_props_embedding_model(embed_server):
    st, _, js = embed_server.request("GET", "/props")
    p = json.loads(js)
    assert st == 200 and p["embedding"] is True and p["model_path"] == "kipp-tiny-embed-bf16", p


def test_utility_routes_need_the_key(auth_server):
    """Auth like every other route: a bearer key or x-api-key."""
    url = auth_server.url
    for path, body in (("/props", None), ("/tokenize", '{"content": "a"}'), ("/detokenize", '{"tokens": [1]}'),
                       ("/apply-template", '{"messages": [{"role": "user", "content": "a"}]}')):
        method = "GET" if body is None else "POST"
        assert curl(url + path, method, body).status == 401
        assert curl(url + path, method, body, headers=[f"Authorization: Bearer {API_KEY}"]).status == 200
        assert curl(url + path, method, body, headers=[f"x-api-key: {API_KEY}"]).status == 200


def test_unknown_fields_are_logged(embed_server):
    """(on this module's own server: a server logs each name once, and only its first 32)"""
    ok(embed_server, "/tokenize", {"content": "a", "n_probs": 3})
    assert "ignoring the request field 'n_probs'" in embed_server.proc.stderr_tail(10 ** 9)


# ---- hostile bodies ---------------------------------------------------------------------------

def test_corpus_bodies_never_fail_the_server(server):
    """tests/fuzz/corpus/util/ (the robustness harness's seeds for these routes, named ROUTE_*):
    each is answered 200 or 400, never 5xx, and the server keeps serving."""
    seeds = sorted((ROOT / "tests" / "fuzz" / "corpus" / "util").glob("*.json"))
    assert len(seeds) >= 15
    for f in seeds:
        route = "/" + f.name.split("_", 1)[0]
        st, _, raw = server.request("POST", route, f.read_bytes(), {"Content-Type": "application/json"})
        assert st in (200, 400), (f.name, st, raw[:300])
        json.loads(raw)
    assert ok(server, "/tokenize", {"content": "still serving"})["tokens"]


# ---- the doc's examples -----------------------------------------------------------------------

def doc_examples(section: str) -> list[tuple[str, str | None]]:
    """(curl command, the JSON block right after it or None) for each sh block of a section."""
    text = (ROOT / "docs" / "server.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```sh\n(.*?)```\n(?:\n```json\n(.*?)```)?", body, re.S)
    return [(cmd, out or None) for cmd, out in found if "curl" in cmd]


def test_doc_examples_run(server):
    """Every curl example in docs/server.md's "Utility endpoints" section, as written (only the
    address changed), answers 200 with JSON, and with the JSON the doc shows after it."""
    examples = doc_examples("Utility endpoints")
    assert len(examples) >= 4
    for cmd, shown in examples:
        cmd = cmd.replace("http://127.0.0.1:8080", server.url).replace("curl ", "curl -sS -f ", 1)
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (cmd, p.stderr)
        got = json.loads(p.stdout)
        if shown is not None:
            assert got == json.loads(shown), (cmd, p.stdout)
