"""Sampling and stopping: stop strings (non-stream and stream, chat and completions),
max_tokens -> length, seeded sampling, sampler fields accepted, and logprobs
(completions: integer; chat: logprobs + top_logprobs)."""

from __future__ import annotations

import math

import pytest

from conftest import MODEL_NAME, VARIED
from bench import server_common as sc

PROMPT = "Once upon a time, in a village by the river,"
CHAT = [{"role": "user", "content": "Write a short poem about autumn leaves."}]


def pick_stop(text: str, limit: float = 0.6) -> tuple[str, int]:
    """A stop string taken from text whose first occurrence is as late as possible but ends
    within the first `limit` of the text (so the output must be cut well before max_tokens),
    and that first position."""
    best = None
    for n in (4, 3, 2):
        for i in range(1, len(text) - n + 1):
            s = text[i:i + n]
            if not s.strip():
                continue
            k = text.find(s)
            if k >= 1 and k + n <= limit * len(text) and (best is None or k > best[1]):
                best = (s, k)
        if best and best[1] >= 3:
            break
    if best is None:
        pytest.skip(f"greedy text too short or uniform to pick a stop string: {text!r}")
    return best


@pytest.mark.parametrize("prompt", [PROMPT, sc.synthetic_ids(30, offset=101)], ids=["text", "ids"])
def test_stop_string_completions(server, prompt):
    kw = dict(max_tokens=32, temperature=0, ignore_eos=True, **VARIED)
    full = server.complete(prompt, **kw)["choices"][0]["text"]
    stop, k = pick_stop(full)
    cancelled0 = server.metrics().get("kipp_requests_cancelled_total")
    js = server.complete(prompt, stop=stop, **kw)
    # a stop string is a normal finish, not a client that left (docs/server.md, Metrics)
    assert server.metrics().get("kipp_requests_cancelled_total") == cancelled0
    c = js["choices"][0]
    assert c["finish_reason"] == "stop", (stop, full, c)
    assert c["text"] == full[:k], f"stop={stop!r} full={full!r} got={c['text']!r}"
    assert stop not in c["text"]
    assert js["usage"]["completion_tokens"] < 32
    # a list with non-matching strings and the matching one; and streaming cuts the same way
    js2 = server.complete(prompt, stop=["\u2603never\u2603", stop, "zzqqxxjj"], **kw)
    assert js2["choices"][0]["text"] == full[:k] and js2["choices"][0]["finish_reason"] == "stop"
    # more than OpenAI's 4 (an extension, up to 16): the matching one is the 12th
    many = [f"\u2603never{i}\u2603" for i in range(11)] + [stop] + ["zzqq", "xxjj", "qqzz", "jjxx"]
    js3 = server.complete(prompt, stop=many, **kw)
    assert js3["choices"][0]["text"] == full[:k] and js3["choices"][0]["finish_reason"] == "stop"
    st = server.stream("/v1/completions", {"model": MODEL_NAME, "prompt": prompt, "stop": [stop],
                                           "stream": True, **kw})
    assert st.status == 200 and st.done
    assert st.text() == full[:k], f"streamed text leaked past the stop string {stop!r}: {st.text()!r}"
    assert st.finish_reason() == "stop"


def test_stop_string_chat(server):
    kw = dict(max_tokens=32, temperature=0, ignore_eos=True,
              chat_template_kwargs={"enable_thinking": False}, **VARIED)
    full = server.chat(CHAT, **kw)["choices"][0]["message"]["content"]
    stop, k = pick_stop(full)
    js = server.chat(CHAT, stop=stop, **kw)
    assert js["choices"][0]["finish_reason"] == "stop"
    assert js["choices"][0]["message"]["content"] == full[:k]
    st = server.stream("/v1/chat/completions", {"model": MODEL_NAME, "messages": CHAT, "stop": stop,
                                                "stream": True, **kw})
    assert st.done and st.text() == full[:k] and st.finish_reason() == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["non-stream", "stream"])
