"""Scoring prompts (docs/server.md, "Scoring prompts (`echo`)"): /v1/completions with
`echo: true` answers the prompt's text and, with `logprobs`, its tokens' log-probabilities in
OpenAI's legacy shape before the completion's; `max_tokens: 0` scores without generating.
Checked with the official openai client and raw HTTP, against kipp-perplexity's per-token
values on the same text (cpu backend both), through preemption and the prefix cache, and
through lm-evaluation-harness's local-completions model on the tiny task in lmeval/."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import openai
import pytest

from bench import server_common as sc
from conftest import BUILD, MODEL, MODEL_NAME, ROOT, THREADS, TIMEOUT_SCALE, VARIED
from test_concurrency import run_parallel

TEXT = ("Once upon a time there was a little fox who lived in a quiet forest near the river. "
        "Every morning the fox walked to the water, looked at the clouds and counted the birds "
        "that flew over the hills, one by one, until the sun was high and warm. Then it went "
        "home through the tall grass, past the old mill and the sleeping dog, and told its "
        "sister what it had seen: three herons, a kingfisher and more sparrows than it could count.")
DOC = ROOT / "docs" / "server.md"


def score(srv, prompt, logprobs=1, **kw) -> dict:
    """The choice of an echo request with max_tokens 0 (raw HTTP)."""
    body = {"model": MODEL_NAME, "prompt": prompt, "echo": True, "max_tokens": 0,
            "logprobs": logprobs, **kw}
    st, _, js = srv.post("/v1/completions", body)
    assert st == 200, f"{st}: {js}\n{srv.proc.stderr_tail()}"
    assert js["usage"]["completion_tokens"] == 0
    return js["choices"][0]


def close(a, b, tol=1e-4) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and
                                         math.isclose(a, b, rel_tol=tol, abs_tol=tol))


def same_lp(a: dict, b: dict, n: int | None = None):
    """Two logprobs objects (their first n entries) agree: tokens and offsets exactly, the
    numbers to float rounding (a different batching rounds differently)."""
    for k in ("tokens", "text_offset"):
        assert a[k][:n] == b[k][:n], k
    for i, (x, y) in enumerate(zip(a["token_logprobs"][:n], b["token_logprobs"][:n])):
        assert close(x, y), (i, x, y)
    for i, (x, y) in enumerate(zip(a["top_logprobs"][:n], b["top_logprobs"][:n])):
        assert (x is None and y is None) or (x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)), (i, x, y)


def check_shape(choice, n_prompt: int, n_top: int):
    lp = choice["logprobs"]
    toks, lps, tops, offs = lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"]
    assert len(toks) == len(lps) == len(tops) == len(offs) >= n_prompt
    assert lps[0] is None and tops[0] is None, "the first prompt token has no log-probability"
    assert all(isinstance(x, float) and x <= 0 for x in lps[1:])
    for t in tops[1:]:  # distinct ids may share a text: a dict may hold fewer
        assert 1 <= len(t) <= n_top and all(v <= 0 for v in t.values())
    at = 0
    for tok, off in zip(toks, offs):
        assert off == at, (toks, offs)
        at += len(tok)
    assert "".join(toks) == choice["text"]


# ---- the shape, with the official client ----------------------------------------------------

def test_echo_max_tokens_0(client, tok):
    r = client.completions.create(model=MODEL_NAME, prompt=TEXT, echo=True, max_tokens=0, logprobs=3)
    c = r.choices[0]
    n = len(tok.encode(TEXT))
    assert c.text == TEXT
    assert c.finish_reason == "length"
    assert r.usage.prompt_tokens == n and r.usage.completion_tokens == 0
    assert len(c.logprobs.tokens) == n
    check_shape(c.model_dump(), n, 3)
    # the greedy alternative's log-probability bounds every token's
    for lp, top in zip(c.logprobs.token_logprobs[1:], c.logprobs.top_logprobs[1:]):
        assert lp <= max(top.values()) + 1e-6


def test_echo_then_generation(client, server):
    """The prompt's entries, then the generated tokens' (as a plain request makes them)."""
    plain = client.completions.create(model=MODEL_NAME, prompt=TEXT, max_tokens=5, temperature=0,
                                      logprobs=2, extra_body=VARIED)
    echo = client.completions.create(model=MODEL_NAME, prompt=TEXT, max_tokens=5, temperature=0,
                                     logprobs=2, echo=True, extra_body=VARIED)
    only = score(server, TEXT, logprobs=2)
    n = len(only["logprobs"]["tokens"])
    e, p = echo.choices[0], plain.choices[0]
    assert e.text == TEXT + p.text
    assert e.logprobs.tokens == only["logprobs"]["tokens"] + p.logprobs.tokens
    same_lp(e.logprobs.model_dump(), only["logprobs"], n)
    assert all(close(x, y) for x, y in zip(e.logprobs.token_logprobs[n:], p.logprobs.token_logprobs))
    assert [t.keys() for t in e.logprobs.top_logprobs[n:]] == [t.keys() for t in p.logprobs.top_logprobs]
    assert e.logprobs.text_offset[n:] == [len(TEXT) + o for o in p.logprobs.text_offset]
    assert echo.usage.completion_tokens == 5
    check_shape(e.model_dump(), n, 2)


def test_echo_without_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="hello there", echo=True, max_tokens=3,
                                  temperature=0)
    plain = client.completions.create(model=MODEL_NAME, prompt="hello there", max_tokens=3, temperature=0)
    assert r.choices[0].text == "hello there" + plain.choices[0].text
    assert r.choices[0].logprobs is None


def test_token_id_prompts(server, tok):
    """A string, its token ids and lm-evaluation-harness's [[ids]] score the same."""
    ids = tok.encode(TEXT)
    a, b, c = score(server, TEXT), score(server, ids), score(server, [ids])
    same_lp(a["logprobs"], b["logprobs"])
    same_lp(a["logprobs"], c["logprobs"])
    assert b["text"] == c["text"] == TEXT


