"""The pure classification of bench/robustness_cases.py's attack phase (issue 30): the JSON
Schema subset, the constrained-reply outcomes (an unconstrained reply returned as
constrained must be told from a length cut), tool-call arguments, pipelined-response
parsing, the framing verdicts, and the strict close check of exchange() against a local
socket that answers and then keeps the connection open or closes it."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from bench import robustness_cases as rc

SCHEMA = rc.PERSON_SCHEMA
TOOLS = rc.WEATHER_TOOLS


def chat(content=None, finish="stop", calls=None):
    msg = {"role": "assistant", "content": content}
    if calls is not None:
        msg["tool_calls"] = calls
    return {"choices": [{"index": 0, "message": msg, "finish_reason": finish}]}


def call(name="get_weather", args='{"city": "Paris"}'):
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}


def test_schema_valid_subset():
    assert rc.schema_valid({"name": "a", "age": 3}, SCHEMA)
    assert not rc.schema_valid({"name": "a"}, SCHEMA)                     # required
    assert not rc.schema_valid({"name": "a", "age": 3.5}, SCHEMA)         # integer
    assert not rc.schema_valid({"name": "a", "age": True}, SCHEMA)        # bool is no integer
    assert not rc.schema_valid({"name": "a", "age": 3, "x": 1}, SCHEMA)   # additionalProperties
    assert not rc.schema_valid([1], SCHEMA)
    assert rc.schema_valid("xx", {"type": "string", "pattern": "^x+$", "maxLength": 2})
    assert not rc.schema_valid("xxx", {"type": "string", "maxLength": 2})
    assert rc.schema_valid([1, 2], {"type": "array", "items": {"type": "integer"}, "maxItems": 2})
    assert not rc.schema_valid(5, {"type": "integer", "maximum": 4})
    assert rc.schema_valid(None, {"type": ["null", "string"]})
    assert rc.schema_valid({"anything": 1}, {})


def test_constraint_outcome_schema():
    assert rc.constraint_outcome(200, chat('{"name": "a", "age": 3}'), "schema", SCHEMA) == "constrained_valid"
    # the brief's zero-target: finish stop and content not valid
    assert rc.constraint_outcome(200, chat(" admon admon"), "schema", SCHEMA) == "unconstrained_as_constrained"
    assert rc.constraint_outcome(200, chat(""), "schema", SCHEMA) == "unconstrained_as_constrained"
    assert rc.constraint_outcome(200, chat('{"name": 1, "age": 3}'), "schema", SCHEMA) == "unconstrained_as_constrained"
    # a cut: a prefix of a constrained reply, or text that could start none
    assert rc.constraint_outcome(200, chat('{"name": "a', "length"), "schema", SCHEMA) == "cut_length"
    assert rc.constraint_outcome(200, chat(" admon admon", "length"), "schema", SCHEMA) == "cut_length_unconstrained"
    assert rc.constraint_outcome(400, {"error": {"message": "x"}}, "schema", SCHEMA) == "failed_visibly"
    assert rc.constraint_outcome(200, {"error": {"message": "x"}}, "schema", SCHEMA) == "failed_visibly"
    assert rc.constraint_outcome(None, None, "schema", SCHEMA) == "closed"


def test_constraint_outcome_tool():
    ok = chat(None, "tool_calls", [call()])
    assert rc.constraint_outcome(200, ok, "tool", tools=TOOLS) == "constrained_valid"
    assert rc.constraint_outcome(200, chat("Sunny.", "stop"), "tool", tools=TOOLS) == "unconstrained_as_constrained"
    assert rc.constraint_outcome(200, chat(None, "tool_calls", [call("launch")]), "tool",
                                 tools=TOOLS) == "unconstrained_as_constrained"
    assert rc.constraint_outcome(200, chat(None, "tool_calls", [call(args='{"town": 1}')]), "tool",
                                 tools=TOOLS) == "unconstrained_as_constrained"
    assert rc.constraint_outcome(200, chat(None, "length", []), "tool", tools=TOOLS) == "cut_length"
    assert rc.constraint_outcome(200, chat("特朗特朗", "length"), "tool", tools=TOOLS) == "cut_length_unconstrained"


def test_tool_args_outcome():
    assert rc.tool_args_outcome(200, chat(None, "length", [call()])) == "args_valid"
    assert rc.tool_args_outcome(200, chat(None, "length", [])) == "args_valid"
    assert rc.tool_args_outcome(200, chat(None, "length", [call(args='{"city": "ab')])) == "args_invalid"
    assert rc.tool_args_outcome(500, {"error": {}}) == "failed_visibly"


OK_JSON = b'{"status":"ok"}'


def resp(status, body=OK_JSON, chunked=False):
    if chunked:
        return (b"HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                % (status, len(body), body))
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


def test_parse_responses_pipelined_and_interim():
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + resp(200, chunked=True) + resp(404)
    rs = rc.parse_responses(raw)
    assert [r["status"] for r in rs] == [100, 200, 404]
    assert rs[1]["body"] == OK_JSON and all(r["complete"] for r in rs)
    part = rc.parse_responses(resp(200)[:-3], eof=False)
    assert part[0]["complete"] is False


def test_framing_outcome():
    assert rc.framing_outcome(resp(400), True, False, "reject") == "rejected_closed"
    assert rc.framing_outcome(resp(400), False, False, "reject") == "rejected_open"
    assert rc.framing_outcome(resp(501), True, False, "reject") == "rejected_closed"
    assert rc.framing_outcome(resp(413) + resp(200), False, False, "reject") == "served_trailing"
    assert rc.framing_outcome(resp(200) + resp(200), False, False, "reject") == "served"
    assert rc.framing_outcome(b"", False, True, "reject") == "hang"
    assert rc.framing_outcome(b"", True, False, "reject") == "closed"
    assert rc.framing_outcome(resp(200) + resp(200), False, False, "serve") == "served"
    assert rc.framing_outcome(b"HTTP/1.1 100 Continue\r\n\r\n" + resp(200), True, False, "no_100") == "sent_100"
    assert rc.framing_outcome(resp(200), True, False, "no_100") == "no_100"


def test_passthrough_chain_and_cases():
    g = rc.passthrough_chain(5000)
    lines = g.strip().split("\n")
    assert len(lines) == 5000 and lines[0] == "root ::= r1" and lines[-1] == 'r4999 ::= "x"'
    cases = rc.passthrough_cases("m", 1 << 20)
    assert all(json.loads(c.data)["grammar"] for c in cases)
    assert {c.desc.split()[2] for c in cases} >= {"4097", "5000"}


def serve_once(answer: bytes, close: bool):
    """A one-connection server: reads the request, sends answer, then closes or holds on."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    hold = threading.Event()

    def run():
        c, _ = ls.accept()
        c.recv(65536)
        c.sendall(answer)
        if not close:
            hold.wait(5)
        c.close()
        ls.close()
    threading.Thread(target=run, daemon=True).start()
    return ls.getsockname()[1], hold


