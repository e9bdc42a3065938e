"""n > 1 (docs/server.md): n choices from one prompt, each sampled with seed + i, in one
response (index 0..n-1, usage summing the completions) or interleaved in one stream. The
siblings share the prompt's KV: the first prefills, the others start from a fork of its
sequence (kipp_prefix_live_tokens_total counts the shared tokens), and a choice equals the
same request made alone with n = 1 and that choice's seed."""

from __future__ import annotations

import json
import sys
import threading
import time

import jsonschema
import pytest

from conftest import MODEL_NAME, VARIED, Srv, start_server, thread_nices

PROMPT = "Tell me a story about a robot who learns to paint, in three short sentences, please."
MSGS = [{"role": "user", "content": PROMPT}]


@pytest.fixture(scope="module")
def f32_server() -> Srv:
    """f32 KV: a choice's logits then agree with a solo run's to a few parts per million
    (docs/server.md, "Determinism"), so sampling cannot flip on a rounding difference."""
    return Srv(start_server("n-f32", "--kv-type", "f32"))


def test_choices_equal_single_requests_and_share_the_prefill(f32_server):
    server = f32_server
    before = server.metrics().get("kipp_prefix_live_tokens_total")
    js = server.complete(PROMPT, n=3, max_tokens=12, temperature=1.0, seed=41, **VARIED)
    after = server.wait_idle().get("kipp_prefix_live_tokens_total")
    ch = js["choices"]
    assert [c["index"] for c in ch] == [0, 1, 2]
    assert js["usage"]["completion_tokens"] == sum(12 if c["finish_reason"] == "length" else 0 for c in ch) or \
        js["usage"]["completion_tokens"] >= 3
    n_prompt = js["usage"]["prompt_tokens"]
    assert after - before >= 2 * (n_prompt - 1) - 2, "the siblings did not start from the first one's KV"
    for i, c in enumerate(ch):  # the same text as alone with that seed
        solo = server.complete(PROMPT, max_tokens=12, temperature=1.0, seed=41 + i, **VARIED)
        assert solo["choices"][0]["text"] == c["text"], i
    assert len({c["text"] for c in ch}) > 1, "three seeds gave one text"


def test_siblings_wait_for_the_first_prefill_under_load(server):
    """With the engine busy, the siblings queue and reach admission together: the later
    ones must wait for the first one's prefill rather than prefill the prompt again."""
    import threading
    long_prompt = PROMPT * 6
    busy = threading.Thread(target=lambda: server.complete("Busy " * 40, max_tokens=120, temperature=0,
                                                           ignore_eos=True))
    busy.start()
    try:
        before = server.metrics().get("kipp_prefix_live_tokens_total")
        js = server.complete(long_prompt, n=4, max_tokens=4, temperature=1.0, seed=9)
        after = server.metrics().get("kipp_prefix_live_tokens_total")
    finally:
        busy.join()
    n_prompt = js["usage"]["prompt_tokens"]
    assert after - before >= 3 * (n_prompt - 1), (after - before, n_prompt)


def test_chat_n_greedy_usage(server):
    js = server.chat(MSGS, n=2, max_tokens=6, temperature=0, **VARIED)
    assert len(js["choices"]) == 2
    assert js["choices"][0]["message"]["content"] == js["choices"][1]["message"]["content"]
    solo = server.chat(MSGS, max_tokens=6, temperature=0, **VARIED)
    assert js["usage"]["completion_tokens"] == 2 * solo["usage"]["completion_tokens"]
    assert js["usage"]["prompt_tokens"] == solo["usage"]["prompt_tokens"]


def test_stream_interleaves_choices(f32_server):
    client = f32_server.client()
    kw = dict(model=MODEL_NAME, messages=MSGS, n=3, max_tokens=10, temperature=1.0, seed=5,
              extra_body=VARIED)
    whole = client.chat.completions.create(**kw)
    text, fins = {}, {}
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        for c in chunk.choices:
            text[c.index] = text.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                assert c.index not in fins, "a choice finished twice"
                fins[c.index] = c.finish_reason
        if chunk.usage:
            usage = chunk.usage
    assert sorted(text) == [0, 1, 2] and sorted(fins) == [0, 1, 2]
    for c in whole.choices:
        assert text[c.index] == (c.message.content or ""), c.index
        assert fins[c.index] == c.finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_n_with_a_schema(server):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
                                                                                 "maximum": 99}},
              "required": ["ok", "n"], "additionalProperties": False}
    js = server.chat(MSGS, n=4, max_tokens=40, temperature=1.0, seed=3, chat_template_kwargs={"enable_thinking": False},
                     response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
    assert len(js["choices"]) == 4
    for c in js["choices"]:
        if c["finish_reason"] == "stop":
            jsonschema.validate(json.loads(c["message"]["content"]), schema)


@pytest.mark.parametrize("n", [0, 17, "2"])
def test_bad_n(server, n):
    st, _, js = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "n": n})
    assert st == 400 and js["error"]["param"] == "n", js


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values: Linux")
@pytest.mark.parametrize("n", [4, 1])
def test_stream_of_several_choices_is_bulk(f32_server, n):
    """A stream of n > 1 choices is bulk work (docs/server.md, Back-pressure): its events are
    made on a connection thread at nice +10, which takes the CPU the forward pass leaves; a
    one-choice stream stays at the server's priority. The old code made every stream's
    events at the server's priority (a client catching up on a held n 16 stream made the plain
    requests beside it 6x slower on the tiny model)."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Tell a story."}], "stream": True,
            "n": n, "max_tokens": 200, "temperature": 1.0, "seed": 9, "ignore_eos": True}
    seen: set[int] = set()
    done = threading.Event()
    res: dict = {}
    # a thread at +10 left from the test before (the n 4 stream's connection, a grammar
    # compile: both end on their own; slow under the sanitizers) is not this stream's
    deadline = time.monotonic() + 30
    while 10 in thread_nices(f32_server.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert 10 not in thread_nices(f32_server.proc.pid), "a +10 thread from before did not end"

    def run():
        res["r"] = f32_server.stream("/v1/chat/completions", body)
        done.set()

    th = threading.Thread(target=run)
    th.start()
    while not done.is_set():
        seen.update(thread_nices(f32_server.proc.pid))
        time.sleep(0.002)
    th.join()
    assert 10 in seen if n > 1 else 10 not in seen, (n, sorted(seen))