def test_n_choices(server):
    body = {"model": MODEL_NAME, "prompt": "The cat sat", "echo": True, "max_tokens": 4, "n": 3,
            "logprobs": 1, "temperature": 1.0, "seed": 5}
    st, _, js = server.post("/v1/completions", body)
    assert st == 200, js
    ref = score(server, "The cat sat")["logprobs"]
    n = len(ref["tokens"])
    assert len(js["choices"]) == 3
    for ch in js["choices"]:
        assert ch["text"].startswith("The cat sat")
        same_lp(ch["logprobs"], ref, n)
        assert len(ch["logprobs"]["tokens"]) == n + 4


def test_streamed(client, server):
    """The first chunk carries the whole echo; the stream adds up to the whole response."""
    kw = dict(model=MODEL_NAME, prompt=TEXT, max_tokens=6, temperature=0, logprobs=1, echo=True,
              extra_body=VARIED)
    whole = client.completions.create(**kw).choices[0]
    chunks = [c for c in client.completions.create(stream=True, **kw) if c.choices]
    first = chunks[0].choices[0]
    assert first.text.startswith(TEXT)
    n = len(score(server, TEXT)["logprobs"]["tokens"])
    assert len(first.logprobs.tokens) == n + 1 and first.logprobs.token_logprobs[0] is None
    assert "".join(c.choices[0].text for c in chunks) == whole.text
    got = {k: [x for c in chunks if c.choices[0].logprobs for x in getattr(c.choices[0].logprobs, k)]
           for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
    same_lp(got, whole.logprobs.model_dump())
    # max_tokens 0: the echo, then the finish
    st = server.stream("/v1/completions", {"model": MODEL_NAME, "prompt": "The cat sat", "echo": True,
                                           "max_tokens": 0, "logprobs": 1, "stream": True})
    assert st.status == 200 and st.done
    ch = st.chunks
    assert ch[0]["choices"][0]["text"] == "The cat sat" and ch[-1]["choices"][0]["finish_reason"] == "length"
    same_lp(ch[0]["choices"][0]["logprobs"], score(server, "The cat sat")["logprobs"])


# ---- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body,param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 0, "echo": False}, "max_tokens"),
    ({"echo": "yes", "max_tokens": 0}, "echo"),
    ({"echo": True, "max_tokens": -1}, "max_tokens"),
    ({"echo": True, "max_tokens": 0, "prompt": [[1, 2], [3, 4]]}, "prompt"),
    ({"echo": True, "max_tokens": 0, "logprobs": 21}, "logprobs"),
], ids=["mt0", "mt0-echo-false", "echo-string", "negative", "two-prompts", "logprobs-21"])
def test_refused(server, body, param):
    st, _, js = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": "abc", **body})
    assert st == 400 and js["error"]["param"] == param, js