def test_expect_close_kept_open_and_501():
    err = b'{"error":{"message":"bad framing"}}'
    case = rc.Case("x", b"", ok=("clear_4xx",), expect_close=0.3)
    port, hold = serve_once(resp(400, err), close=False)
    r = rc.exchange("127.0.0.1", port, b"POST / HTTP/1.1\r\n\r\n", 5, expect_close=0.3)
    hold.set()
    assert r.status == 400 and r.closed_after is False and rc.classify(r, case) == "kept_open"
    port, _ = serve_once(resp(400, err), close=True)
    r = rc.exchange("127.0.0.1", port, b"POST / HTTP/1.1\r\n\r\n", 5, expect_close=0.3)
    assert r.closed_after is True and rc.classify(r, case) == "clear_4xx"
    port, _ = serve_once(resp(501, err), close=True)
    r = rc.exchange("127.0.0.1", port, b"POST / HTTP/1.1\r\n\r\n", 5, expect_close=0.3)
    assert rc.classify(r, case) == "rejected_501"
    # without expect_close the old behaviour: a complete answer ends the exchange at once
    port, hold = serve_once(resp(400, err), close=False)
    r = rc.exchange("127.0.0.1", port, b"POST / HTTP/1.1\r\n\r\n", 5)
    hold.set()
    assert r.closed_after is None and rc.classify(r, rc.Case("y")) == "clear_4xx"


def test_attack_expectations_cover_every_class():
    from bench import robustness_attack as ra
    assert set(ra.CLASSES) == set(rc.ATTACK_EXPECT)
    for name, e in rc.ATTACK_EXPECT.items():
        assert e["what"] and set(e["ok"]) <= set(rc.ATTACK_OUTCOMES), name
    for c in rc.framing_cases("m") + rc.tool_definition_cases("m") + rc.attack_grammar_cases("m"):
        assert set(c.ok) <= set(rc.ATTACK_OUTCOMES), c.desc


class _FakeSrv:
    """A server stand-in whose every request takes 50 ms; `inside` is set while one runs (a
    process-shared event: the probe may run in another process)."""

    def __init__(self):
        import multiprocessing as mp
        self.inside = mp.get_context("fork").Event()

    def request(self, method, path, body, timeout=None):
        import time
        self.inside.set()
        time.sleep(0.05)
        self.inside.clear()
        return 200, {}, b'{"usage": {"completion_tokens": 4}}'


