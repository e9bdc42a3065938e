"""Grammar cost limits over HTTP (docs/grammar.md "Limits", issue 30 items 1 and 7): grammars
and schema patterns whose masks would hold the engine for seconds per token (nested counted
repetition of something that can be empty) and chains of more than 4,096 rules that only name
the next one are refused at once with a 400 naming the limit; a grammar that passes the
compile-time bound but whose mask runs past the per-token time limit fails visibly (500
server_error naming the limit) while a concurrent plain request still finishes; a hostile
request whose client goes away is cancelled; grammars at the limits still work.

On its own server: on code without the limits the expensive request holds the engine, and
the stall must not leak into other test files."""

from __future__ import annotations

import json
import re
import sys
import threading
import time

import pytest

from conftest import MODEL_NAME, TIMEOUT_SCALE, Srv, start_server, thread_nices
from test_disconnect import raw_post

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Answer."}]
NOTHINK = {"chat_template_kwargs": {"enable_thinking": False}}
TIME_LIMIT = 2.0    # KIPP_MATCHER_TIME_LIMIT_S (src/engine/grammar.h)
# a bound on "at once" and "finishes meanwhile": the old code took 7 s per mask for the first
# grammar, 82 s for a concurrent request behind the second, and never finished WIDE's mask
QUICK = 10 * TIMEOUT_SCALE

# within the compile-time bound, but after "a" its 1,000 stacks lead to 1,000 each: a million
# stacks to merge (the old code's first mask ran for more than a minute)
WIDE = ("root ::= " + " | ".join(['"a" e "!"'] * 1000) + "\ne ::= "
        + " | ".join(f'"w{i}"' for i in range(1000)) + "\n")


def chain(n: int) -> str:
    return "root ::= r1\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(1, n)) + f'r{n} ::= "a"\n'


def schema_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "limits", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def gsrv() -> Srv:
    return Srv(start_server("grammar-limits"))


def body(**fields) -> dict:
    return {"model": MODEL_NAME, "messages": USER, "temperature": 0, **NOTHINK, **fields}


@pytest.mark.parametrize("fields,param,words", [
    ({"grammar": 'root ::= (("x"{0,1000}){0,1000})'}, "grammar",
     "rule 'root' can match the empty string in 65 ways at one point; the limit is 64"),
    ({"grammar": 'root ::= ((("x"{0,1000}){0,1000}){0,1000})'}, "grammar", "the limit is"),
    ({"grammar": 'root ::= "<" item ">"\nitem ::= ("a"? "b"?){0,100}'}, "grammar",
     "grammar line 2: rule 'item'"),
    ({"response_format": schema_format({"type": "string", "pattern": "^((x{0,1000000}){0,1000000})$"})},
     "response_format", "the limit is 4096"),
    ({"response_format": schema_format({"type": "string", "pattern": "^(x{0,1000}){0,1000}$"})},
     "response_format", "the limit is 64"),
    ({"grammar": chain(4097)}, "grammar",
     "rule 'root' needs 4097 rule expansions before it matches a character; the limit is 4096"),
])
def test_costly_grammars_refused_at_once(gsrv, fields, param, words):
    t0 = time.monotonic()
    st, _, js = gsrv.post(CHAT, body(max_tokens=10, **fields), timeout=QUICK)
    elapsed = time.monotonic() - t0
    assert st == 400, js
    assert js["error"]["type"] == "invalid_request_error" and js["error"]["param"] == param, js
    assert words in js["error"]["message"], js
    assert elapsed < QUICK, elapsed


def running(s: Srv) -> float:
    return s.metrics().get("kipp_running_sequences")


def wait_running(s: Srv, n: int = 1) -> None:
    deadline = time.monotonic() + 30 * TIMEOUT_SCALE
    while running(s) < n:
        if time.monotonic() > deadline:
            pytest.fail("the expensive request never started running")
        time.sleep(0.01)


def test_expensive_mask_fails_visibly_and_others_proceed(gsrv):
    before = gsrv.metrics()
    out = {}

    def hostile():
        t0 = time.monotonic()
        out["res"] = gsrv.post(CHAT, body(max_tokens=8, grammar=WIDE), timeout=TIME_LIMIT + QUICK)
        out["s"] = time.monotonic() - t0

    th = threading.Thread(target=hostile)
    th.start()
    try:
        wait_running(gsrv)
        t0 = time.monotonic()  # while its first mask runs (the engine is in that step)
        st, _, js = gsrv.post(CHAT, body(max_tokens=4), timeout=TIME_LIMIT + QUICK)
        plain_s = time.monotonic() - t0
    finally:
        th.join(TIME_LIMIT + QUICK)
    assert st == 200 and js["usage"]["completion_tokens"] >= 1, js
    assert plain_s < TIME_LIMIT + QUICK, plain_s
    hst, _, hjs = out["res"]
    assert hst == 500, hjs
    assert hjs["error"]["type"] == "server_error", hjs
    assert f"time limit of {TIME_LIMIT:g} s" in hjs["error"]["message"], hjs
    assert out["s"] < TIME_LIMIT + QUICK, out["s"]
    after = gsrv.wait_idle()
    assert after.get("kipp_engine_errors_total") >= before.get("kipp_engine_errors_total") + 1
    assert after.get("kipp_running_sequences") == 0