def test_stop_string_completed_by_last_token(server, stream):
    """A stop string that completes exactly on the max_tokens-th token: the text is cut and
    the finish reason is stop (the stop string was found; OpenAI reports stop too)."""
    kw = dict(max_tokens=20, temperature=0, ignore_eos=True, **VARIED)
    full = server.complete(PROMPT, **kw)["choices"][0]["text"]
    tail = full[-3:]
    if full.find(tail) != len(full) - 3 or not tail.strip():
        pytest.skip(f"the last characters also occur earlier: {full!r}")
    body = {"model": MODEL_NAME, "prompt": PROMPT, "stop": [tail], **kw}
    if stream:
        st = server.stream("/v1/completions", {**body, "stream": True})
        text, fin = st.text(), st.finish_reason()
    else:
        st, _, js = server.post("/v1/completions", body)
        text, fin = js["choices"][0]["text"], js["choices"][0]["finish_reason"]
    assert text == full[:-3]
    assert fin == "stop", f"stop string {tail!r} ended the text, but finish_reason is {fin!r}"


def test_stop_not_matching_runs_to_length(server):
    js = server.complete(PROMPT, max_tokens=10, temperature=0, ignore_eos=True, stop=["\u2603\u2603never"])
    assert js["choices"][0]["finish_reason"] == "length"
    assert js["usage"]["completion_tokens"] == 10


@pytest.mark.parametrize("n", [1, 7])
def test_max_tokens_length(server, n):
    js = server.complete(PROMPT, max_tokens=n, temperature=0, ignore_eos=True)
    assert js["choices"][0]["finish_reason"] == "length"
    assert js["usage"]["completion_tokens"] == n
    js = server.chat(CHAT, max_tokens=n, temperature=0, ignore_eos=True)
    assert js["choices"][0]["finish_reason"] == "length"
    assert js["usage"]["completion_tokens"] == n


def test_seed_reproducible(server):
    # temperature 1.0; the mild repetition penalty keeps the tiny model from locking onto one
    # token, so that different seeds can show
    kw = dict(max_tokens=32, temperature=1.0, top_p=1.0, ignore_eos=True, repetition_penalty=1.3)
    a = server.complete(PROMPT, seed=1234, **kw)["choices"][0]["text"]
    b = server.complete(PROMPT, seed=1234, **kw)["choices"][0]["text"]
    assert a == b, "same seed, same request: same text"
    others = {server.complete(PROMPT, seed=s, **kw)["choices"][0]["text"] for s in (1, 2, 3, 4)}
    assert len(others | {a}) >= 2, f"five seeds gave identical samples over 32 tokens: {a!r}"
    c = server.chat(CHAT, seed=99, **kw)["choices"][0]["message"]
    d = server.chat(CHAT, seed=99, **kw)["choices"][0]["message"]
    assert c == d


def test_temperature_zero_is_greedy_regardless_of_seed(server):
    a = server.complete(PROMPT, max_tokens=16, temperature=0, seed=1, **VARIED)["choices"][0]["text"]
    b = server.complete(PROMPT, max_tokens=16, temperature=0, seed=2, **VARIED)["choices"][0]["text"]
    assert a == b


def test_sampler_fields_accepted(server):
    js = server.complete(PROMPT, max_tokens=8, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05,
                         presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=1.1, seed=7)
    assert js["usage"]["completion_tokens"] <= 8
    js = server.chat(CHAT, max_tokens=8, temperature=0.7, top_p=0.9, top_k=20, min_p=0.05,
                     presence_penalty=-0.5, frequency_penalty=1.0, repetition_penalty=1.2, seed=7)
    assert js["usage"]["completion_tokens"] <= 8


# ---- logprobs ---------------------------------------------------------------------------------