@pytest.mark.full  # make test-full only: the test tier's time budget (docs/testing.md)
def test_probe_does_not_count_the_harness_gil():
    """The probe times plain requests in a process of its own: the harness holding its GIL
    (json.loads of a big reply, as the nonstream_big class does) while a probe request is in
    flight is not server latency. A probe thread in the harness's process counted each such
    hold into that request (0.5 s on the tiny model's 14 MB reply)."""
    import time

    from bench import robustness_attack as ra
    big = json.dumps([{"token": "x", "logprob": -1.5, "bytes": [120]}] * 250000)
    srv = _FakeSrv()
    p = ra.Probe(srv, "m", 5.0).start()
    holds = []
    for _ in range(3):
        assert srv.inside.wait(5.0)
        t0 = time.perf_counter()
        json.loads(big)  # holds the GIL throughout
        holds.append(time.perf_counter() - t0)
    time.sleep(0.2)
    live = p.tokens  # the classes read it while the probe runs (nonreading_stream)
    r = p.stop()
    assert live >= 4 * 3, live
    assert min(holds) > 0.2, holds  # each hold outlasts a probe request
    assert r["probes"] >= 5 and r["failed"] == 0, r
    # no probe absorbed a hold: its worst request stays under half the shortest hold (the
    # holds and the probe's own latency both stretch on a loaded machine: at load 6 the
    # holds took 2.2-9.8 s and a probe 0.40 s, past a fixed 0.15 s bound)
    assert r["worst_s"] < 0.5 * min(holds), (r["worst_s"], holds)
    assert r["unfinished_probe_age_s"] is None
    # the slowest probes with when they started, slowest first, inside the probe's run
    sl = r["slowest"]
    assert 1 <= len(sl) <= 10 and sl[0]["latency_s"] == round(r["worst_s"], 4), sl
    assert all(a["latency_s"] >= b["latency_s"] for a, b in zip(sl, sl[1:])), sl
    assert all(0 <= x["start_s"] <= r["ran_s"] for x in sl), (sl, r["ran_s"])


class _FirstSlowSrv:
    """A server stand-in whose first request in each process takes 0.3 s (a forked child's
    copy-on-write faults and first socket, exaggerated) and the rest 10 ms."""

    def __init__(self):
        self.calls = 0

    def request(self, method, path, body, timeout=None):
        import time
        self.calls += 1
        time.sleep(0.3 if self.calls == 1 else 0.01)
        return 200, {}, b'{"usage": {"completion_tokens": 4}}'


def test_probe_warms_up_before_the_class():
    """The probe process makes one untimed request before start() returns, so a child's
    first-request cost (on the tiny models every class's first probe was its slowest) is
    neither counted nor overlapped with the class's start."""
    import time

    from bench import robustness_attack as ra
    t0 = time.perf_counter()
    p = ra.Probe(_FirstSlowSrv(), "m", 5.0).start()
    waited = time.perf_counter() - t0
    time.sleep(0.2)
    r = p.stop()
    assert waited >= 0.3, waited                    # start() waited for the warm-up
    assert r["probes"] >= 3 and r["failed"] == 0, r
    assert r["worst_s"] < 0.2, r                    # and no timed probe paid for it
    assert p.tokens == 4 * r["probes"], (p.tokens, r["probes"])   # its tokens are not the class's


class _ClockSrv:
    """A server stand-in that notes when each request arrives and answers at once."""

    def __init__(self):
        self.at = []

    def request(self, method, path, body, timeout=None):
        import time
        self.at.append(time.perf_counter())
        return 200, {}, b'{"usage": {"completion_tokens": 4}}'


def test_unloaded_samples_keep_the_probe_rhythm():
    """The unloaded reference is taken with the probe's pause before each request: back to
    back, an idle server answered the tiny model's plain request in 2.7 ms against 6.4 ms
    after a 20 ms pause, and the probe's rhythm alone read as a 2.4x slowdown."""
    from bench import robustness_attack as ra
    srv = _ClockSrv()
    v = ra.unloaded_samples(srv, "m", 6, 5.0)
    assert len(v) == 6 and len(srv.at) == 6
    gaps = [b - a for a, b in zip(srv.at, srv.at[1:])]
    assert min(gaps) >= ra.PROBE_GAP_S, gaps
    assert ra.PROBE_GAP_S > 0