def test_expensive_stream_ends_with_error_event(gsrv):
    r = gsrv.stream(CHAT, body(max_tokens=8, grammar=WIDE, stream=True), timeout=TIME_LIMIT + QUICK)
    assert r.status == 200, r.body
    errors = [c["error"] for c in r.chunks if "error" in c]
    assert errors and errors[0]["type"] == "server_error", r.events
    assert f"time limit of {TIME_LIMIT:g} s" in errors[0]["message"], errors
    assert r.events[-1][1] == "[DONE]", r.events


def test_hostile_client_gone_is_cancelled(gsrv):
    before = gsrv.metrics().get("kipp_requests_cancelled_total")
    sock = raw_post(gsrv, CHAT, {"model": gsrv.model, **body(max_tokens=8, grammar=WIDE)})
    wait_running(gsrv)
    sock.close()
    deadline = time.monotonic() + TIME_LIMIT + QUICK
    while gsrv.metrics().get("kipp_requests_cancelled_total") <= before:
        assert time.monotonic() < deadline, "the hostile request was not cancelled"
        time.sleep(0.02)
    st, _, js = gsrv.post(CHAT, body(max_tokens=4), timeout=QUICK)
    assert st == 200, js
    m = gsrv.wait_idle()
    assert m.get("kipp_running_sequences") == 0


@pytest.mark.parametrize("fields,check", [
    ({"grammar": chain(4096)}, lambda s: s == "a"),
    ({"grammar": 'root ::= ("x"?){0,63} "!"'}, lambda s: re.fullmatch(r"x{0,63}!", s) is not None),
    ({"grammar": 'root ::= ("x"{1,1000}){0,1000} "."'}, lambda s: re.fullmatch(r"x*\.?", s) is not None),
    ({"response_format": schema_format({"type": "string", "pattern": "^x{0,1000000}$"})},  # the flat form
     lambda s: re.fullmatch(r"x*", json.loads(s)) is not None),
    ({"response_format": schema_format({"type": "string", "pattern": "^[a-z]{1,8}-[0-9]{2,4}$"})},
     lambda s: (lambda v: re.fullmatch(r"[a-z]{1,8}-[0-9]{2,4}", v) is not None)(json.loads(s))),
])
def test_grammars_at_the_limits_work(gsrv, fields, check):
    st, _, js = gsrv.post(CHAT, body(max_tokens=60, repetition_penalty=2.0, **fields))
    assert st == 200, js
    ch = js["choices"][0]
    text = ch["message"]["content"]
    if ch["finish_reason"] == "stop":
        assert check(text), text
    else:  # cut by max_tokens: a prefix of a sentence
        assert ch["finish_reason"] == "length", ch


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names and nice values: Linux")
def test_compile_runs_at_bulk_priority(gsrv):
    """A request's grammar is compiled on a thread of its own at nice +10 ("kipp-grammar"),
    so a costly compile (20,000 alternatives, for 16 choices: about 0.4 s on the tiny model)
    takes the CPU the forward pass and other requests leave; the old code compiled on the
    connection's thread at the server's own priority. The reply still follows the grammar."""
    g = "root ::= " + " | ".join(f'"tok{i}"' for i in range(20000)) + "\n"
    seen: list[int] = []
    done = threading.Event()
    res: dict = {}

    def post():
        res["r"] = gsrv.post(CHAT, body(grammar=g, n=16, max_tokens=4), timeout=60)
        done.set()

    th = threading.Thread(target=post)
    th.start()
    while not done.is_set():
        seen += thread_nices(gsrv.proc.pid, "kipp-grammar")
        time.sleep(0.001)
    th.join()
    st, _, js = res["r"]
    assert st == 200, js
    assert all(re.fullmatch(r"(tok\d+)+", c["message"]["content"]) for c in js["choices"]), js["choices"][:2]
    assert seen, "no kipp-grammar thread ran while 16 grammars of 20,000 alternatives compiled"
    assert set(seen) == {10}, seen