def test_refused_client(client):
    """max_tokens 0 without echo, as the official client sends it."""
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="abc", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"


# ---- the numbers: kipp-perplexity's, through preemption and the prefix cache -----------------

def perplexity_per_token(text: str, n_tokens: int, tmp_path) -> dict[int, float]:
    """kipp-perplexity's log-probability of each token it scores (the second half of one
    chunk of n_tokens), by position in the text's tokens."""
    exe = ROOT / BUILD / "kipp-perplexity"
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} is missing (make cpu)", pytrace=False)
    f = tmp_path / "text.txt"
    f.write_text(text)
    out = subprocess.run([str(exe), "-m", MODEL, "--backend", "cpu", "-t", THREADS, "-f", str(f),
                          "-c", str(n_tokens), "--json", "--per-token", "-q"],
                         capture_output=True, text=True, timeout=120 * TIMEOUT_SCALE)
    assert out.returncode == 0, out.stderr
    return {pos: lp for pos, _, lp in json.loads(out.stdout)["per_token"]}


def test_equals_kipp_perplexity(server, tmp_path):
    """Every scored position of kipp-perplexity (a plain one-sequence decode) equals the
    echo's entry (the scheduler's batch, 32 prompt rows a step) to float rounding."""
    c = score(server, TEXT, logprobs=0)
    lps = c["logprobs"]["token_logprobs"]
    n = len(lps)
    assert n > 2 * 32, "the prompt must take several steps of prompt rows"
    ref = perplexity_per_token(TEXT, n, tmp_path)
    assert len(ref) == n - 1 - n // 2
    for pos, lp in ref.items():
        assert math.isclose(lps[pos], lp, rel_tol=1e-4, abs_tol=1e-4), (pos, lps[pos], lp)