def test_hostile_client_nice_is_lowered_and_restored():
    """While a class runs the harness's own thread (the hostile client) is at nice 10 and
    the threads it starts inherit that; the probe (another process) and threads started
    before keep theirs; after the class the thread's nice is what it was. Where the nice
    could not be restored, nothing changes and lower() says None."""
    import os

    from bench import robustness_attack as ra
    tid = threading.get_native_id()
    orig = os.getpriority(os.PRIO_PROCESS, tid)
    before = {}
    ev = threading.Event()

    def old_thread():
        before["tid"] = threading.get_native_id()
        ev.wait(5.0)

    t_old = threading.Thread(target=old_thread)
    t_old.start()
    n = ra._Nice()
    got = n.lower()
    try:
        if not ra._Nice._can_restore(orig):
            assert got is None and os.getpriority(os.PRIO_PROCESS, tid) == orig
            return
        assert got == max(orig, ra.HOSTILE_NICE)
        assert os.getpriority(os.PRIO_PROCESS, tid) == got
        child = {}
        t_new = threading.Thread(target=lambda: child.setdefault(
            "nice", os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        t_new.start()
        t_new.join()
        assert child["nice"] == got, child
        assert os.getpriority(os.PRIO_PROCESS, before["tid"]) == orig
    finally:
        n.restore()
        ev.set()
        t_old.join()
    assert os.getpriority(os.PRIO_PROCESS, tid) == orig


def test_watch_progress_tells_slow_from_stalled():
    """nonstream_big judges a hang by progress: a long request whose token count keeps rising
    is waited for past any reply deadline; one whose count stops (or whose server stops
    answering /metrics) is a stall after stall_s."""
    import threading
    import time

    from bench import robustness_attack as ra

    def runner(seconds):
        ev = threading.Event()
        th = threading.Thread(target=ev.wait, args=(seconds,), daemon=True)
        th.start()
        return th, ev

    # rising: waited for to the end (1.2 s, four times stall_s)
    th, _ = runner(1.2)
    n = iter(range(10 ** 6))
    t0 = time.monotonic()
    why, timeline, last = ra.watch_progress(th, lambda: {"generated": next(n)}, 0.3, 100, poll_s=0.05, keep_s=0.2)
    assert why is None and not th.is_alive(), why
    assert time.monotonic() - t0 >= 1.1
    assert last > 5 and 3 <= len(timeline) <= 8, (last, timeline)
    assert all(b["t_s"] > a["t_s"] and b["generated"] > a["generated"] for a, b in zip(timeline, timeline[1:]))

    # flat after a start: a stall, named with how far it got
    th, ev = runner(30)
    vals = iter([1, 2, 3] + [3] * 10 ** 6)
    t0 = time.monotonic()
    why, _, last = ra.watch_progress(th, lambda: {"generated": next(vals)}, 0.3, 100, poll_s=0.05)
    assert why is not None and "3 of 100" in why and last == 3, why
    assert 0.3 <= time.monotonic() - t0 < 5
    ev.set()

    # /metrics failing is no progress
    th, ev = runner(30)

    def fails():
        raise OSError("connection refused")
    why, timeline, last = ra.watch_progress(th, fails, 0.3, 100, poll_s=0.05)
    assert why is not None and "0 of 100" in why and timeline == [] and last == -1, why
    ev.set()


def test_control_class_counts_towards_no_target():
    """idle_control is the measurement's floor: a miss there does not fail the phase, a miss in
    a hostile class does, and the control's ratio is reported."""
    import collections
    from bench import robustness_attack as ra
    ctl = {"control": True, "latency_met": False, "rss_met": False, "worst_plain_ratio": 2.6, "unacceptable": 0}
    ok = {"latency_met": True, "rss_met": True, "worst_plain_ratio": 1.5, "unacceptable": 0}
    res = ra.aggregate({"classes": {"idle_control": ctl, "n_parallel": dict(ok)}}, collections.Counter(served=3))
    assert res["met"] and res["latency_met_all"] and res["rss_met_all"]
    assert res["control_worst_plain_ratio"] == 2.6
    bad = dict(ok, latency_met=False)
    res = ra.aggregate({"classes": {"idle_control": ctl, "n_parallel": bad}}, collections.Counter(served=3))
    assert not res["met"] and not res["latency_met_all"]
    res = ra.aggregate({"classes": {"n_parallel": dict(ok)}}, collections.Counter(crash=1))
    assert not res["met"] and res["control_worst_plain_ratio"] is None
    lines = ra.summary_lines(dict(res, classes={"idle_control": ctl, "n_parallel": ok}))
    assert lines[0].startswith("attack: 1 classes") and "control" in lines[1]
