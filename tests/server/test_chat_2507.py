"""test_chat_2507.py — the Qwen3 2507 chat templates end to end (docs/chat-template.md): the
tiny checkpoint with its tokenizer.chat_template swapped for the Instruct-2507 or the
Thinking-2507 text (tests/tok/templates/, as a GGUF converted from those repositories carries
it) loads and chats through kipp and kipp-server.

- kipp --chat renders each template's prompt (Thinking-2507's opens <think>); --no-think is
  a no-op for Instruct-2507 and an error naming the template for Thinking-2507; kipp-chat
  keeps a Thinking-2507 reply as reasoning and says /think cannot change either template.
- kipp-server: Thinking-2507's reply starts inside the reasoning, so a reply without
  </think> is all reasoning_content (equal to what /v1/completions generates from the same
  rendered prompt); Instruct-2507's reply is all content. enable_thinking changes neither.
- A grammar applies from the first token for Instruct-2507 (even with enable_thinking left
  on), and after </think> for Thinking-2507.
The renderings themselves are checked byte for byte against HF by the chat goldens."""
import struct
import subprocess

import pytest

from conftest import BUILD, ROOT, VARIED, Srv, start_server

TEMPLATES = ROOT / "tests" / "tok" / "templates"
KIPP = str(ROOT / BUILD / "kipp")
USER = [{"role": "user", "content": "Answer in JSON."}]
THINK_END = 151668


def swap_template(src, dst, text):
    """Copies the GGUF src to dst with tokenizer.chat_template set to text: the header walked
    with struct (the gguf package's reader takes a minute over a 151k-token vocabulary on a
    busy machine), the tensor data re-aligned after it. Gives the same bytes as gguf-py's
    gguf_new_metadata.py --chat-template-file."""
    data = open(src, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)[0]
        pos += struct.calcsize("<" + fmt)
        return v

    def string():
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n:pos]

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(vtype):
        nonlocal pos
        if vtype == 8:
            string()
        elif vtype == 9:
            etype = take("I")
            count = take("Q")
            if etype in sizes:
                pos += sizes[etype] * count
            else:
                for _ in range(count):
                    skip(etype)
        else:
            pos += sizes[vtype]

    assert data[:4] == b"GGUF", f"{src}: not a GGUF file"
    pos = 8
    n_tensors = take("Q")
    n_kv = take("Q")
    span, align = None, 32
    for _ in range(n_kv):
        key = string()
        vtype = take("I")
        start = pos
        if key == b"general.alignment":
            align = struct.unpack_from("<I", data, pos)[0]
        skip(vtype)
        if key == b"tokenizer.chat_template":
            assert vtype == 8
            span = (start, pos)
    assert span, f"{src}: no tokenizer.chat_template"
    for _ in range(n_tensors):
        string()
        n_dims = take("I")
        pos += 8 * n_dims + 12
    data_start = pos + (-pos % align)
    new = text.encode()
    head = data[:span[0]] + struct.pack("<Q", len(new)) + new + data[span[1]:pos]
    head += b"\0" * (-len(head) % align)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(data[data_start:])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat2507")
    src = ROOT / "models" / "tiny-tied" / "kipp-tiny-tied-bf16.gguf"
    out = {}
    for kind in ("instruct", "thinking"):
        out[kind] = str(d / f"kipp-tiny-{kind}-2507.gguf")
        swap_template(src, out[kind], (TEMPLATES / f"qwen3-{kind}-2507.jinja").read_text(encoding="utf-8"))
    return out


def kipp(*args):
    return subprocess.run([KIPP, "--backend", "cpu", "--threads", "2", *args], capture_output=True,
                          text=True, timeout=120)