def test_prefix_cache_does_not_stand_in(server):
    """A cached prompt is computed again for its log-probabilities (cached_tokens 0), and a
    longer prompt's first entries equal the shorter one's."""
    ref = score(server, TEXT)
    server.complete(TEXT, max_tokens=2, temperature=0)  # the prompt's KV goes to the cache
    st, _, js = server.post("/v1/completions", {"model": MODEL_NAME, "prompt": TEXT, "echo": True,
                                                "max_tokens": 0, "logprobs": 1})
    assert st == 200
    assert js["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    same_lp(js["choices"][0]["logprobs"], ref["logprobs"])
    longer = score(server, TEXT + " The end.")["logprobs"]
    n = len(ref["logprobs"]["tokens"])
    same_lp(longer, ref["logprobs"], n - 1)  # (the last token may merge with what follows)


def test_preemption_scores_once(tight_server):
    """-c 256 --kv-tokens 272: four requests of 180 prompt + 40 generated tokens outgrow the
    pool (two prompts alone do), so some are preempted while prefilling or decoding and
    recomputed; each answer equals its solo run, prompt entries included (none skipped)."""
    s = tight_server
    prompts = [sc.synthetic_ids(180, offset=300 + 41 * i) for i in range(4)]

    def one(p):
        js = s.complete(p, echo=True, max_tokens=40, temperature=0, ignore_eos=True, logprobs=2, **VARIED)
        return js["choices"][0]
    solo = [one(p) for p in prompts]
    m0 = s.metrics()
    par = run_parallel(one, prompts)
    for a, b in zip(par, solo):
        assert a["text"] == b["text"]
        same_lp(a["logprobs"], b["logprobs"])
        assert len(a["logprobs"]["tokens"]) == 220
    s.wait_idle()
    m1 = s.metrics()
    assert m1.get("kipp_requests_preempted_total") > m0.get("kipp_requests_preempted_total"), \
        "the workload was meant to force preemption"


# ---- the documented examples ----------------------------------------------------------------

def doc_section() -> str:
    text = DOC.read_text()
    start = text.index("## Scoring prompts (`echo`)")
    return text[start:text.index("\n## ", start + 1)]


def doc_blocks(lang: str) -> list[str]:
    return re.findall(r"```" + lang + r"\n(.*?)```", doc_section(), re.S)


def test_doc_curl_example(server):
    cmd = doc_blocks("sh")[0].replace("http://localhost:8080", server.url)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60 * TIMEOUT_SCALE)
    assert out.returncode == 0, out.stderr
    got, doc = json.loads(out.stdout), json.loads(doc_blocks("json")[0])
    assert set(got) == set(doc) and set(got["choices"][0]) == set(doc["choices"][0])
    g, d = got["choices"][0], doc["choices"][0]
    assert (g["text"], g["finish_reason"]) == (d["text"], d["finish_reason"])
    assert got["usage"] == doc["usage"]
    for k in ("tokens", "text_offset"):
        assert g["logprobs"][k] == d["logprobs"][k], k
    for a, b in zip(g["logprobs"]["token_logprobs"], d["logprobs"]["token_logprobs"]):
        assert (a is None and b is None) or abs(a - b) < 0.05, (a, b)
    for a, b in zip(g["logprobs"]["top_logprobs"], d["logprobs"]["top_logprobs"]):
        assert (a is None and b is None) or (a.keys() == b.keys() and
                                             all(abs(a[k] - b[k]) < 0.05 for k in a)), (a, b)


@pytest.mark.full  # lm-eval's dependencies cost make test's set-up a minute: stage server-lmeval
def test_lm_eval_harness(server, tok, tmp_path):
    """The documented lm-evaluation-harness run, in a subprocess (offline, its caches under
    tmp_path): it produces the task's result, and each of its log-likelihoods equals the
    one an echo request gives for the same context and continuation."""
    code = doc_blocks("python")[0].replace("http://localhost:8080", server.url)
    code = code.replace(f"model={MODEL_NAME}", f"model={server.model}")
    code += ("import json, sys\n"
             "samples = [{'arguments': s['arguments'], 'resps': s['resps']}"
             " for s in r['samples']['kipp_tiny_choice']]\n"
             "sys.stdout.write('\\nRESULT ' + json.dumps({'results': r['results']['kipp_tiny_choice'],"
             " 'samples': samples}) + '\\n')\n")
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300 * TIMEOUT_SCALE)
    assert out.returncode == 0, out.stderr[-4000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT "):])
    assert res["results"]["sample_len"] == 4 and 0 <= res["results"]["acc,none"] <= 1
    n_checked = 0
    for smp in res["samples"]:
        for (context, continuation), resp in zip(smp["arguments"], smp["resps"]):
            ll = resp[0][0]
            # the harness's split (lm_eval.api.model._encode_pair): the whole text's tokens,
            # the context's count; the continuation scored after the context
            whole = tok.encode(context + continuation)
            n_ctx = len(tok.encode(context))
            lps = score(server, whole)["logprobs"]["token_logprobs"]
            assert math.isclose(sum(lps[n_ctx:]), ll, rel_tol=1e-6, abs_tol=1e-5), (context, continuation)
            n_checked += 1
    assert n_checked == 12