def test_completions_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert lp is not None, "logprobs requested but absent"
    assert len(lp.tokens) == r.usage.completion_tokens == 8
    assert len(lp.token_logprobs) == 8 and len(lp.top_logprobs) == 8
    for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert isinstance(tok, str)
        assert chosen <= 0 and math.isfinite(chosen)
        vals = list(top.values())
        assert 1 <= len(vals) <= 3, top
        assert vals == sorted(vals, reverse=True), f"top_logprobs not sorted descending: {top}"
        assert all(v <= 0 for v in vals)
        # greedy: the chosen token is the most likely one
        assert abs(chosen - vals[0]) < 1e-4, (chosen, top)
        assert sum(math.exp(v) for v in vals) <= 1.0 + 1e-3
    if lp.text_offset is not None:
        assert len(lp.text_offset) == 8
        assert lp.text_offset == sorted(lp.text_offset)
    if r.choices[0].text.isascii():
        assert "".join(lp.tokens) == r.choices[0].text


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0,
                                       logprobs=True, top_logprobs=5,
                                       extra_body={"ignore_eos": True,
                                                   "chat_template_kwargs": {"enable_thinking": False}})
    content = r.choices[0].logprobs.content
    assert content is not None
    assert len(content) == r.usage.completion_tokens == 8
    for e in content:
        assert e.logprob <= 0 and math.isfinite(e.logprob)
        assert len(e.top_logprobs) == 5
        vals = [t.logprob for t in e.top_logprobs]
        assert vals == sorted(vals, reverse=True), f"top_logprobs not sorted descending: {vals}"
        assert all(v <= 0 for v in vals)
        assert e.top_logprobs[0].token == e.token, "greedy: the chosen token tops the list"
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4
        assert sum(math.exp(v) for v in vals) <= 1.0 + 1e-3
    if all(e.bytes is not None for e in content):
        # the Qwen3 split strips the newlines around content (as Qwen's own parsing does)
        text = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
        assert text.strip("\n") == r.choices[0].message.content.strip("\n") \
            or not r.choices[0].message.content.isascii()
        assert "".join(e.token for e in content) == text


def test_chat_logprobs_sampled_token_present(client):
    """At temperature 1 the chosen token need not be the top one, but its logprob is
    reported and is not above the best one."""
    r = client.chat.completions.create(model=MODEL_NAME, messages=CHAT, max_tokens=16, temperature=1.0,
                                       seed=5, logprobs=True, top_logprobs=3,
                                       extra_body={"ignore_eos": True})
    for e in r.choices[0].logprobs.content:
        assert e.logprob <= e.top_logprobs[0].logprob + 1e-4
        hit = [t for t in e.top_logprobs if t.token == e.token]
        if hit:
            assert abs(hit[0].logprob - e.logprob) < 1e-4


def test_chat_logprobs_off_by_default(server):
    js = server.chat(CHAT, max_tokens=4, temperature=0)
    assert js["choices"][0].get("logprobs") is None


# ---- logit_bias ---------------------------------------------------------------------------------

def _vocab_bytes(tok) -> dict:
    """{token id: its bytes} of the tiny checkpoint's byte-level BPE vocabulary (HF)."""
    if tok.hf is None:
        pytest.skip("needs HF transformers for the vocabulary")
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    out = {}
    for t, i in tok.hf.get_vocab().items():
        try:
            out[i] = bytes(dec[ch] for ch in t)
        except KeyError:  # special tokens
            out[i] = t.encode()
    return out


def _chat_ids(server, by_bytes, **fields) -> list:
    js = server.chat(CHAT, max_tokens=6, temperature=0, ignore_eos=True, logprobs=True,
                     chat_template_kwargs={"enable_thinking": False}, **fields)
    return [by_bytes[bytes(c["bytes"])] for c in js["choices"][0]["logprobs"]["content"]]


def test_logit_bias_bans_and_forces(server, tok):
    """-100 on every token greedy decoding chose keeps them all out of the next run's output;
    +100 on one token makes it every token of the output, sampled or greedy, chat and
    completions."""
    vb = _vocab_bytes(tok)
    by_bytes = {b: i for i, b in sorted(vb.items(), reverse=True)}  # lowest id wins a tie
    base = _chat_ids(server, by_bytes)
    assert len(base) == 6
    banned = _chat_ids(server, by_bytes, logit_bias={str(t): -100 for t in set(base)})
    assert len(banned) == 6 and not set(base) & set(banned), (base, banned)
    forced = _chat_ids(server, by_bytes, logit_bias={"1234": 100})
    assert forced == [1234] * 6
    js = server.complete(PROMPT, max_tokens=5, temperature=0.9, seed=3, ignore_eos=True,
                         logit_bias={"1234": 100})
    assert js["choices"][0]["text"] == vb[1234].decode("utf-8", "replace") * 5


def test_logit_bias_zero_or_empty_changes_nothing(server):
    base = server.complete(PROMPT, max_tokens=8, temperature=0, ignore_eos=True)
    zero = server.complete(PROMPT, max_tokens=8, temperature=0, ignore_eos=True, logit_bias={"17": 0})
    empty = server.complete(PROMPT, max_tokens=8, temperature=0, ignore_eos=True, logit_bias={})
    assert base["choices"][0]["text"] == zero["choices"][0]["text"] == empty["choices"][0]["text"]