HEAD = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_cli_renders_and_chats(models):
    for kind, tail in (("instruct", ""), ("thinking", "<think>\n")):
        r = kipp("-m", models[kind], "--system", "S", "-p", "Hi", "--print-prompt")
        assert (r.returncode, r.stdout) == (0, HEAD + tail), r.stderr
        r = kipp("-m", models[kind], "--chat", "-p", "Hi", "-n", "4", "--temp", "0")
        assert r.returncode == 0 and r.stdout, r.stderr
    # --no-think: Instruct-2507 never thinks (a no-op), Thinking-2507 cannot stop
    r = kipp("-m", models["instruct"], "--system", "S", "-p", "Hi", "--no-think", "--print-prompt")
    assert (r.returncode, r.stdout) == (0, HEAD), r.stderr
    r = kipp("-m", models["thinking"], "--system", "S", "-p", "Hi", "--no-think", "--print-prompt")
    assert r.returncode != 0 and r.stdout == ""
    assert "qwen3-thinking-2507" in r.stderr and "always thinks" in r.stderr, r.stderr


def test_kipp_chat_follows_the_template(models):
    chat = str(ROOT / BUILD / "kipp-chat")
    run = lambda model, *a, stdin="": subprocess.run(  # noqa: E731
        [chat, "-m", model, "--greedy", "-n", "6", "--backend", "cpu", "-t", "2", "--no-stats", *a],
        input=stdin, capture_output=True, text=True, timeout=120)
    r = run(models["thinking"], stdin="Hi\n/think off\n/history\n")
    assert r.returncode == 0, r.stderr
    assert "thinking on" in r.stderr and "(qwen3-thinking-2507) always thinks" in r.stderr, r.stderr
    hist = r.stdout[r.stdout.index("[user] Hi"):]
    assert "\n[assistant reasoning] " in hist and hist.rstrip(" \n").endswith("[assistant]"), hist
    r = run(models["instruct"], stdin="Hi\n/think on\n/history\n")
    assert r.returncode == 0, r.stderr
    assert "thinking off" in r.stderr and "(qwen3-instruct-2507) never thinks" in r.stderr, r.stderr
    assert "[assistant reasoning]" not in r.stdout, r.stdout
    r = run(models["thinking"], "--no-think")
    assert r.returncode == 2 and "(qwen3-thinking-2507) always thinks" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def servers(models):
    return {k: Srv(start_server(f"chat-{k}-2507", "--model-name", "tiny", model=models[k]), model_name="tiny")
            for k in ("instruct", "thinking")}


def test_thinking_reply_starts_in_reasoning(servers):
    s = servers["thinking"]
    raw = s.complete(HEAD.replace("<|im_start|>system\nS<|im_end|>\n", "").replace("Hi", USER[0]["content"])
                     + "<think>\n", max_tokens=12, temperature=0, **VARIED)["choices"][0]["text"]
    assert raw.strip("\n") and "</think>" not in raw and "<think>" not in raw, raw
    for kw in ({}, {"chat_template_kwargs": {"enable_thinking": False}}):  # ignored, as HF does
        msg = s.chat(USER, max_tokens=12, temperature=0, **VARIED, **kw)["choices"][0]["message"]
        assert (msg["reasoning_content"], msg["content"] or "") == (raw.strip("\n"), ""), msg


def test_instruct_reply_is_content(servers):
    s = servers["instruct"]
    raw = s.complete("<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n", max_tokens=12,
                     temperature=0, **VARIED)["choices"][0]["text"]
    assert raw.strip("\n") and "<think>" not in raw, raw
    msg = s.chat(USER, max_tokens=12, temperature=0, **VARIED)["choices"][0]["message"]
    assert (msg["content"], msg.get("reasoning_content") or "") == (raw.strip("\n"), ""), msg


def test_grammar_starts_where_the_template_says(servers):
    # Instruct-2507 never thinks: the grammar applies at once, enable_thinking on or not
    for kw in ({}, {"chat_template_kwargs": {"enable_thinking": True}}):
        r = servers["instruct"].chat(USER, max_tokens=10, temperature=0, grammar='root ::= "ok"', **kw)
        assert r["choices"][0]["message"]["content"] == "ok", r
    # Thinking-2507 starts inside <think>: free until </think> (biased to come first)
    r = servers["thinking"].chat(USER, max_tokens=10, temperature=0, grammar='root ::= "ok"',
                                 logit_bias={str(THINK_END): 80}, logprobs=True)
    assert r["choices"][0]["logprobs"]["content"][0]["token"] == "</think>", r
    msg = r["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"] or "") == ("ok", ""), msg
